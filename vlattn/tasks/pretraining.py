"""Vision-language pretraining as LXMERT does it (Tan and Bansal 2019, Sec. 3): the ``pretraining`` entry of
:data:`vlattn.tasks.TASKS`, one stage, ``pretrain``.

Data (:class:`PretrainData`): image-sentence pairs from a captioning set (every caption of ``data.karpathy``'s
split) and a VQA set (every question of ``data.vqa_splits[split]``'s ``data.questions``/``data.annotations``
files) over one feature store (``data.features``), as the paper pairs COCO captions with VQA v2 (and Visual
Genome, GQA; the released ``mscoco_train,mscoco_nominival,vgnococo``); ``train.pretrain.captions`` /
``questions`` choose the sources. Sentences are BERT WordPiece (``data.wordpiece_vocab``; ``[MASK]`` required),
cut to ``data.max_question_len`` ids; each region's detector labels come from the store
(:mod:`vlattn.data.features.labels`: bottom-up's ``objects_id``/``attrs_id`` of LXMERT's TSV files, the classes
of the synthetic set's store). Two vocabularies go into every checkpoint: ``words`` (the WordPiece entries) and
``answers`` (the training questions' answers seen ``data.answer_min_count`` times: the QA head's outputs).

Model: the config's model kind (one serving ``pretraining``: an encoder with ``encode``, ``head`` and
``word_embeddings``, e.g. ``lxmert``) built with the answers as its classifier's outputs, wrapped with the
pretraining heads (:mod:`vlattn.models.pretraining`). Objective and its paper/released-code options:
:mod:`vlattn.training.pretraining` (``train.pretrain``). Validation: the tasks' accuracies and losses on the val
pairs (the questions of the first ``train.val_max_images`` val images when > 0), corrupted by the same seeded draws at
every epoch; ``minus_loss`` selects the best checkpoint.

A pretrained run is the ``--init`` of the fine-tuning stages of ``vqa`` and ``nlvr2`` with the same ``model``
section: :func:`vlattn.tasks.pretrained.load_pretrained` loads the encoder (everything but the classifier ``head``, which the fine-tuning
task sizes for its own answers and initialises anew, as the released ``--loadLXMERT``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from vlattn.config import Config, DataConfig, parse_options
from vlattn.data.features import open_store
from vlattn.data.features.base import FeatureStore
from vlattn.data.features.cache import CachedStore
from vlattn.data.features.identity import store_fingerprint
from vlattn.data.features.labels import region_labels
from vlattn.data.features.record import store_extractor
from vlattn.data.karpathy import load_karpathy
from vlattn.data.pretraining import Pair, PretrainDataset, caption_pairs, collate_pretrain, question_pairs
from vlattn.data.regions import RegionSampler
from vlattn.data.vqa_answers import AnswerVocabulary
from vlattn.data.wordpiece import WordPieceVocabulary
from vlattn.errors import ConfigError, DataError
from vlattn.io import atomic_write_text, content_hash
from vlattn.layers.dropout import set_dropout_mask
from vlattn.models import model_kind, without_initialisation
from vlattn.models.footprint import check_footprint
from vlattn.models.init import bert_init
from vlattn.models.pretraining import PretrainingHeads, PretrainingModel
from vlattn.models.profile import classifier_profile, random_regions
from vlattn.tasks.base import (
    EvalRequest,
    ProfileShapes,
    check_feature_dim,
    claim_output_dir,
    output_dir,
)
from vlattn.tasks.pretrained import PRETRAINING as NAME
from vlattn.tasks.vqa import read_split
from vlattn.training.checkpoint import Checkpoint, load_weights
from vlattn.training.distributed import pick_device
from vlattn.training.loop import Validator
from vlattn.training.prepare import PrepareResources
from vlattn.training.pretraining import (
    PretrainObjective,
    PretrainOptions,
    PretrainSettings,
    Vocabulary,
    corrupt,
    validation_metrics,
)
from vlattn.training.stage import Stage

MASK = "[MASK]"
VALIDATION_SEED = 9595  # the corruption of the validation pairs, the same at every epoch


def pretrain_options(cfg: Config) -> PretrainOptions:
    """``train.pretrain`` validated (one-line ``ConfigError`` naming the key)."""
    return parse_options(PretrainOptions, cfg.train.pretrain, "train.pretrain")


@dataclass
class PretrainData:
    """The pairs of each split (built on first use), the WordPiece and answer vocabularies and the feature store."""

    root: Path
    config: DataConfig
    options: PretrainOptions
    words: WordPieceVocabulary
    answers: AnswerVocabulary
    store: FeatureStore
    loaded: dict[str, list[Pair]] = field(default_factory=dict)
    datasets: dict[str, PretrainDataset] = field(default_factory=dict)

    @property
    def vocabularies(self) -> dict[str, WordPieceVocabulary | AnswerVocabulary]:
        return {"words": self.words, "answers": self.answers}

    @property
    def feature_extractor(self) -> dict[str, Any] | None:
        return store_extractor(self.root / self.config.features)

    def pairs(self, split: str) -> list[Pair]:
        """The captions and questions of ``split`` (``train``/``val``) as image-sentence pairs."""
        if split not in self.loaded:
            pairs: list[Pair] = []
            if self.options.captions:
                pairs += caption_pairs(load_karpathy(self.root / self.config.karpathy), split)
            if self.options.questions:
                pairs += question_pairs(read_split(self.root, self.config, split), self.answers)
            self.loaded[split] = pairs
        return self.loaded[split]

    def dataset(self, split: str, limit: int = 0, *, training: bool = False) -> PretrainDataset:
        """The pairs of ``split`` (those of its first ``limit`` images when > 0) with their regions and labels; for
        ``training``, the features in the store's dtype (the training loop widens them), else float32."""
        key = f"{split}:{limit}:{training}"
        if key not in self.datasets:
            pairs = self.pairs(split)
            if limit > 0:
                images = set(sorted({p.image_id for p in pairs})[:limit])
                pairs = [p for p in pairs if p.image_id in images]
            self.datasets[key] = PretrainDataset(
                pairs, self.store, self.words, len(self.answers), max_regions=self.config.max_regions,
                max_length=self.config.max_question_len, object_classes=self.options.object_classes,
                attribute_classes=self.options.attribute_classes, source=self.root, stored_dtype=training)
        return self.datasets[key]

    def train_set(self) -> PretrainDataset:
        """The training pairs; the store must label the regions when an object or attribute loss is on."""
        dataset = self.dataset("train", training=True)
        check_labels(self.store, dataset.pairs[0].image_id, self.options)
        return dataset

    def fingerprint(self) -> dict[str, str]:
        return {"pairs": content_hash(self.pairs("train")), "features": store_fingerprint(self.store)}

    def summary(self) -> dict[str, Any]:
        pairs = self.pairs("train")
        return {"words": len(self.words), "answers": len(self.answers), "train_pairs": len(pairs),
                "train_answered": sum(p.answered for p in pairs),
                "train_images": len({p.image_id for p in pairs})}

    def prepare_resources(self, model: nn.Module, seed: int) -> PrepareResources:
        """Training regions, the sentences' WordPiece counts and the model's word embeddings."""
        dataset = self.dataset("train", training=True)
        regions = RegionSampler(self.store, sorted({p.image_id for p in dataset.pairs}), self.config.max_regions)
        pieces = [i for index in range(len(dataset)) for i in dataset.text(index)]
        counts = torch.bincount(torch.tensor(pieces, dtype=torch.long), minlength=len(self.words))
        return PrepareResources(seed=seed, regions=regions, word_counts=counts, words=self.words, data_root=self.root,
                                word_embeddings=model.word_embeddings.weight.detach())


