"""NLVR2, natural language for visual reasoning with real image pairs (Suhr et al. 2019), as LXMERT fine-tunes
on it (Tan and Bansal 2019, Sec. 4.1; the released ``src/tasks/nlvr2.py``): the ``nlvr2`` entry of
:data:`vlattn.tasks.TASKS`.

Data (:class:`NLVR2Data`): ``data.questions`` with ``{split}`` replaced by each file subtype of
``data.vqa_splits[split]`` — LXMERT's NLVR2 files (:mod:`vlattn.data.nlvr2`) — the WordPiece ``data.wordpiece_vocab``
(``data.question_tokens: wordpiece``) and any feature store (``data.features``). One vocabulary, ``words``, is
stored in every checkpoint.

Model: a kind serving ``nlvr2`` whose ``model.options.images`` is 2 (LXMERT's pair head: the statement read with
each image, the two pooled vectors classified together; 2 outputs, false/true). Stage ``train``: cross-entropy over
the two outputs (the released ``CrossEntropyLoss``); validation accuracy selects the best checkpoint, consistency
is logged beside it. Evaluation writes ``nlvr2_<subtypes>_<kind>_predictions.csv`` (``identifier,True|False`` lines,
NLVR2's prediction format) and, with labels, accuracy and consistency.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

from vlattn.config import Config, DataConfig
from vlattn.data.features import open_store
from vlattn.data.features.base import FeatureStore
from vlattn.data.features.cache import CachedStore
from vlattn.data.nlvr2 import NLVR2Dataset, Statement, collate_nlvr2, load_statements, nlvr2_metrics
from vlattn.data.regions import RegionSampler
from vlattn.data.wordpiece import WordPieceVocabulary
from vlattn.errors import ConfigError, DataError
from vlattn.io import atomic_write_text
from vlattn.layers.dropout import set_dropout_mask
from vlattn.models import model_kind, without_initialisation
from vlattn.models.profile import classifier_profile, random_regions
from vlattn.tasks.pretrained import INIT_FROM
from vlattn.tasks.base import EvalRequest, ProfileShapes, check_feature_dim, output_dir
from vlattn.training.checkpoint import Checkpoint, load_weights
from vlattn.training.distributed import pick_device
from vlattn.training.loop import Batch, Validator
from vlattn.training.prepare import PrepareResources
from vlattn.training.stage import Stage

LABELS = ("False", "True")


@dataclass
class NLVR2Data:
    """The splits (read on first use), the WordPiece vocabulary and the feature store of one NLVR2 data set."""

    root: Path
    config: DataConfig
    words: WordPieceVocabulary
    store: FeatureStore
    loaded: dict[str, list[Statement]] = field(default_factory=dict)

    @property
    def vocabularies(self) -> dict[str, WordPieceVocabulary]:
        return {"words": self.words}

    def split(self, name: str) -> list[Statement]:
        if name not in self.loaded:
            cfg = self.config
            if name not in cfg.vqa_splits:
                raise DataError(f"unknown split {name!r}; data.vqa_splits has: {', '.join(cfg.vqa_splits)}")
            self.loaded[name] = [s for sub in cfg.vqa_splits[name]
                                 for s in load_statements(self.root / cfg.questions.format(split=sub))]
        return self.loaded[name]

    def dataset(self, name: str, *, labelled: bool = False, training: bool = False) -> NLVR2Dataset:
        """The statements of split ``name`` (``labelled``: each must have its label); for ``training``, the features
        in the store's dtype (the training loop widens them), else float32."""
        statements = self.split(name)
        if labelled and any(s.label is None for s in statements):
            raise DataError(f"split {name!r} has unlabelled examples", path=self.root / self.config.questions)
        return NLVR2Dataset(statements, self.store, self.words, self.config.max_regions, self.config.max_question_len,
                            stored_dtype=training)

    def prepare_resources(self, model: nn.Module, seed: int) -> PrepareResources:
        """Training regions and the model's word embeddings (for mechanisms with data-dependent initialisation)."""
        images = sorted({i for s in self.split("train") for i in s.images})
        embeddings = getattr(model, "word_embeddings", None)
        return PrepareResources(seed=seed, regions=RegionSampler(self.store, images, self.config.max_regions),
                                data_root=self.root,
                                word_embeddings=None if embeddings is None else embeddings.weight.detach())


