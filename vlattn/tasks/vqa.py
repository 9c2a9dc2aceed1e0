"""Visual question answering: the task's data, model, training stage, validation, evaluation, answering a
question about an image of a feature store, profiling and the majority-answer baseline — the ``vqa`` entry
of :data:`vlattn.tasks.TASKS`.

Data (:class:`VQAData`): VQA v2 questions/annotations files under ``data.root`` (``data.questions`` and
``data.annotations`` with ``{split}`` replaced by each file subtype of ``data.vqa_splits[split]``) and any
feature store vlattn reads (``data.features``). Two vocabularies, stored in every checkpoint: ``words``
(MCAN's question words of ``data.vocab_splits``, seen at least ``data.vocab_min_count`` times) and
``answers`` (the training questions' normalised ``multiple_choice_answer`` seen at least
``data.answer_min_count`` = 9 times; VQA v2 train+val gives MCAN's 3,129). Every question's image must be in
the store (one error names the missing ids). Training skips, and counts, the questions none of whose ten
human answers is a candidate (the ``data`` record of ``metrics.jsonl``); evaluation keeps them (they score
what they score).

Stage ``train``: binary cross-entropy on the soft scores of the ten human answers (each candidate's official
accuracy: 0/0.3/0.6/0.9/1), reduced per ``train.bce_reduction``; ``train.schedule`` (MCAN: ``warmup_multistep``),
``train.epochs``, ``train.batch_size``; ``train.lr_scaling: sqrt_groups`` multiplies the schedule by sqrt(k)
for a group-wise model (LW-Transformer Sec. IV-C, as captioning's ``xe`` stage; checked when a config loads);
validation accuracy (official, in percent) selects the best checkpoint. ``model.word_vectors`` initialises the
question word embeddings from a local GloVe-format file once, before the first epoch of a fresh run (a
``prepare`` hook of the question encoder).

Evaluation answers every question of a split with the top-scoring candidate, writes the results file the
VQA evaluation server expects (``[{"question_id", "answer"}]``, named
``vqa_OpenEnded_mscoco_<subtypes>_<kind>_results.json``) and, when the split has annotations, the official
accuracy overall, per answer type and per question type (:mod:`vlattn.metrics.vqa`).
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from vlattn.config import Config, DataConfig
from vlattn.data.features import open_store
from vlattn.data.features.base import FeatureStore
from vlattn.data.features.cache import CachedStore
from vlattn.data.features.identity import store_fingerprint
from vlattn.data.features.record import store_extractor
from vlattn.pixels.on_the_fly import extract_for_run
from vlattn.data.regions import RegionSampler
from vlattn.data.resources import PrepareResources
from vlattn.data.gqa import load_gqa_split
from vlattn.data.vocab import Vocabulary
from vlattn.data.wordpiece import WordPieceVocabulary
from vlattn.data.vqa import (
    Annotation,
    AnswerVocabulary,
    Question,
    VQADataset,
    VQASplit,
    build_question_vocabulary,
    collate_vqa,
    encode_question,
    load_split,
    question_tokens,
)
from vlattn.errors import ConfigError, DataError
from vlattn.data.jsonfiles import write_json
from vlattn.io import atomic_write_text, content_hash, finish_interrupted_swap
from vlattn.metrics.vqa import evaluate_vqa, normalize_answer
from vlattn.layers.dropout import set_dropout_mask
from vlattn.models import build_vqa_model, check_vqa_model_config
from vlattn.models.profile import classifier_profile, random_regions
from vlattn.scoring.vqa import write_vqa_results
from vlattn.tasks.pretrained import INIT_FROM, PRETRAINING
from vlattn.tasks.base import (
    EvalRequest,
    ProfileShapes,
    check_feature_dim,
    claim_output_dir,
    output_dir,
)
from vlattn.training.answers import answer_loss, answer_objective
from vlattn.training.checkpoint import Checkpoint, load_checkpoint, load_weights
from vlattn.training.distributed import pick_device
from vlattn.training.loop import Objective, Validator
from vlattn.training.schedules import lr_scale
from vlattn.training.stage import Stage

# --- data and model ---------------------------------------------------------------------------------------


@dataclass
class VQAData:
    """The splits (read on first use), vocabularies and feature store of one VQA data set, cut as ``config``
    says (regions per image, question length)."""

    root: Path
    config: DataConfig
    words: Vocabulary | WordPieceVocabulary
    answers: AnswerVocabulary
    store: FeatureStore
    loaded: dict[str, VQASplit] = field(default_factory=dict)
    skipped: int | None = None  # training questions without a candidate answer (after :meth:`train_set`)

    @property
    def feature_extractor(self) -> dict[str, Any] | None:
        """The extractor record of the feature store (None when it has none); every checkpoint keeps it."""
        return store_extractor(self.root / self.config.features)

    @property
    def vocabularies(self) -> dict[str, Vocabulary | AnswerVocabulary]:
        """The named vocabularies a checkpoint of this task stores: ``words`` and ``answers``."""
        return {"words": self.words, "answers": self.answers}

    def split(self, name: str) -> VQASplit:
        """The questions (and annotations, if any) of split ``name``."""
        if name not in self.loaded:
            self.loaded[name] = read_split(self.root, self.config, name)
        return self.loaded[name]

    def dataset(self, name: str, *, training: bool = False, limit: int = 0) -> VQADataset:
        """The questions of split ``name`` (those of its first ``limit`` images when > 0): for training,
        without the questions none of whose answers is a candidate and with the features in the store's dtype
        (the training loop widens them); else all of them."""
        split = self.split(name)
        questions = split.questions
        if limit > 0:
            images = set(sorted({q.image_id for q in questions})[:limit])
            questions = [q for q in questions if q.image_id in images]
        annotated = split.annotations is not None
        if training and not annotated:
            raise DataError(f"split {name!r} has no annotations to train on", path=split.sources[0])
        cfg = self.config
        return VQADataset(
            questions, split.annotations, self.store, self.words, self.answers if annotated else None,
            max_regions=cfg.max_regions, max_question_len=cfg.max_question_len,
            unanswerable="skip" if training else "keep", source=split.sources[0], zero_image=cfg.zero_image,
            stored_dtype=training,
        )

    def fingerprint(self) -> dict[str, str]:
        """Hashes of what the training split holds (questions, annotations) and of the feature store's ids and
        dimension: a resumed run must find the same ones."""
        train = self.split("train")
        annotations = sorted((train.annotations or {}).items())
        return {"questions": content_hash(train.questions), "annotations": content_hash(annotations),
                "features": store_fingerprint(self.store)}

    def train_set(self) -> VQADataset:
        """The training questions with at least one candidate answer (the others are counted in ``skipped``)."""
        dataset = self.dataset("train", training=True)
        self.skipped = dataset.skipped
        return dataset

    def summary(self) -> dict[str, Any]:
        """Sizes for the run log: vocabularies and, once built, the training set and its skipped questions."""
        sizes: dict[str, Any] = {"words": len(self.words), "answers": len(self.answers)}
        if self.skipped is not None:
            sizes.update(train_questions=len(self.split("train").questions), train_skipped=self.skipped)
        return sizes

    def prepare_resources(self, model: nn.Module, seed: int) -> PrepareResources:
        """Training regions, the question words with their training counts and the model's word embeddings
        (the table itself: a word dictionary fitted after the question encoder's word vectors sees them)."""
        questions = self.split("train").questions
        regions = RegionSampler(self.store, sorted({q.image_id for q in questions}), self.config.max_regions)
        words = [i for q in questions for i in encode_question(self.words, q.question, self.config.max_question_len)]
        word_counts = torch.bincount(torch.tensor(words, dtype=torch.long), minlength=len(self.words))  # (V,)
        embeddings = getattr(model, "word_embeddings", None)
        return PrepareResources(
            seed=seed, regions=regions, word_counts=word_counts, words=self.words, data_root=self.root,
            word_embeddings=None if embeddings is None else embeddings.weight.detach(),
        )


def split_files(root: Path, cfg: DataConfig, split: str) -> tuple[list[Path], list[Path]]:
    """The questions and annotations files of ``split`` (one per file subtype of ``data.vqa_splits``)."""
    if split not in cfg.vqa_splits:
        raise DataError(f"unknown split {split!r}; data.vqa_splits has: {', '.join(cfg.vqa_splits)}")
    subtypes = cfg.vqa_splits[split]
    return ([root / cfg.questions.format(split=s) for s in subtypes],
            [root / cfg.annotations.format(split=s) for s in subtypes])


def read_split(root: Path, cfg: DataConfig, split: str) -> VQASplit:
    """Split ``split`` of the data set at ``root`` (VQA v2 files, or GQA's with ``data.format: gqa``)."""
    questions, annotations = split_files(root, cfg, split)
    if cfg.format == "gqa":
        return load_gqa_split(split, questions)
    return load_split(split, questions, annotations)


def question_vocabulary(data: VQAData) -> Vocabulary | WordPieceVocabulary:
    """The question words of ``data.vocab_splits`` or, with ``data.question_tokens: wordpiece``, the WordPiece
    entries of ``data.wordpiece_vocab`` (relative to the data root)."""
    cfg = data.config
    if cfg.question_tokens == "wordpiece":
        return WordPieceVocabulary.from_file(data.root / cfg.wordpiece_vocab)
    return build_question_vocabulary((q for split in cfg.vocab_splits for q in data.split(split).questions),
                                     cfg.vocab_min_count)


def answer_vocabulary(data: VQAData) -> AnswerVocabulary:
    """The frequent training answers (see the module docstring)."""
    cfg, train = data.config, data.split("train")
    if train.annotations is None:
        raise DataError("the train split has no annotations to take candidate answers from", path=train.sources[0])
    answers = AnswerVocabulary.build((a.multiple_choice_answer for a in train.annotations.values()),
                                     min_count=cfg.answer_min_count)
    if not len(answers):
        raise DataError(f"no training answer is given {cfg.answer_min_count} times (data.answer_min_count)",
                        path=train.sources[0])
    return answers


def load_vqa_data(cfg: DataConfig, words: Vocabulary | WordPieceVocabulary | None = None, answers: AnswerVocabulary | None = None) -> VQAData:
    """The data set under ``cfg.root``, with the given vocabularies or ones built from the training split (the
    question words: :func:`question_vocabulary`)."""
    root = Path(cfg.root)
    finish_interrupted_swap(root)  # a `vlattn data synth --overwrite` killed between its renames
    data = VQAData(root, cfg, words or Vocabulary([]), answers or AnswerVocabulary([]), CachedStore(open_store(root / cfg.features), cfg.region_cache_mb << 20))
    if words is None:
        data.words = question_vocabulary(data)
    if answers is None:
        data.answers = answer_vocabulary(data)
    return data


def checkpoint_vocabularies(checkpoint: Checkpoint) -> tuple[Vocabulary | WordPieceVocabulary, AnswerVocabulary]:
    """The ``words`` and ``answers`` vocabularies of a VQA checkpoint (checked against its weights)."""
    if checkpoint.config.task != VQA.name:
        raise ConfigError(f"{checkpoint.path}: a {checkpoint.config.task} checkpoint; this needs a VQA model")
    wordpiece = checkpoint.config.data.question_tokens == "wordpiece"
    words = checkpoint.vocabulary("words", WordPieceVocabulary.load if wordpiece else Vocabulary.load)
    return words, checkpoint.vocabulary("answers", AnswerVocabulary.load)


def stage_data(cfg: Config, source: Checkpoint | None) -> VQAData:
    """The data of the training stage, with the vocabularies of ``source`` when the run starts from one."""
    if source is None:
        return load_vqa_data(cfg.data)
    if source.config.task == PRETRAINING:  # a pretrained encoder: its WordPiece entries, this data set's answers
        return load_vqa_data(cfg.data, source.vocabulary("words", WordPieceVocabulary.load))
    return load_vqa_data(cfg.data, *checkpoint_vocabularies(source))


def build_model(cfg: Config, words: Vocabulary | WordPieceVocabulary, answers: AnswerVocabulary, store_dim: int | None = None) -> nn.Module:
    """The VQA model of ``cfg.model`` for the vocabularies (checks the feature size against the store)."""
    check_feature_dim(cfg.model, store_dim)
    return new_vqa_model(cfg, len(words), len(answers))


def new_vqa_model(cfg: Config, vocab_size: int, num_answers: int) -> nn.Module:
    """The randomly initialised VQA model of ``cfg.model`` over ``vocab_size`` question words (the special tokens
    included) and ``num_answers`` candidate answers, with the config's dropout masks."""
    return set_dropout_mask(build_vqa_model(cfg.model, vocab_size, num_answers, pad_id=Vocabulary.PAD),
                            cfg.model.dropout_mask)


# --- answering and scoring --------------------------------------------------------------------------------


def predict(model: nn.Module, dataset: VQADataset, *, batch_size: int, device: torch.device) -> dict[int, torch.Tensor]:
    """``{question_id: answer scores (A,)}`` (sigmoid of the logits) for every question of ``dataset``."""
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, collate_fn=collate_vqa)
    scores: dict[int, torch.Tensor] = {}
    model.eval()
    with torch.no_grad():
        for batch in loader:
            inputs = {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}
            probabilities = model(inputs).sigmoid().cpu()  # (B, A)
            scores.update(zip(batch["question_ids"].tolist(), probabilities))
    return scores


