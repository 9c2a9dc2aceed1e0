"""LXMERT's pretraining objective (Tan and Bansal 2019, Sec. 3.1 and 3.3): the four tasks' losses, their weights,
the per-batch corruption of the pairs and the validation metrics.

Losses (each tested against a hand-computed value and against transformers' ``LxmertForPreTraining``):

- masked cross-modality LM: cross-entropy of the masked pieces' predictions, mean over the masked pieces;
- cross-modality matching: cross-entropy of matched (1) / mismatched (0), mean over the pairs;
- masked object prediction: per region, the RoI-feature regression (the mean over the D dimensions of the squared
  error — the paper's "L2 loss" — or, as the released code, of PyTorch's smooth L1), and the cross-entropy of the
  detected object class and of the attribute class;
- image QA: cross-entropy of one answer drawn for each matched question with a candidate answer (drawn with
  probability proportional to its soft score, as the released ``convert_example_to_features``), mean over them.

Where the paper and the released code differ (the ``train.pretrain`` options; ``official: true`` selects the released
code's choice for every option left unset):

| option | paper (default) | released code (``official``) |
|---|---|---|
| ``region_masking`` | ``zero``: masked RoI features are zeros | ``bert``: zeros 80%, a random region's feature 10%, unchanged 10% |
| ``feature_loss`` | ``l2``: squared error | ``smooth_l1`` (named ``l2`` in the code) |
| ``label_regions`` | ``masked``: object/attribute losses over the masked regions, mean over them | ``confidence``: over every region weighted by the detector's score, mean over all regions (the released ``obj_labels`` pairs the labels with their confidences, not with the mask) |
| ``visual_weight`` | 1: "equal weights" for every loss | 1/0.15 for each of the three visual losses (``visual_loss_config``) |
| ``qa_from`` | 0.5: image QA only in the last half of the epochs (the last 10 of 20) | 0: from the first epoch ("this GitHub version pre-trains with QA loss from the beginning") |

The feature regression of both readings averages over the masked regions (paper) or over all regions with weight 1
at the masked ones (code): ``label_regions`` chooses the averaging of all three visual losses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vlattn.config import bounded
from vlattn.data.masking import draw_mismatches, mask_regions, mask_words
from vlattn.data.pretraining import IGNORE
from vlattn.errors import ConfigError
from vlattn.models.pretraining import PretrainOutput

TASKS = ("words", "matching", "objects", "answers")
VISUAL_LOSSES = ("feature", "object", "attribute")
RELEASED_VISUAL_WEIGHT = 1 / 0.15


@dataclass
class PretrainOptions:
    """``train.pretrain``: the tasks (``words`` = masked LM, ``matching``, ``objects`` = masked object prediction,
    ``answers`` = image QA), the visual losses, the rates, the class counts of the region labels, where the
    text comes from, and the paper/code choices of the module docstring (None: the paper's, or with ``official``
    the released code's)."""

    tasks: list[str] = bounded(factory=lambda: list(TASKS))
    visual_losses: list[str] = bounded(factory=lambda: list(VISUAL_LOSSES))
    word_mask_rate: float = bounded(0.15, gt=0.0, le=1.0)
    region_mask_rate: float = bounded(0.15, gt=0.0, le=1.0)
    mismatch_rate: float = bounded(0.5, ge=0.0, le=1.0)
    object_classes: int = bounded(1600, ge=1, le=1 << 22)  # bottom-up-attention's Visual Genome classes
    attribute_classes: int = bounded(400, ge=1, le=1 << 22)
    captions: bool = True  # pairs from data.karpathy's captions
    questions: bool = True  # pairs from the VQA questions
    official: bool = False
    region_masking: Literal["zero", "bert"] | None = None
    feature_loss: Literal["l2", "smooth_l1"] | None = None
    label_regions: Literal["masked", "confidence"] | None = None
    visual_weight: float | None = bounded(None, ge=0.0)
    qa_from: float | None = bounded(None, ge=0.0, le=1.0)

    def check(self, where: str) -> None:
        for key, values, valid in (("tasks", self.tasks, TASKS), ("visual_losses", self.visual_losses, VISUAL_LOSSES)):
            unknown = [v for v in values if v not in valid]
            if unknown or not values or len(set(values)) != len(values):
                raise ConfigError(f"config key {where}.{key}: a non-empty list of distinct names of "
                                  f"{', '.join(valid)}; got {values}")
        if not self.captions and not self.questions:
            raise ConfigError(f"config key {where}.captions/questions: pairs need captions, questions or both")

    def resolved(self) -> PretrainSettings:
        """The settings with every unset choice filled: the paper's, or the released code's with ``official``."""
        code = self.official

        def pick(value: Any, paper: Any, released: Any) -> Any:
            return value if value is not None else (released if code else paper)

        return PretrainSettings(
            tasks=frozenset(self.tasks), visual_losses=frozenset(self.visual_losses),
            word_mask_rate=self.word_mask_rate, region_mask_rate=self.region_mask_rate,
            mismatch_rate=self.mismatch_rate,
            region_masking=pick(self.region_masking, "zero", "bert"),
            feature_loss=pick(self.feature_loss, "l2", "smooth_l1"),
            label_regions=pick(self.label_regions, "masked", "confidence"),
            visual_weight=pick(self.visual_weight, 1.0, RELEASED_VISUAL_WEIGHT),
            qa_from=pick(self.qa_from, 0.5, 0.0),
        )


@dataclass(frozen=True)
class PretrainSettings:
    """:class:`PretrainOptions` with every choice made."""

    tasks: frozenset[str]
    visual_losses: frozenset[str]
    word_mask_rate: float
    region_mask_rate: float
    mismatch_rate: float
    region_masking: Literal["zero", "bert"]
    feature_loss: Literal["l2", "smooth_l1"]
    label_regions: Literal["masked", "confidence"]
    visual_weight: float
    qa_from: float

    def answers_from_epoch(self, epochs: int) -> int:
        """The first epoch (0-based) of ``epochs`` with the image-QA loss."""
        return int(self.qa_from * epochs)


# --- losses -------------------------------------------------------------------------------------------------


def _mean_over_labels(losses: Tensor, labels: Tensor) -> Tensor:
    """Mean of ``losses`` over the entries whose label is not IGNORE; 0 (keeping the graph) when there is none."""
    counted = labels != IGNORE
    return losses.sum() / counted.sum().clamp(min=1)


def masked_lm_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """Cross-entropy of ``logits`` (B, L, V) at the pieces whose ``labels`` (B, L) are not IGNORE, mean over them."""
    losses = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE, reduction="none")
    return _mean_over_labels(losses, labels.flatten())