def load_nlvr2_data(cfg: DataConfig, words: WordPieceVocabulary | None = None) -> NLVR2Data:
    root = Path(cfg.root)
    store = CachedStore(open_store(root / cfg.features), cfg.region_cache_mb << 20)
    return NLVR2Data(root, cfg, words or WordPieceVocabulary.from_file(root / cfg.wordpiece_vocab), store)


def stage_data(cfg: Config, source: Checkpoint | None) -> NLVR2Data:
    return load_nlvr2_data(cfg.data, None if source is None else source.vocabulary("words", WordPieceVocabulary.load))


def build_model(cfg: Config, num_words: int, store_dim: int | None = None) -> nn.Module:
    """The pair model of ``cfg.model`` (two outputs: false, true)."""
    check_feature_dim(cfg.model, store_dim)
    model = model_kind(cfg.model.kind, NLVR2.name).build(cfg.model, num_words, len(LABELS), 0)
    return set_dropout_mask(model, cfg.model.dropout_mask)


def pair_objective(model: nn.Module, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
    """Cross-entropy of the (B, 2) logits against ``labels``; logs the batch's accuracy as ``score``."""
    logits = model(batch)
    score = float((logits.detach().argmax(1) == batch["labels"]).float().mean())
    return F.cross_entropy(logits, batch["labels"]), {"score": score}


def predict(model: nn.Module, dataset: NLVR2Dataset, batch_size: int, device: torch.device) -> dict[str, int]:
    """``{identifier: 0 | 1}`` for every example of ``dataset``."""
    predictions: dict[str, int] = {}
    model.eval()
    with torch.no_grad():
        for batch in DataLoader(dataset, batch_size=batch_size, collate_fn=collate_nlvr2):
            inputs = {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}
            predictions.update(zip(batch["identifiers"], model(inputs).argmax(1).tolist()))
    return predictions


def make_validator(cfg: Config, data: NLVR2Data, device: torch.device) -> Validator:
    dataset = data.dataset("val", labelled=True)

    def validate(model: nn.Module) -> dict[str, float]:
        return nlvr2_metrics(predict(model, dataset, cfg.eval.batch_size, device), dataset.statements)

    return validate


TRAIN: Stage[NLVR2Data] = Stage(
    name="train",
    summary="cross-entropy over true/false of each statement about an image pair",
    load_data=stage_data,
    build_model=lambda cfg, data: build_model(cfg, len(data.words), data.store.dim),
    objective=lambda cfg, data, device: pair_objective,
    train_set=lambda cfg, data: data.dataset("train", labelled=True, training=True),
    collate=collate_nlvr2,
    validator=make_validator,
    selection_metric="accuracy",
    lr_scaling=True,
    init_from=INIT_FROM,
)


def pair_batch(shapes: ProfileShapes, feature_dim: int) -> dict[str, torch.Tensor]:
    """Random inputs of the profile shapes: ``batch`` statements of ``length`` pieces, two images each."""
    generator = torch.Generator().manual_seed(0)
    regions = random_regions(2 * shapes.batch, shapes.regions, feature_dim, generator)
    regions["boxes"] = regions["boxes"] / 200.0  # normalised
    questions = torch.randint(1, shapes.vocab_size, (shapes.batch, shapes.length), generator=generator)
    return {**{k: v.unflatten(0, (shapes.batch, 2)) for k, v in regions.items()}, "questions": questions,
            "question_mask": torch.ones_like(questions, dtype=torch.bool),
            "labels": torch.randint(0, 2, (shapes.batch,), generator=generator)}


class NaturalLanguageVisualReasoning:
    """The NLVR2 task (see the module docstring)."""

    name = "nlvr2"
    stages: dict[str, Stage] = {"train": TRAIN}
    # beside what its stage reads (Stage.reads): the statement files, WordPiece vocabulary, regions, the loss
    reads = frozenset({
        "data.features", "data.questions", "data.vqa_splits", "data.question_tokens", "data.wordpiece_vocab",
        "data.max_regions", "data.max_question_len", "data.region_cache_mb", "train.val_max_images",
        "eval.batch_size",
    })
    # LXMERT: 36 regions per image, 20 WordPiece ids, BERT's 30,522-entry vocabulary
    profile_shapes = ProfileShapes(length=20, vocab_size=30522, answers=2, default_regions=36)

    def create_model(self, cfg: Config, *, vocab_size: int, num_answers: int | None = None) -> nn.Module:
        """A new pair model over ``vocab_size`` WordPiece entries (two outputs: false, true)."""
        if num_answers not in (None, len(LABELS)):
            raise ConfigError(f"num_answers: an NLVR2 model has {len(LABELS)} outputs (false, true), got {num_answers}")
        return build_model(cfg, vocab_size)

    def check(self, cfg: Config) -> None:
        """The model serves NLVR2 with two images per statement and reads the configured question tokens."""
        with torch.device("meta"), without_initialisation():
            model = model_kind(cfg.model.kind, self.name).build(cfg.model, 8, len(LABELS), 0)
        if getattr(model, "images", 1) != 2:
            raise ConfigError("model.options.images: NLVR2 judges a statement about two images; set 2")
        reads = getattr(model, "question_tokens", "words")
        if cfg.data.question_tokens != reads or reads != "wordpiece":
            raise ConfigError(f"data.question_tokens: the nlvr2 task reads WordPiece statements, and model.kind "
                              f"{cfg.model.kind!r} reads {reads!r}; got {cfg.data.question_tokens!r}")

    def evaluate(self, checkpoint: Checkpoint, request: EvalRequest) -> dict[str, Any]:
        cfg = checkpoint.config
        split = request.split or "val"
        if request.beam_size is not None or request.packed_output is not None:
            raise ConfigError("--beam-size/--packed-output: an NLVR2 model classifies, without decoding; leave them out")
        if request.data_root is not None:
            cfg.data.root = str(request.data_root)
        data = load_nlvr2_data(cfg.data, checkpoint.vocabulary("words", WordPieceVocabulary.load))
        dataset = data.dataset(split)
        device = pick_device(request.device)
        model = build_model(cfg, len(data.words), data.store.dim)
        load_weights(model, checkpoint)
        predictions = predict(model.to(device), dataset, cfg.eval.batch_size, device)
        out = output_dir(checkpoint)
        subtypes = "+".join(cfg.data.vqa_splits.get(split, [split]))
        results = out / f"nlvr2_{subtypes}_{cfg.model.kind}_predictions.csv"
        atomic_write_text(results, "".join(f"{s.identifier},{LABELS[predictions[s.identifier]]}\n"
                                           for s in dataset.statements))
        report: dict[str, Any] = {"split": split, "checkpoint": str(checkpoint.path), "examples": len(predictions),
                                  "results": str(results)}
        if all(s.label is not None for s in dataset.statements):
            report.update(nlvr2_metrics(predictions, dataset.statements))
        atomic_write_text(out / f"{split}_metrics.json", json.dumps(report, indent=1))
        return report

    def format_report(self, report: Mapping[str, Any]) -> str:
        lines = [f"{report['split']}: {report['examples']:,} statements ({report['checkpoint']})"]
        if "accuracy" in report:
            lines += [f"  {'accuracy':<12} {report['accuracy']:6.2f}", f"  {'consistency':<12} {report['consistency']:6.2f}"]
        else:
            lines.append("  no labels for this split: predictions written")
        lines.append(f"results: {report['results']}")
        return "\n".join(lines)

    def profile(self, cfg: Config, shapes: ProfileShapes) -> dict[str, Any]:
        """Parameters (total, per top-level module, backbone), FLOPs of a training step and of judging a batch,
        backbone multiply-adds of one statement (both images), latency."""
        model = build_model(cfg, shapes.vocab_size)
        shapes = shapes.for_model(model)
        inputs = pair_batch(shapes, cfg.model.feature_dim)
        single = pair_batch(dataclasses.replace(shapes, batch=1), cfg.model.feature_dim)
        measured = classifier_profile(model, inputs, single, lambda logits: F.cross_entropy(logits, inputs["labels"]),
                                      shapes.repeats, "judge_batch")
        return {
            "model": cfg.model.kind,
            "shapes": {"batch": shapes.batch, "regions": shapes.regions, "length": shapes.length,
                       "feature_dim": cfg.model.feature_dim, "vocab": shapes.vocab_size, "images": 2},
            **measured,
        }


NLVR2 = NaturalLanguageVisualReasoning()