def answer_dataset(model: nn.Module, dataset: VQADataset, answers: AnswerVocabulary, *, batch_size: int,
                   device: torch.device) -> dict[int, str]:
    """``{question_id: the top-scoring candidate answer}``."""
    scores = predict(model, dataset, batch_size=batch_size, device=device)
    return {qid: answers.itos[int(row.argmax())] for qid, row in scores.items()}


def accuracy_metrics(predictions: Mapping[int, str], annotations: Mapping[int, Annotation]) -> dict[str, float]:
    """Official accuracy in percent: ``accuracy`` overall and one entry per answer type."""
    report = evaluate_vqa(predictions, annotations)
    return {"accuracy": report.overall, **report.per_answer_type}


def majority_by_question_type(annotations: Mapping[int, Annotation]) -> tuple[dict[str, str], str]:
    """The most frequent normalised ``multiple_choice_answer`` of each question type, and of all questions
    (the fallback for unseen types); ties by answer."""
    by_type: dict[str, Counter[str]] = defaultdict(Counter)
    for annotation in annotations.values():
        by_type[annotation.question_type][normalize_answer(annotation.multiple_choice_answer)] += 1
    overall = sum(by_type.values(), Counter())

    def top(counts: Counter[str]) -> str:
        return min(counts, key=lambda answer: (-counts[answer], answer))

    return {kind: top(counts) for kind, counts in by_type.items()}, top(overall)