def check_labels(store: FeatureStore, image_id: int, options: PretrainOptions) -> None:
    """A ``DataError`` when an object or attribute loss is on but the store does not label image ``image_id``'s
    regions."""
    if "objects" not in options.tasks:
        return
    wanted = {"object", "attribute"} & set(options.visual_losses)
    found = region_labels(store, image_id)
    lacking = sorted(wanted) if found is None else (["attribute"] if "attribute" in wanted and found.attributes is None
                                                    else [])
    if lacking:
        raise DataError(f"the feature store has no {' or '.join(lacking)} classes of its regions (bottom-up's "
                        "objects_id/attrs_id) for masked object prediction; leave them out of "
                        "train.pretrain.visual_losses", path=store.path, item=image_id)


def answer_vocabulary(root: Path, cfg: DataConfig, options: PretrainOptions) -> AnswerVocabulary:
    """The training questions' answers seen ``data.answer_min_count`` times (the QA head's outputs)."""
    if not options.questions:
        return AnswerVocabulary([])
    train = read_split(root, cfg, "train")
    if train.annotations is None:
        raise DataError("the train split has no annotations to take answers from", path=train.sources[0])
    answers = AnswerVocabulary.build((a.multiple_choice_answer for a in train.annotations.values()),
                                     min_count=cfg.answer_min_count)
    if "answers" in options.tasks and not len(answers):
        raise DataError(f"no training answer is given {cfg.answer_min_count} times (data.answer_min_count)",
                        path=train.sources[0])
    return answers