def matching_loss(logits: Tensor, matched: Tensor) -> Tensor:
    """Cross-entropy of ``logits`` (B, 2) against ``matched`` (B,) 1 = the sentence describes the image."""
    return F.cross_entropy(logits, matched)


def answer_loss(logits: Tensor, answers: Tensor) -> Tensor:
    """Cross-entropy of ``logits`` (B, Q) against one answer per pair (``answers`` (B,), IGNORE: no answer), mean
    over the answered pairs."""
    return _mean_over_labels(F.cross_entropy(logits, answers, ignore_index=IGNORE, reduction="none"), answers)


def reduce_regions(losses: Tensor, weights: Tensor, regions: Literal["masked", "confidence"]) -> Tensor:
    """Per-region ``losses`` (B, N) weighted by ``weights`` (B, N): their weighted mean (``masked``: the weights are
    the masked regions' 1s) or, as the released code, the mean of ``losses * weights`` over all B N regions
    (``confidence``)."""
    weighted = losses * weights
    if regions == "confidence":
        return weighted.mean()
    return weighted.sum() / weights.sum().clamp(min=torch.finfo(weights.dtype).tiny)


def feature_loss(predicted: Tensor, target: Tensor, kind: Literal["l2", "smooth_l1"]) -> Tensor:
    """Per-region regression loss (B, N): the mean over the D dimensions of the squared error (``l2``) or of
    PyTorch's smooth L1 (beta 1, the released code's) between ``predicted`` and ``target`` (B, N, D)."""
    if kind == "l2":
        return (predicted - target).pow(2).mean(-1)
    return F.smooth_l1_loss(predicted, target, reduction="none").mean(-1)


def label_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """Per-region cross-entropy (B, N) of ``logits`` (B, N, C) against ``labels`` (B, N); 0 where IGNORE."""
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE,
                           reduction="none").view(labels.shape)


# --- corruption of a batch ------------------------------------------------------------------------------------


class SentencePool(Protocol):
    """The training pairs a mismatched sentence is drawn from: their images (P,) and each one's ids."""

    image_ids: Tensor

    def text(self, index: int) -> list[int]: ...


@dataclass(frozen=True)
class Vocabulary:
    """What word masking needs of the WordPiece vocabulary: ``[MASK]``, ``[PAD]`` and the ids a random replacement
    is drawn from (every entry but the special ones), and the special ids never masked."""

    mask: int
    pad: int
    replacements: Tensor
    specials: Tensor