def majority_baseline(train: Mapping[int, Annotation], evaluated: Mapping[int, Annotation]) -> dict[str, Any]:
    """The prior baseline: every question answered with its question type's majority training answer;
    the official accuracy report (``VQAReport.to_dict``) of those answers on ``evaluated``."""
    table, fallback = majority_by_question_type(train)
    predictions = {qid: table.get(a.question_type, fallback) for qid, a in evaluated.items()}
    return evaluate_vqa(predictions, evaluated).to_dict()


# --- stage ------------------------------------------------------------------------------------------------


def make_validator(cfg: Config, data: VQAData, device: torch.device) -> Validator:
    """Validation: answer the val split (the questions of its first ``train.val_max_images`` images when > 0);
    official accuracy overall and per answer type."""
    dataset = data.dataset("val", limit=cfg.train.val_max_images)
    annotations = data.split("val").annotations
    if annotations is None:
        raise DataError("the val split has no annotations to validate on", path=data.split("val").sources[0])

    def validate(model: nn.Module) -> dict[str, float]:
        answers = answer_dataset(model, dataset, data.answers, batch_size=cfg.eval.batch_size, device=device)
        return accuracy_metrics(answers, annotations)

    return validate


def _objective(cfg: Config, data: VQAData, device: torch.device) -> Objective:
    return answer_objective(cfg.train.bce_reduction)