def load_pretrain_data(cfg: Config, source: Checkpoint | None = None) -> PretrainData:
    """The data under ``data.root``, with the vocabularies of ``source`` when the run starts from one."""
    options, data = pretrain_options(cfg), cfg.data
    root = Path(data.root)
    store = CachedStore(open_store(root / data.features), data.region_cache_mb << 20)
    if source is not None:
        if source.config.task != NAME:
            raise ConfigError(f"--init {source.path}: a {source.config.task} checkpoint; pretraining starts from "
                              "scratch or from a pretraining checkpoint")
        words = source.vocabulary("words", WordPieceVocabulary.load)
        answers = source.vocabulary("answers", AnswerVocabulary.load)
    else:
        words = WordPieceVocabulary.from_file(root / data.wordpiece_vocab)
        answers = answer_vocabulary(root, data, options)
    if MASK not in words.stoi:
        raise DataError(f"a WordPiece vocabulary for masked language modelling needs {MASK}",
                        path=root / data.wordpiece_vocab)
    return PretrainData(root, data, options, words, answers, store)


def masking_vocabulary(words: WordPieceVocabulary) -> Vocabulary:
    """``[MASK]``, ``[PAD]``, the special entries (``[...]``: never masked, never a random replacement) and the
    other entries (the random replacements)."""
    special = [i for i, entry in enumerate(words.itos) if entry.startswith("[") and entry.endswith("]")]
    others = sorted(set(range(len(words))) - set(special))
    if not others:
        raise DataError("the WordPiece vocabulary has no entry besides its special ones")
    return Vocabulary(words.stoi[MASK], words.PAD, torch.tensor(others), torch.tensor(special))


def build_model(cfg: Config, num_words: int, num_answers: int, store_dim: int | None = None) -> PretrainingModel:
    """The config's encoder model (its classifier over ``num_answers``: the QA head) with the pretraining heads
    (BERT's initialisation, ``model.options.init_std``) and the config's dropout masks."""
    check_feature_dim(cfg.model, store_dim)
    options = pretrain_options(cfg)
    backbone = model_kind(cfg.model.kind, NAME).build(cfg.model, num_words, max(num_answers, 1), 0)
    if getattr(backbone, "images", 1) != 1 or not hasattr(backbone, "encode") or not hasattr(backbone, "head"):
        raise ConfigError(f"model.kind: {cfg.model.kind!r} with these options is not one encoder of one image and "
                          "one sentence with an answer head (model.options.images: 1)")
    extra = cfg.model.options
    heads = PretrainingHeads(cfg.model.d_model, num_words, options.object_classes, options.attribute_classes,
                             cfg.model.feature_dim, float(extra.get("layer_norm_eps", 1e-12)),
                             getattr(backbone, "output_dim", None))
    bert_init(heads, float(extra.get("init_std", 0.02)))
    return set_dropout_mask(PretrainingModel(backbone, heads), cfg.model.dropout_mask)


def corrupted_batches(cfg: Config, data: PretrainData, settings: PretrainSettings, dataset: PretrainDataset,
                      device: torch.device) -> Iterator[tuple[dict[str, Any], Any]]:
    """The batches of ``dataset`` corrupted by draws seeded with :data:`VALIDATION_SEED` (the same every time), on
    ``device``."""
    generator = torch.Generator().manual_seed(VALIDATION_SEED)
    vocab = masking_vocabulary(data.words)
    for batch in DataLoader(dataset, batch_size=cfg.eval.batch_size, collate_fn=collate_pretrain):
        inputs, targets = corrupt(batch, settings, data.dataset("train", training=True), vocab, generator)
        moved = {k: v.to(device) if torch.is_tensor(v) else v for k, v in inputs.items()}
        yield moved, type(targets)(*(getattr(targets, f.name).to(device) for f in dataclasses.fields(targets)))


def make_validator(cfg: Config, data: PretrainData, device: torch.device) -> Validator:
    dataset = data.dataset("val", limit=cfg.train.val_max_images)
    settings = data.options.resolved()

    def validate(model: nn.Module) -> dict[str, float]:
        return validation_metrics(model, corrupted_batches(cfg, data, settings, dataset, device), settings)

    return validate


def make_objective(cfg: Config, data: PretrainData, device: torch.device) -> PretrainObjective:
    pool = data.dataset("train", training=True)  # the sentences a mismatched pair takes
    return PretrainObjective(data.options.resolved(), pool, masking_vocabulary(data.words), cfg.train.epochs)


PRETRAIN: Stage[PretrainData] = Stage(
    name="pretrain",
    summary="LXMERT's masked LM, masked object prediction, matching and image QA over caption and question pairs",
    load_data=load_pretrain_data,
    build_model=lambda cfg, data: build_model(cfg, len(data.words), len(data.answers), data.store.dim),
    objective=make_objective,
    train_set=lambda cfg, data: data.train_set(),
    collate=collate_pretrain,
    validator=make_validator,
    selection_metric="minus_loss",
)