@dataclass
class Targets:
    """What the losses compare the outputs with: ``words`` (B, L) labels, ``matched`` (B,), ``features`` (B, N, D)
    the uncorrupted features, ``masked`` (B, N) the chosen regions, ``objects``/``attributes`` (B, N) labels with
    their ``object_weights``/``attribute_weights`` (B, N), ``answers`` (B,) one drawn answer or IGNORE."""

    words: Tensor
    matched: Tensor
    features: Tensor
    masked: Tensor
    objects: Tensor
    object_weights: Tensor
    attributes: Tensor
    attribute_weights: Tensor
    answers: Tensor


def corrupt(batch: Mapping[str, Any], settings: PretrainSettings, pool: SentencePool, vocab: Vocabulary,
            generator: torch.Generator | None = None) -> tuple[dict[str, Any], Targets]:
    """The model inputs of a batch of :func:`~vlattn.data.pretraining.collate_pretrain` after the four tasks'
    corruptions (a mismatched sentence for ``mismatch_rate`` of the pairs when matching is a task, then word and
    region masking), and their :class:`Targets`."""
    questions, device = batch["questions"], batch["questions"].device
    rows = len(questions)
    matched = torch.ones(rows, dtype=torch.long)
    if "matching" in settings.tasks and settings.mismatch_rate > 0:
        others = draw_mismatches(batch["image_ids"].cpu(), pool.image_ids, rate=settings.mismatch_rate,
                                 generator=generator)
        matched = (others < 0).long()
        if not bool(matched.all()):
            texts = [pool.text(int(j)) if j >= 0 else row[row != vocab.pad].tolist()
                     for j, row in zip(others, questions.cpu())]
            width = max(map(len, texts))
            questions = torch.full((rows, width), vocab.pad, dtype=torch.long)
            for r, text in enumerate(texts):
                questions[r, : len(text)] = torch.tensor(text)
            questions = questions.to(device)
    real = questions != vocab.pad
    maskable = real & ~torch.isin(questions, vocab.specials.to(device))
    words = torch.full_like(questions, IGNORE)
    if "words" in settings.tasks:
        questions, words = mask_words(questions, maskable, rate=settings.word_mask_rate, mask_id=vocab.mask,
                                      replacements=vocab.replacements, generator=generator)
    features, region_mask = batch["features"], batch["region_mask"]
    masked = torch.zeros_like(region_mask)
    if "objects" in settings.tasks:
        features, masked = mask_regions(features, region_mask, rate=settings.region_mask_rate,
                                        mode=settings.region_masking, generator=generator)
    chosen = masked.float()
    label_weights = {name: chosen if settings.label_regions == "masked" else batch[f"{name[:-1]}_scores"]
                     for name in ("objects", "attributes")}
    matched = matched.to(device)
    answers = torch.full((rows,), IGNORE, dtype=torch.long, device=device)
    scores = batch["answers"]
    answerable = (matched == 1) & (scores.sum(1) > 0)
    if bool(answerable.any()):
        drawn = torch.multinomial(scores[answerable], 1, generator=generator).squeeze(1)
        answers[answerable] = drawn.to(device)
    inputs = {**batch, "questions": questions, "question_mask": real, "features": features}
    return inputs, Targets(words, matched, batch["features"], masked, batch["objects"], label_weights["objects"],
                           batch["attributes"], label_weights["attributes"], answers)


# --- the objective ------------------------------------------------------------------------------------------------


def pretrain_losses(out: PretrainOutput, targets: Targets, settings: PretrainSettings) -> dict[str, Tensor]:
    """Each active task's loss (unweighted): ``words``, ``matching``, ``feature``, ``object``, ``attribute``,
    ``answers``."""
    losses: dict[str, Tensor] = {}
    if "words" in settings.tasks:
        losses["words"] = masked_lm_loss(out.words, targets.words)
    if "matching" in settings.tasks:
        losses["matching"] = matching_loss(out.matching, targets.matched)
    if "objects" in settings.tasks:
        visual = settings.visual_losses
        if "feature" in visual:
            losses["feature"] = reduce_regions(feature_loss(out.features, targets.features, settings.feature_loss),
                                               targets.masked.float(), settings.label_regions)
        for name, logits, labels, weights in (
                ("object", out.objects, targets.objects, targets.object_weights),
                ("attribute", out.attributes, targets.attributes, targets.attribute_weights)):
            if name in visual:
                losses[name] = reduce_regions(label_loss(logits, labels), weights, settings.label_regions)
    if "answers" in settings.tasks:
        losses["answers"] = answer_loss(out.answers, targets.answers)
    return losses