TRAIN: Stage[VQAData] = Stage(
    name="train",
    summary="binary cross-entropy on the soft scores of the human answers",
    load_data=stage_data,
    build_model=lambda cfg, data: build_model(cfg, data.words, data.answers, data.store.dim),
    objective=_objective,
    train_set=lambda cfg, data: data.train_set(),
    collate=collate_vqa,
    validator=make_validator,
    selection_metric="accuracy",
    lr_scaling=True,
    init_from=INIT_FROM,
)


# --- evaluation, answering, profiling ---------------------------------------------------------------------


def load_model(checkpoint: Checkpoint, words: Vocabulary | WordPieceVocabulary, answers: AnswerVocabulary, store_dim: int,
               device: torch.device) -> nn.Module:
    model = build_model(checkpoint.config, words, answers, store_dim)
    load_weights(model, checkpoint)
    return model.to(device).eval()


def results_name(cfg: Config, split: str) -> str:
    """The evaluation server's file name: ``vqa_OpenEnded_mscoco_<subtypes>_<kind>_results.json`` (GQA:
    ``gqa_<subtypes>_<kind>_predictions.json``)."""
    subtypes = "+".join(cfg.data.vqa_splits.get(split, [split]))
    if cfg.data.format == "gqa":
        return f"gqa_{subtypes}_{cfg.model.kind}_predictions.json"
    return f"vqa_OpenEnded_mscoco_{subtypes}_{cfg.model.kind}_results.json"