class Pretraining:
    """The pretraining task (see the module docstring)."""

    name = NAME
    stages: dict[str, Stage] = {"pretrain": PRETRAIN}
    reads = frozenset({
        "data.karpathy", "data.features", "data.questions", "data.annotations", "data.vqa_splits",
        "data.question_tokens", "data.wordpiece_vocab", "data.max_regions", "data.max_question_len",
        "data.answer_min_count", "data.region_cache_mb", "data.format", "train.pretrain", "train.val_max_images",
        "eval.batch_size",
    })
    # LXMERT: 36 regions, 20 WordPiece ids, BERT's 30,522 entries, the released 9,500 pretraining answers
    profile_shapes = ProfileShapes(length=20, vocab_size=30522, answers=9500, default_regions=36)

    def create_model(self, cfg: Config, *, vocab_size: int, num_answers: int | None = None) -> nn.Module:
        if num_answers is None:
            raise ConfigError("num_answers: the QA head of pretraining needs the number of candidate answers")
        return build_model(cfg, vocab_size, num_answers)

    def check(self, cfg: Config) -> None:
        """The options, the WordPiece sentences and the model (built on the meta device, heads included)."""
        options = pretrain_options(cfg)
        if cfg.data.question_tokens != "wordpiece":
            raise ConfigError(f"data.question_tokens: pretraining reads WordPiece sentences; set wordpiece, got "
                              f"{cfg.data.question_tokens!r}")
        if "answers" in options.tasks and not options.questions:
            raise ConfigError("train.pretrain.tasks: image QA ('answers') needs the questions (train.pretrain.questions)")
        with torch.device("meta"), without_initialisation():
            model = build_model(cfg, 8, 8)
        check_footprint(model, cfg.model)

    def evaluate(self, checkpoint: Checkpoint, request: EvalRequest) -> dict[str, Any]:
        """The validation metrics of the pretraining tasks on ``request.split`` (default ``val``)."""
        cfg = checkpoint.config
        if request.beam_size is not None or request.packed_output is not None:
            raise ConfigError("--beam-size/--packed-output: a pretrained model does not decode; leave them out")
        if request.data_root is not None:
            cfg.data.root = str(request.data_root)
        split = request.split or "val"
        data = load_pretrain_data(cfg, checkpoint)
        device = pick_device(request.device)
        model = build_model(cfg, len(data.words), len(data.answers), data.store.dim)
        load_weights(model, checkpoint)
        settings = data.options.resolved()
        metrics = validation_metrics(model.to(device), corrupted_batches(cfg, data, settings, data.dataset(split),
                                                                         device), settings)
        report = {"split": split, "checkpoint": str(checkpoint.path), "pairs": len(data.dataset(split)), **metrics}
        request.shown(report)
        out = claim_output_dir(output_dir(checkpoint))
        atomic_write_text(out / f"{split}_metrics.json", json.dumps(report, indent=1))
        return report

    def format_report(self, report: Mapping[str, Any]) -> str:
        lines = [f"{report['split']}: {report['pairs']:,} pairs ({report['checkpoint']})"]
        lines += [f"  {name:<22} {value:8.3f}" for name, value in report.items()
                  if name.endswith(("_accuracy", "_loss")) or name == "loss"]
        return "\n".join(lines)

    def profile(self, cfg: Config, shapes: ProfileShapes) -> dict[str, Any]:
        """Parameters (total, per top-level module, backbone), FLOPs of a training step (forward, the mean of every
        head's output, backward) and of a forward pass, backbone multiply-adds of one pair, latency."""
        model = build_model(cfg, shapes.vocab_size, shapes.answers)
        shapes = shapes.for_model(model)

        def batch(size: int) -> dict[str, torch.Tensor]:
            generator = torch.Generator().manual_seed(0)
            inputs = random_regions(size, shapes.regions, cfg.model.feature_dim, generator)
            inputs["boxes"] = inputs["boxes"] / 200.0  # normalised
            questions = torch.randint(1, shapes.vocab_size, (size, shapes.length), generator=generator)
            return {**inputs, "questions": questions, "question_mask": torch.ones_like(questions, dtype=torch.bool)}

        measured = classifier_profile(model, batch(shapes.batch), batch(1),
                                      lambda out: sum(t.mean() for t in vars(out).values()), shapes.repeats, "forward")
        return {"model": cfg.model.kind,
                "shapes": {"batch": shapes.batch, "regions": shapes.regions, "length": shapes.length,
                           "feature_dim": cfg.model.feature_dim, "vocab": shapes.vocab_size, "answers": shapes.answers},
                **measured}


PRETRAINING = Pretraining()