def total_loss(losses: Mapping[str, Tensor], settings: PretrainSettings, with_answers: bool) -> Tensor:
    """The weighted sum: every loss with weight 1 except the visual ones (``visual_weight``); the QA loss only
    ``with_answers``."""
    total = torch.zeros((), device=next(iter(losses.values())).device)
    for name, value in losses.items():
        if name == "answers" and not with_answers:
            continue
        total = total + (settings.visual_weight if name in VISUAL_LOSSES else 1.0) * value
    return total


class PretrainObjective:
    """``(model, batch) -> (loss, logs)`` of the four tasks; the QA loss joins at epoch
    ``settings.answers_from_epoch(epochs)`` (the trainer calls :meth:`set_epoch` before each epoch)."""

    def __init__(self, settings: PretrainSettings, pool: SentencePool, vocab: Vocabulary, epochs: int) -> None:
        self.settings, self.pool, self.vocab = settings, pool, vocab
        self.first_answer_epoch = settings.answers_from_epoch(epochs)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __call__(self, model: nn.Module, batch: Mapping[str, Any]) -> tuple[Tensor, dict[str, float]]:
        inputs, targets = corrupt(batch, self.settings, self.pool, self.vocab)
        losses = pretrain_losses(model(inputs), targets, self.settings)
        with_answers = self.epoch >= self.first_answer_epoch
        logs = {f"{name}_loss": float(value.detach()) for name, value in losses.items()
                if name != "answers" or with_answers}
        return total_loss(losses, self.settings, with_answers), logs


IMAGE_INPUTS = ("features", "boxes", "region_mask")  # what a pair's image gives the model


def other_image_rows(image_ids: Tensor) -> Tensor:
    """For each row of a batch (its image ``image_ids`` (B,)), the next row, cyclically, that shows another image;
    -1 for every row when they all show the same one. (B,) long."""
    image_ids, rows = image_ids.cpu(), len(image_ids)  # one transfer, then the loop reads host memory
    partner = torch.full((rows,), -1, dtype=torch.long)
    for row in range(rows):
        for step in range(1, rows):
            other = (row + step) % rows
            if image_ids[other] != image_ids[row]:
                partner[row] = other
                break
    return partner


def validation_metrics(model: nn.Module, batches: list[tuple[dict[str, Any], Targets]],
                       settings: PretrainSettings) -> dict[str, float]:
    """Accuracy of each task on corrupted validation batches (the masked pieces, matched/mismatched, the masked
    regions' object and attribute classes, the drawn answers), each loss's mean over the batches, ``loss`` (their
    weighted sum, QA included) and ``minus_loss`` (-loss: higher is better, the selection metric).

    ``words_other_image_accuracy``: the masked pieces predicted again with each sentence shown another pair's
    image (:func:`other_image_rows`; rows without one are left out). A model that reads the image for its words
    loses accuracy; one that reads only the sentence keeps ``words_accuracy``: the gap says whether pretraining
    has learned to use the image at all."""
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}

    def add(name: str, value: float, count: float) -> None:
        sums[name] = sums.get(name, 0.0) + value
        counts[name] = counts.get(name, 0.0) + count

    model.eval()
    with torch.no_grad():
        for inputs, targets in batches:
            out = model(inputs)
            losses = pretrain_losses(out, targets, settings)
            for name, value in losses.items():
                add(f"{name}_loss", float(value), 1)
            add("loss", float(total_loss(losses, settings, True)), 1)
            labelled = targets.words != IGNORE
            add("words_accuracy", float((out.words.argmax(-1) == targets.words)[labelled].sum()), float(labelled.sum()))
            partner = other_image_rows(inputs["image_ids"]).to(targets.words.device)
            shown = labelled & (partner >= 0)[:, None]
            if bool(shown.any()):
                swapped = {**inputs, **{key: inputs[key][partner.clamp(min=0)] for key in IMAGE_INPUTS}}
                guessed = model(swapped).words.argmax(-1)
                add("words_other_image_accuracy", float((guessed == targets.words)[shown].sum()), float(shown.sum()))
            add("matching_accuracy", float((out.matching.argmax(-1) == targets.matched).sum()), len(targets.matched))
            for name, logits, labels in (("objects", out.objects, targets.objects),
                                         ("attributes", out.attributes, targets.attributes)):
                rows = targets.masked & (labels != IGNORE)
                add(f"{name}_accuracy", float((logits.argmax(-1) == labels)[rows].sum()), float(rows.sum()))
            answered = targets.answers != IGNORE
            add("answers_accuracy", float((out.answers.argmax(-1) == targets.answers)[answered].sum()),
                float(answered.sum()))
    metrics = {name: 100.0 * sums[name] / counts[name] if name.endswith("accuracy") else sums[name] / counts[name]
               for name in sums if counts[name] > 0}
    metrics["minus_loss"] = -metrics["loss"]
    return metrics