def answer(
    checkpoint_path: str | Path, features: str | Path | None, image_id: int | None, question: str, *, top: int = 5,
    device: str = "auto", image: str | Path | None = None, extractor: str | None = None, weights: str | None = None,
) -> dict[str, Any]:
    """The ``top`` candidate answers (with their sigmoid scores) to ``question`` about image ``image_id`` of
    the feature store ``features``, or about the image file ``image`` (features made with the run's extractor,
    :func:`vlattn.pixels.on_the_fly.extract_for_run`); also the question's words as the model reads them
    (``<unk>`` for words outside its vocabulary)."""
    if top < 1:
        raise ConfigError(f"--top: must be >= 1, got {top}")
    if (image is None) == (features is None or image_id is None):
        raise ConfigError("give either --features with --image-id (a feature store) or --image (an image file)")
    checkpoint = load_checkpoint(checkpoint_path)
    words, answers = checkpoint_vocabularies(checkpoint)
    cfg = checkpoint.config
    if not question_tokens(question):
        raise DataError("the question has no words", item=question)
    dev = pick_device(device)
    if image is not None:
        store: FeatureStore = extract_for_run(checkpoint.extractor, [Path(image)], dev, extractor=extractor,
                                              weights=weights)
        image_id = 0
    else:
        assert features is not None and image_id is not None
        store = open_store(features)
        if image_id not in store:
            raise DataError("image id not in the feature store", path=features, item=image_id)
    model = load_model(checkpoint, words, answers, store.dim, dev)
    dataset = VQADataset([Question(0, image_id, question)], None, store, words, None, max_regions=cfg.data.max_regions,
                         max_question_len=cfg.data.max_question_len, zero_image=cfg.data.zero_image)
    scores = predict(model, dataset, batch_size=1, device=dev)[0]
    best = scores.topk(min(top, len(answers)))
    read = [words.itos[i] for i in dataset[0]["question"]]
    return {
        "image_id": image_id,
        **({"file": str(image)} if image is not None else {}),
        "question": question,
        "words": read,
        "answers": [{"answer": answers.itos[i], "score": round(float(s), 6)} for s, i in zip(best.values, best.indices)],
    }


def format_answers(result: Mapping[str, Any]) -> str:
    """``vlattn answer``'s table: the question as read, then one line per answer with its score."""
    lines = [f"image {result.get('file', result['image_id'])}: {result['question']}",
             f"  read as: {' '.join(result['words'])}"]
    lines += [f"  {row['score']:.3f}  {row['answer']}" for row in result["answers"]]
    return "\n".join(lines)


def vqa_batch(shapes: ProfileShapes, feature_dim: int) -> dict[str, torch.Tensor]:
    """Random model inputs of the profile shapes: regions, questions of ``length`` words, soft targets."""
    generator = torch.Generator().manual_seed(0)
    inputs = random_regions(shapes.batch, shapes.regions, feature_dim, generator)
    questions = torch.randint(4, shapes.vocab_size, (shapes.batch, shapes.length), generator=generator)
    targets = torch.rand(shapes.batch, shapes.answers, generator=generator)
    return {**inputs, "questions": questions, "question_mask": torch.ones_like(questions, dtype=torch.bool),
            "targets": targets}


class VisualQuestionAnswering:
    """The VQA task (see the module docstring)."""

    name = "vqa"
    stages: dict[str, Stage] = {"train": TRAIN}
    # beside what its stage reads (Stage.reads): the VQA files, question and answer vocabularies, the loss
    reads = frozenset({
        "data.features", "data.questions", "data.annotations", "data.vqa_splits", "data.vocab_min_count",
        "data.vocab_splits", "data.max_regions", "data.max_question_len", "data.answer_min_count", "data.zero_image",
        "data.region_cache_mb", "data.format", "data.question_tokens", "data.wordpiece_vocab", "train.bce_reduction",
        "train.val_max_images", "eval.batch_size",
    })
    # MCAN: up to 100 regions, 14 question words, 3,129 candidate answers
    profile_shapes = ProfileShapes(length=14, answers=3129, default_regions=100)

    def create_model(self, cfg: Config, *, vocab_size: int, num_answers: int | None = None) -> nn.Module:
        """A new VQA model over ``vocab_size`` question words (the special tokens included) and ``num_answers``
        candidate answers."""
        if num_answers is None:
            raise ConfigError("num_answers: a VQA model needs the number of candidate answers")
        return new_vqa_model(cfg, vocab_size, num_answers)

    def check(self, cfg: Config) -> None:
        """Build the VQA model on the meta device (every model option, site and mechanism is checked), check
        ``train.lr_scaling`` against it and the question tokens against what the model reads."""
        model = check_vqa_model_config(cfg.model)
        lr_scale(cfg.train.lr_scaling, model)
        reads = getattr(model, "question_tokens", "words")
        if cfg.data.question_tokens != reads:
            raise ConfigError(f"data.question_tokens: model.kind {cfg.model.kind!r} reads {reads!r} questions, "
                              f"got {cfg.data.question_tokens!r}")

    def evaluate(self, checkpoint: Checkpoint, request: EvalRequest) -> dict[str, Any]:
        """Answer ``request.split`` (default ``val``), write the results file and, with annotations, the official
        accuracy table under :func:`~vlattn.tasks.base.output_dir`; returns the report."""
        cfg = checkpoint.config
        split = request.split or "val"
        if request.beam_size is not None:
            raise ConfigError("--beam-size: a VQA model answers by classification, without decoding; leave it out")
        if request.packed_output is not None:
            raise ConfigError("--packed-output: packs a captioner's vocabulary projection; a VQA model has none")
        if request.data_root is not None:
            cfg.data.root = str(request.data_root)
        words, answers = checkpoint_vocabularies(checkpoint)
        data = load_vqa_data(cfg.data, words, answers)
        dataset = data.dataset(split)
        dev = pick_device(request.device)
        model = load_model(checkpoint, words, answers, data.store.dim, dev)
        predictions = answer_dataset(model, dataset, answers, batch_size=cfg.eval.batch_size, device=dev)
        out = output_dir(checkpoint)
        results = out / results_name(cfg, split)
        report: dict[str, Any] = {"split": split, "checkpoint": str(checkpoint.path),
                                  "data_root": str(Path(cfg.data.root).resolve()), "questions": len(predictions),
                                  "results": str(results)}
        annotations = data.split(split).annotations
        if annotations is not None:
            unanswerable = sum(not scores for scores in dataset.targets)  # no candidate among the human answers
            report.update(unanswerable=unanswerable, format=cfg.data.format,
                          **evaluate_vqa(predictions, annotations).to_dict())
        request.shown(report)
        claim_output_dir(out)
        external = data.split(split).external_ids
        if external is None:
            write_vqa_results(results, predictions)
        else:  # GQA's submission format, its own question ids
            write_json(results, [{"questionId": external[qid], "prediction": answer}
                                 for qid, answer in sorted(predictions.items())])
        atomic_write_text(out / f"{split}_metrics.json", json.dumps(report, indent=1))
        return report

    def format_report(self, report: dict[str, Any]) -> str:
        """The accuracy table of :meth:`evaluate`'s report (official accuracy, percent)."""
        lines = [f"{report['split']}: {report['questions']:,} questions ({report['checkpoint']})"]
        if "overall" not in report:
            lines.append("  no annotations for this split: results file written for the evaluation server")
        else:
            lines += format_accuracy(report)
            lines.append(f"  ({report['unanswerable']:,} questions have no human answer among the candidates)")
        lines.append(f"results: {report['results']}")
        return "\n".join(lines)

    def profile(self, cfg: Config, shapes: ProfileShapes) -> dict[str, Any]:
        """Parameters (total, per top-level module, the encoder-decoder backbone), FLOPs of a training step
        (forward, BCE, backward) and of answering a batch, backbone multiply-adds per question, latency."""
        check_vqa_model_config(cfg.model, shapes.vocab_size, shapes.answers)  # the weights fit in memory
        model = build_vqa_model(cfg.model, shapes.vocab_size, shapes.answers)
        shapes = shapes.for_model(model)
        inputs = vqa_batch(shapes, cfg.model.feature_dim)
        single = vqa_batch(dataclasses.replace(shapes, batch=1), cfg.model.feature_dim)
        measured = classifier_profile(model, inputs, single,
                                      lambda logits: answer_loss(logits, inputs["targets"], cfg.train.bce_reduction),
                                      shapes.repeats, "answer_batch")
        return {
            "model": cfg.model.kind,
            "shapes": {"batch": shapes.batch, "regions": shapes.regions, "length": shapes.length,
                       "feature_dim": cfg.model.feature_dim, "vocab": shapes.vocab_size, "answers": shapes.answers},
            **measured,
        }


def format_accuracy(report: Mapping[str, Any]) -> list[str]:
    """Lines of the accuracy table of a ``VQAReport.to_dict()``: overall, per answer type, per question type
    (GQA: per structural and per semantic type)."""
    gqa = report.get("format") == "gqa"
    lines = [f"  {'overall':<24} {report['overall']:6.2f}"]
    if gqa:
        lines.append("  per structural type:")
    lines += [f"  {kind:<24} {value:6.2f}" for kind, value in report["perAnswerType"].items()]
    lines.append("  per semantic type:" if gqa else "  per question type:")
    lines += [f"    {kind:<22} {value:6.2f}" for kind, value in report["perQuestionType"].items()]
    return lines


VQA = VisualQuestionAnswering()
