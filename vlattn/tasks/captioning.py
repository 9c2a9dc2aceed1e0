"""Image captioning: the task's data, model, training stages, validation, evaluation, captioning of a
feature store and profiling — the ``captioning`` entry of :data:`vlattn.tasks.TASKS`.

Data: a Karpathy split file and a feature store under ``data.root`` (:class:`CaptionData`), one vocabulary,
``words``. Stages (both validate by decoding the val split per ``train.val_decoding`` and keep the best
CIDEr-D):

- ``xe``: cross-entropy with teacher forcing (NG-SAN Sec. 5.1, M2 Sec. 3.3); ``train.schedule``,
  ``train.epochs``, ``train.patience``, ``train.batch_size``, ``train.adam_betas``; ``--init`` optionally
  warm-starts from other weights;
- ``scst``: self-critical sequence training on the CIDEr-D reward (M2 Sec. 3.3, Eq. 10), from ``--init``
  weights; ``train.scst_schedule``, ``train.scst_epochs``, ``train.scst_patience``, ``train.scst_batch_size``,
  ``train.scst_adam_betas`` (default ``train.adam_betas``), ``train.scst_loss_normalise``.

The reward's CIDEr-D document frequencies come from the training references and are cached next to the data
(``<data root>/cache/cider_df_<mode>.npz``), rebuilt automatically when the references, the tokenisation or
the mode change (the table records a fingerprint of all of them). The parsed Karpathy file is cached there too
(``cache/karpathy-<hash of its name>.npz``, :mod:`vlattn.data.karpathy_cache`), parsed again when its bytes change.

Evaluation decodes a split with beam search and scores it with the COCO caption metrics (BLEU, METEOR,
ROUGE-L, CIDEr-D, SPICE where Java allows) and the bias metrics CHAIR_s, CHAIR_i and A@Attr where the data set has a
lexicon (:mod:`vlattn.data.bias`); predictions are written in the COCO results format.
"""

from __future__ import annotations

import dataclasses
import json
from functools import partial
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from torch import nn
from torch.utils.data import DataLoader

from vlattn.config import Config, DataConfig, EvalConfig
from vlattn.data.bias import bias_source
from vlattn.data.captioning import CaptionEvalSet, CaptionTrainSet, collate_eval, collate_train
from vlattn.data.features import open_store
from vlattn.data.features.base import FeatureStore
from vlattn.data.features.cache import CachedStore
from vlattn.data.features.identity import store_fingerprint
from vlattn.data.features.record import store_extractor
from vlattn.pixels.on_the_fly import extract_for_run
from vlattn.data.karpathy import ImageEntry, captions_fingerprint, require_split
from vlattn.data.karpathy_cache import cache_file as karpathy_cache_file
from vlattn.data.karpathy_cache import read_split_file
from vlattn.data.regions import RegionSampler
from vlattn.data.resources import PrepareResources
from vlattn.data.vocab import Vocabulary, build_vocabulary
from vlattn.decoding import PackedOutput, beam_search
from vlattn.decoding.common import Generator
from vlattn.decoding.sampling import rollout
from vlattn.errors import ConfigError, DataError
from vlattn.io import atomic_write_text, finish_interrupted_swap
from vlattn.metrics import CiderDocumentFrequency, CiderReward, evaluate_captions
from vlattn.metrics.bias import bias_scores
from vlattn.layers.dropout import set_dropout_mask
from vlattn.models import build_captioner, check_model_config
from vlattn.models.profile import (
    backbone_madds,
    backbone_parameters,
    count_parameters,
    flops_decode_step,
    flops_train_step,
    latency,
)
from vlattn.precision import Precision, autocast, compile_layers
from vlattn.tasks.base import (
    EvalRequest,
    ProfileShapes,
    check_feature_dim,
    claim_output_dir,
    output_dir,
)
from vlattn.tasks.beam_choice import BeamChoice, choose_beam_size, record_choice, recorded_choice
from vlattn.training.checkpoint import Checkpoint, is_complete, load_checkpoint, load_weights
from vlattn.training.distributed import pick_device
from vlattn.training.loop import Objective, Validator
from vlattn.training.scst import scst_objective
from vlattn.training.schedules import lr_scale
from vlattn.training.stage import Stage
from vlattn.training.xe import xe_objective

SPLITS = ("train", "val", "test")
VAL_METRICS = ("BLEU", "ROUGE_L", "CIDEr")
# SCST references are the Karpathy split file's tokens (PTB-tokenised, lowercase, no punctuation).
TOKENIZATION = "karpathy-tokens"
RewardFn = Callable[[torch.Tensor, list[int]], torch.Tensor]


# --- data and model ---------------------------------------------------------------------------------------


@dataclass
class CaptionData:
    """Karpathy entries by split, the vocabulary and the feature store of one data set, cut as ``config``
    says (regions per image, caption length)."""

    config: DataConfig
    entries: dict[str, list[ImageEntry]]
    vocab: Vocabulary
    store: FeatureStore
    captions_hash: Callable[[], str] | None = dataclasses.field(default=None, repr=False, compare=False)
    _train: CaptionTrainSet | None = dataclasses.field(default=None, init=False, repr=False, compare=False)

    @property
    def root(self) -> Path:
        return Path(self.config.root)

    @property
    def feature_extractor(self) -> dict[str, Any] | None:
        """The extractor record of the feature store (None when it has none); every checkpoint keeps it."""
        return store_extractor(self.root / self.config.features)

    @property
    def vocabularies(self) -> dict[str, Vocabulary]:
        """The named vocabularies a checkpoint of this task stores: ``words``."""
        return {"words": self.vocab}

    def fingerprint(self) -> dict[str, str]:
        """Hashes of what the data set holds (every split's captions; the feature store's ids and dimension): a
        resumed run must find the same ones."""
        if self.captions_hash is not None:  # the split file's, known from its cache
            captions = self.captions_hash()
        else:
            captions = captions_fingerprint([e for split in SPLITS for e in self.entries.get(split, [])])
        return {"captions": captions, "features": store_fingerprint(self.store)}

    def train_set(self) -> CaptionTrainSet:
        """One item per training (image, caption) pair (built on the first call: the objective reads its lengths, the
        training loop its items, with the features in the store's dtype: the loop widens them on its device)."""
        if self._train is None:
            cfg = self.config
            self._train = CaptionTrainSet(self.entries["train"], self.store, self.vocab, cfg.max_regions,
                                          cfg.max_caption_len, stored_dtype=True)
        return self._train

    def eval_set(self, split: str, limit: int = 0, stored_dtype: bool = False) -> CaptionEvalSet:
        """One item per image of ``split`` (the first ``limit`` when > 0); ``stored_dtype`` as for
        :class:`CaptionEvalSet`."""
        entries = self.entries[split][:limit] if limit > 0 else self.entries[split]
        return CaptionEvalSet(entries, self.store, self.config.max_regions, stored_dtype=stored_dtype)

    def prepare_resources(self, model: nn.Module, seed: int) -> PrepareResources:
        """Training regions, and the model's word embeddings with the training captions' word counts."""
        regions = RegionSampler(self.store, [e.image_id for e in self.entries["train"]], self.config.max_regions)
        embeddings = getattr(model, "word_embeddings", None)
        words = torch.from_numpy(self.train_set().words).long()  # every training caption's word ids, whole
        word_counts = torch.bincount(words, minlength=len(self.vocab))  # (V,)
        return PrepareResources(
            seed=seed, regions=regions, word_counts=word_counts, data_root=self.root,
            word_embeddings=None if embeddings is None else embeddings.weight.detach(),
        )


def load_caption_data(cfg: DataConfig, vocab: Vocabulary | None = None) -> CaptionData:
    """Read the Karpathy file and feature store under ``cfg.root``; build the vocabulary unless given."""
    root = Path(cfg.root)
    finish_interrupted_swap(root)  # a `vlattn data synth --overwrite` killed between its renames
    parsed = read_split_file(root / cfg.karpathy, karpathy_cache_file(root, cfg.karpathy))
    by_split = {split: [e for e in parsed.entries if e.split == split] for split in SPLITS}
    if vocab is None:
        vocab = build_vocabulary(parsed.entries, splits=tuple(cfg.vocab_splits), min_count=cfg.vocab_min_count)
    store = CachedStore(open_store(root / cfg.features), cfg.region_cache_mb << 20)
    return CaptionData(cfg, by_split, vocab, store, parsed.fingerprint)


def stage_data(cfg: Config, source: Checkpoint | None) -> CaptionData:
    """The data of a training stage, with the vocabulary of ``source`` when the run starts from a checkpoint."""
    return load_caption_data(cfg.data, None if source is None else source.vocabulary("words", Vocabulary.load))


def build_model(cfg: Config, vocab: Vocabulary, store_dim: int | None = None) -> nn.Module:
    """The captioner of ``cfg.model`` for ``vocab`` (checks the feature size against the store)."""
    check_feature_dim(cfg.model, store_dim)
    return new_captioner(cfg, len(vocab))


def new_captioner(cfg: Config, vocab_size: int) -> nn.Module:
    """The randomly initialised captioner of ``cfg.model`` over ``vocab_size`` words (the special tokens included),
    with the config's dropout masks."""
    model = build_captioner(cfg.model, vocab_size, pad_id=Vocabulary.PAD)
    return set_dropout_mask(model, cfg.model.dropout_mask)


# --- decoding and scoring ---------------------------------------------------------------------------------


def decode_batch(
    model: Generator, inputs: dict[str, Any], vocab: Vocabulary, *, beam_size: int, max_len: int,
    length_penalty: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The best caption of each image of a collated batch: tokens (B, L) without BOS (EOS included, PAD after it)
    and its score (B,): greedy (``beam_size == 1``; the sum of the words' log-probs, EOS included) or the best beam
    (that sum / length^``length_penalty``)."""
    if beam_size <= 1:
        greedy = rollout(model, inputs, bos=vocab.BOS, eos=vocab.EOS, pad=vocab.PAD, max_len=max_len, copies=1,
                         choose=partial(torch.argmax, dim=-1))
        return greedy.tokens[:, 0], greedy.log_probs[:, 0].sum(dim=-1)
    beams = beam_search(model, inputs, bos=vocab.BOS, eos=vocab.EOS, beam_size=beam_size, max_len=max_len,
                        length_penalty=length_penalty, pad=vocab.PAD)
    return beams.tokens[:, 0], beams.scores[:, 0]


def decode_rows(
    model: nn.Module,
    dataset: CaptionEvalSet,
    vocab: Vocabulary,
    *,
    beam_size: int = 5,
    max_len: int = 20,
    length_penalty: float = 0.0,
    batch_size: int = 50,
    device: torch.device = torch.device("cpu"),
    precision: Precision = "fp32",
    packed_output: bool = False,
) -> list[tuple[int, list[int], float]]:
    """``(image_id, token ids, score)`` of the best caption of every image of ``dataset`` (:func:`decode_batch`),
    under the autocast of ``precision``; plain Python values, owned by the caller. ``packed_output``: decode through
    :class:`~vlattn.decoding.PackedOutput` (``eval.packed_output``)."""
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, collate_fn=collate_eval)
    rows: list[tuple[int, list[int], float]] = []
    model.eval()
    generator = PackedOutput(model) if packed_output else model
    with torch.no_grad(), autocast(precision, device):
        for batch in loader:
            inputs = {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}
            tokens, scores = decode_batch(generator, inputs, vocab, beam_size=beam_size, max_len=max_len,
                                          length_penalty=length_penalty)
            rows += zip(batch["image_ids"].tolist(), tokens.tolist(), scores.float().tolist())
    return rows


def decode_dataset(model: nn.Module, dataset: CaptionEvalSet, vocab: Vocabulary, **options: Any) -> dict[int, str]:
    """The best caption of every image of ``dataset`` as text (``options``: those of :func:`decode_rows`)."""
    return {image_id: vocab.decode(tokens) for image_id, tokens, _ in decode_rows(model, dataset, vocab, **options)}


def references_of(dataset: CaptionEvalSet) -> dict[int, list[str]]:
    """``{image_id: [raw reference strings]}`` of an evaluation set."""
    return {int(entry.image_id): list(entry.raw) for entry in dataset.entries}


def score_predictions(
    predictions: dict[int, str],
    references: dict[int, list[str]],
    *,
    collapse_repeats: bool = False,
    metrics: Sequence[str] = ("BLEU", "METEOR", "ROUGE_L", "CIDEr", "SPICE"),
    tokenizer_backend: str = "auto",
) -> dict[str, object]:
    """Metrics dict: scores plus ``unavailable`` (metric -> reason) for any that could not run."""
    report = evaluate_captions(
        references, predictions, collapse_repeats=collapse_repeats, metrics=tuple(metrics),
        tokenizer_backend=tokenizer_backend,
    )
    return report.to_dict()


def write_predictions(path: str | Path, predictions: dict[int, str]) -> None:
    """COCO results format ``[{"image_id": int, "caption": str}]``, written atomically."""
    rows = [{"image_id": image_id, "caption": caption} for image_id, caption in sorted(predictions.items())]
    atomic_write_text(path, json.dumps(rows, indent=1))


def training_reward(data: CaptionData, *, mode: str = "image", include_eos: bool = False) -> RewardFn:
    """The SCST reward, CIDEr-D against the training references (document frequencies cached under
    ``<data root>/cache/``): ``reward(tokens (N, L) ids, image_ids (B,)) -> (N,)`` rewards; samples of image b
    are rows b*k..b*k+k-1."""
    entries = data.entries["train"]
    references = {e.image_id: [" ".join(tokens) for tokens in e.captions] for e in entries}
    table = CiderDocumentFrequency.cached(
        data.root / "cache" / f"cider_df_{mode}.npz", list(references.values()), mode=mode,
        eos_token=data.vocab.itos[data.vocab.EOS], tokenization=TOKENIZATION,
    )
    scorer = CiderReward(table, include_eos, vocabulary=data.vocab.itos)

    def reward(tokens: torch.Tensor, image_ids: list[int]) -> torch.Tensor:
        refs = [references[i] for i in image_ids]
        return torch.from_numpy(scorer(tokens.cpu().numpy(), refs)).float()

    return reward


def bias_report(cfg: Config, root: Path, predictions: dict[int, str], references: dict[int, list[str]]) -> dict | str:
    """CHAIR_s, CHAIR_i and A@Attr of ``predictions`` with the data set's lexicon and ground truth
    (``eval.bias_lexicon``, ``eval.bias_instances``; :mod:`vlattn.data.bias`), or why they cannot be computed."""
    source = bias_source(cfg.eval.bias_lexicon, cfg.eval.bias_instances, root, references)
    if isinstance(source, str):
        return source
    return {"lexicon": source.name, **bias_scores(predictions, source.truth, source.lexicon).to_dict()}


# --- stages -----------------------------------------------------------------------------------------------


def make_validator(cfg: Config, data: CaptionData, device: torch.device) -> Validator:
    """Validation: decode the val split (greedy or beam per ``train.val_decoding``) and score it."""
    dataset = data.eval_set("val", cfg.train.val_max_images)
    references = references_of(dataset)
    beam = cfg.eval.beam_size if cfg.train.val_decoding == "beam" else 1

    def validate(model: nn.Module) -> dict[str, float]:
        predictions = decode_dataset(
            model, dataset, data.vocab, beam_size=beam, max_len=cfg.eval.max_len, batch_size=cfg.eval.batch_size,
            device=device, packed_output=cfg.eval.packed_output,
        )
        report = score_predictions(
            predictions, references, collapse_repeats=cfg.eval.collapse_repeats, metrics=VAL_METRICS,
            tokenizer_backend="python",
        )
        return {k: float(v) for k, v in report["scores"].items()}

    return validate


def stage_model(cfg: Config, data: CaptionData) -> nn.Module:
    return build_model(cfg, data.vocab, data.store.dim)


def _xe_objective(cfg: Config, data: CaptionData, device: torch.device) -> Objective:
    """With ``train.length_buckets`` the loss is divided by a batch's expected number of target tokens (batch size x
    the training captions' mean length + 1 for EOS), not by its own (:func:`~vlattn.training.xe.xe_loss`)."""
    tokens_per_batch = None
    if cfg.train.length_buckets > 0:
        targets = [length + 1 for length in data.train_set().lengths()]  # words + EOS of each training caption
        tokens_per_batch = cfg.train.batch_size * sum(targets) / max(1, len(targets))
    return xe_objective(pad_id=data.vocab.PAD, label_smoothing=cfg.train.label_smoothing,
                        tokens_per_batch=tokens_per_batch)


def _scst_objective(cfg: Config, data: CaptionData, device: torch.device) -> Objective:
    return scst_objective(
        reward=training_reward(data, mode=cfg.eval.cider_df_mode, include_eos=cfg.eval.reward_include_eos),
        vocab=data.vocab,
        sampling=cfg.train.scst_sampling,
        baseline=cfg.train.scst_baseline,
        num_samples=cfg.train.scst_samples,
        max_len=cfg.eval.max_len,
        normalise=cfg.train.scst_loss_normalise,
        skip_finished=cfg.train.scst_skip_finished,
    )


XE: Stage[CaptionData] = Stage(
    name="xe",
    summary="cross-entropy with teacher forcing",
    load_data=stage_data,
    build_model=stage_model,
    objective=_xe_objective,
    train_set=lambda cfg, data: data.train_set(),
    collate=collate_train,
    validator=make_validator,
    selection_metric="CIDEr",
    length_buckets="train.length_buckets",
    lr_scaling=True,
    finish=lambda cfg, data, best, device: choose_after_training(cfg, data, best, device),
)

SCST: Stage[CaptionData] = dataclasses.replace(
    XE,
    name="scst",
    summary="self-critical sequence training on CIDEr-D, from --init weights",
    objective=_scst_objective,
    train_set=lambda cfg, data: data.eval_set("train", stored_dtype=True),  # the training loop widens the features
    collate=collate_eval,
    schedule="train.scst_schedule",
    epochs="train.scst_epochs",
    batch_size="train.scst_batch_size",
    patience="train.scst_patience",
    adam_betas="train.scst_adam_betas",
    length_buckets=None,
    needs_init=True,
    lr_scaling=False,  # the SCST rate is given outright (LW-Transformer Sec. IV-C: 5e-6)
)


# --- evaluation and captioning ----------------------------------------------------------------------------


def load_decoder(
    checkpoint: Checkpoint, vocab: Vocabulary, store_dim: int, device: torch.device, packed_output: bool | None,
) -> nn.Module:
    """The checkpoint's captioner on ``device`` for decoding; ``packed_output`` overrides the config's
    ``eval.packed_output`` (None: keep it)."""
    if packed_output is not None:
        checkpoint.config.eval.packed_output = packed_output
    model = build_model(checkpoint.config, vocab, store_dim)
    load_weights(model, checkpoint)
    model.to(device).eval()
    return compile_layers(model) if checkpoint.config.eval.compile else model


def _decode(
    model: nn.Module, dataset: CaptionEvalSet, cfg: EvalConfig, vocab: Vocabulary, beam: int, device: torch.device,
) -> dict[int, str]:
    """Decode ``dataset`` with the evaluation settings ``cfg`` (max length, length penalty, batch size)."""
    return decode_dataset(
        model, dataset, vocab, beam_size=beam, max_len=cfg.max_len, length_penalty=cfg.length_penalty,
        batch_size=cfg.batch_size, device=device, precision=cfg.precision, packed_output=cfg.packed_output,
    )


def validation_choice(model: nn.Module, cfg: Config, data: CaptionData, device: torch.device,
                      source: str = "after training") -> BeamChoice:
    """Decode the val split (the first ``train.val_max_images`` images when > 0) at every ``eval.beam_candidates``
    size and choose the one of the best CIDEr-D (:func:`~vlattn.tasks.beam_choice.choose_beam_size`)."""
    if not data.entries["val"]:
        raise ConfigError("eval.beam_size is auto but the data set has no val images to choose it on; "
                          "give a number (--beam-size or eval.beam_size)")
    dataset = data.eval_set("val", cfg.train.val_max_images)
    references = references_of(dataset)

    def cider(beam: int) -> float:
        predictions = _decode(model, dataset, cfg.eval, data.vocab, beam, device)
        report = score_predictions(predictions, references, collapse_repeats=cfg.eval.collapse_repeats,
                                   metrics=("CIDEr",), tokenizer_backend="python")
        return float(report["scores"]["CIDEr"])

    for beam in cfg.eval.beam_candidates:
        check_beam_size(beam, cfg, data.vocab)
    return choose_beam_size(cider, cfg.eval.beam_candidates, metric="CIDEr", split="val", images=len(dataset),
                            source=source)


def choose_after_training(cfg: Config, data: CaptionData, best: Path, device: torch.device) -> None:
    """With ``eval.beam_size: auto``, choose the beam size of the run's best checkpoint on validation and record it
    in the checkpoint's directory (kept when already recorded: a new best checkpoint is a new directory)."""
    if cfg.eval.beam_size != "auto" or not is_complete(best) or recorded_choice(best) is not None:
        return
    checkpoint = load_checkpoint(best)
    model = load_decoder(checkpoint, data.vocab, data.store.dim, device, None)
    record_choice(best, validation_choice(model, checkpoint.config, data, device))


def resolve_beam_size(
    beam_size: int | str | None, checkpoint: Checkpoint, vocab: Vocabulary,
    choose: Callable[[], BeamChoice],
) -> tuple[int, BeamChoice | None]:
    """The beam size to decode with: ``beam_size`` (default: ``eval.beam_size`` of the checkpoint's config); for
    ``auto`` the choice recorded with the checkpoint, else ``choose()`` (made now, on validation), returned too."""
    requested = beam_size if beam_size is not None else checkpoint.config.eval.beam_size
    if requested != "auto":
        return check_beam_size(int(requested), checkpoint.config, vocab, explicit=beam_size is not None), None
    choice = recorded_choice(checkpoint.path) or choose()
    return check_beam_size(choice.beam_size, checkpoint.config, vocab, explicit=False), choice


def check_beam_size(beam: int, cfg: Config, vocab: Vocabulary, *, explicit: bool = False) -> int:
    """``beam`` (``--beam-size`` when ``explicit``, else from the config), between 1 and the vocabulary size."""
    name = "--beam-size" if explicit else "eval.beam_size of the checkpoint's config"
    if beam < 1:
        raise ConfigError(f"{name} must be at least 1 (1 = greedy), got {beam}")
    if beam > len(vocab):
        raise ConfigError(f"{name} is {beam}, more than the {len(vocab)} words of the vocabulary")
    return beam


def caption(
    checkpoint_path: str | Path,
    features: str | Path | None,
    ids: list[int] | None,
    *,
    beam_size: int | str | None = None,
    device: str = "auto",
    packed_output: bool | None = None,
    images: Sequence[str | Path] | None = None,
    extractor: str | None = None,
    weights: str | None = None,
) -> list[dict[str, Any]]:
    """Caption the given image ids (default: all) of a feature store, or the image files ``images`` (features made
    with the run's extractor, :func:`vlattn.pixels.on_the_fly.extract_for_run`; rows then name the ``file``); COCO
    results rows. ``packed_output`` overrides the checkpoint's ``eval.packed_output`` (None: keep it)."""
    if (features is None) == (images is None):
        raise ConfigError("give either --features (a feature store) or --images (image files)")
    checkpoint = load_checkpoint(checkpoint_path)
    cfg = checkpoint.config
    if cfg.task != CAPTIONING.name:
        raise ConfigError(f"{checkpoint.path}: a {cfg.task} checkpoint; captioning needs a captioning model")
    vocab = checkpoint.vocabulary("words", Vocabulary.load)
    if beam_size is not None and beam_size != "auto":
        check_beam_size(int(beam_size), cfg, vocab, explicit=True)
    dev = pick_device(device)
    files = [Path(p) for p in images or []]
    if images is not None:
        store: FeatureStore = extract_for_run(checkpoint.extractor, files, dev, extractor=extractor, weights=weights)
        wanted = store.ids()
    else:
        assert features is not None
        store = open_store(features)
        wanted = ids if ids is not None else store.ids()
        missing = [i for i in wanted if i not in store]
        if missing:
            raise DataError(f"image ids not in the feature store: {missing[:10]}", path=features)
    model = load_decoder(checkpoint, vocab, store.dim, dev, packed_output)
    beam, _ = resolve_beam_size(beam_size, checkpoint, vocab, lambda: validation_choice(
        model, cfg, load_caption_data(cfg.data, vocab), dev, source="at evaluation"))
    entries = [ImageEntry(image_id=i, split="test", filename="", captions=[], raw=[]) for i in wanted]
    predictions = _decode(model, CaptionEvalSet(entries, store, cfg.data.max_regions), cfg.eval, vocab, beam, dev)
    if images is not None:
        return [{"image_id": i, "file": str(files[i]), "caption": predictions[i]} for i in wanted]
    return [{"image_id": i, "caption": predictions[i]} for i in wanted]


class Captioning:
    """The captioning task (see the module docstring)."""

    name = "captioning"
    stages: dict[str, Stage] = {"xe": XE, "scst": SCST}
    # beside what its stages read (Stage.reads): the data, decoding, scoring and SCST keys
    reads = frozenset({
        "data.karpathy", "data.features", "data.vocab_min_count", "data.vocab_splits", "data.max_regions",
        "data.max_caption_len", "data.region_cache_mb", "train.label_smoothing", "train.val_decoding",
        "train.val_max_images", "train.scst_samples", "train.scst_sampling", "train.scst_baseline",
        "train.scst_loss_normalise", "train.scst_skip_finished", "eval.beam_size", "eval.max_len",
        "eval.length_penalty", "eval.collapse_repeats", "eval.batch_size", "eval.cider_df_mode",
        "eval.reward_include_eos", "eval.bias_lexicon", "eval.bias_instances", "eval.precision", "eval.compile",
        "eval.packed_output", "eval.beam_candidates",
    })
    profile_shapes = ProfileShapes()  # 50 regions, 20-word captions, the COCO Karpathy vocabulary (10,201)

    def create_model(self, cfg: Config, *, vocab_size: int, num_answers: int | None = None) -> nn.Module:
        """A new captioner over ``vocab_size`` words (the special tokens included)."""
        if num_answers is not None:
            raise ConfigError("num_answers: a captioning model has no candidate answers")
        return new_captioner(cfg, vocab_size)

    def check(self, cfg: Config) -> None:
        """Build the captioner on the meta device (every model option, site and mechanism is checked) and check
        ``train.lr_scaling`` against it; beam validation needs a number for ``eval.beam_size``."""
        lr_scale(cfg.train.lr_scaling, check_model_config(cfg.model))
        if cfg.train.val_decoding == "beam" and cfg.eval.beam_size == "auto":
            raise ConfigError("train.val_decoding=beam decodes at eval.beam_size, which is auto (chosen on validation "
                              "after training); set train.val_decoding=greedy or give eval.beam_size a number")

    def evaluate(self, checkpoint: Checkpoint, request: EvalRequest) -> dict[str, Any]:
        """Decode ``request.split`` (default ``test``) with beam search, score it, write predictions and metrics
        under :func:`~vlattn.tasks.base.output_dir`; returns the report."""
        cfg = checkpoint.config
        split = request.split or "test"
        if request.data_root is not None:
            cfg.data.root = str(request.data_root)
        if split not in SPLITS:
            raise DataError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}")
        vocab = checkpoint.vocabulary("words", Vocabulary.load)
        if request.beam_size is not None and request.beam_size != "auto":
            check_beam_size(int(request.beam_size), cfg, vocab, explicit=True)
        dev = pick_device(request.device)
        data = load_caption_data(cfg.data, vocab)
        require_split(data.entries, split, Path(cfg.data.root) / cfg.data.karpathy)
        model = load_decoder(checkpoint, vocab, data.store.dim, dev, request.packed_output)
        beam, choice = resolve_beam_size(request.beam_size, checkpoint, vocab, lambda: validation_choice(
            model, cfg, data, dev, source="at evaluation"))
        dataset = data.eval_set(split)
        predictions = _decode(model, dataset, cfg.eval, vocab, beam, dev)
        references = references_of(dataset)
        scores = score_predictions(predictions, references, collapse_repeats=cfg.eval.collapse_repeats)
        bias = bias_report(cfg, data.root, predictions, references)
        if isinstance(bias, str):
            scores["unavailable"]["CHAIR"] = scores["unavailable"]["A@Attr"] = bias
        else:
            scores["scores"].update(bias["scores"])
            scores["bias"] = bias
        out = output_dir(checkpoint)
        report = {
            "split": split,
            "checkpoint": str(checkpoint.path),
            "data_root": str(Path(cfg.data.root).resolve()),
            "images": len(predictions),
            "beam_size": beam,
            **({"beam_choice": choice.to_dict()} if choice is not None else {}),
            "max_len": cfg.eval.max_len,
            "collapse_repeats": cfg.eval.collapse_repeats,
            **scores,
            "predictions": str(out / f"{split}_predictions.json"),
        }
        request.shown(report)
        claim_output_dir(out)
        write_predictions(out / f"{split}_predictions.json", predictions)
        atomic_write_text(out / f"{split}_metrics.json", json.dumps(report, indent=1))
        return report

    def format_report(self, report: dict[str, Any]) -> str:
        """Human-readable metrics table of :meth:`evaluate`'s report."""
        lines = [f"{report['split']}: {report['images']} images, beam {report['beam_size']} ({report['checkpoint']})"]
        if "beam_choice" in report:
            lines.append(f"  eval.beam_size auto: {BeamChoice.from_dict(report['beam_choice']).describe()}")
        for name, value in report["scores"].items():
            lines.append(f"  {name:<8} {value:.4f}")
        for name, reason in report.get("unavailable", {}).items():
            lines.append(f"  {name:<8} not computed: {reason}")
        bias = report.get("bias")
        if bias:
            by_object = ", ".join(f"{obj} {ok}/{total}" for obj, (ok, total) in bias["attribute_by_object"].items())
            hallucinated = ", ".join(f"{obj} {n}" for obj, n in bias["hallucinated"].items()) or "none"
            lines.append(f"  A@Attr by object ({bias['lexicon']} lexicon): {by_object or 'no colour-object pairs'}")
            lines.append(f"  hallucinated objects: {hallucinated}")
        tokenizer = report.get("tokenizer", {})
        if tokenizer.get("backend") == "python":
            lines.append(f"  tokenizer: Python PTB ({tokenizer['differences']}); "
                         f"{tokenizer['captions_that_may_differ']} captions hold such text")
        return "\n".join(lines)

    def profile(self, cfg: Config, shapes: ProfileShapes) -> dict[str, Any]:
        """Parameters (total, per top-level module, backbone), FLOPs of a training and a decoding step, backbone
        multiply-adds per sample (encoder over ``regions``, decoder over ``length``), and latency."""
        if shapes.length + 1 > cfg.model.max_positions:
            raise ConfigError(f"--length {shapes.length} needs model.max_positions >= {shapes.length + 1}, "
                              f"got {cfg.model.max_positions} (--set model.max_positions={shapes.length + 1})")
        check_model_config(cfg.model, shapes.vocab_size)  # the weights fit in memory
        model = build_captioner(cfg.model, shapes.vocab_size)
        shapes = shapes.for_model(model)
        sizes = dict(batch=shapes.batch, regions=shapes.regions, length=shapes.length,
                     feature_dim=cfg.model.feature_dim, vocab=shapes.vocab_size)
        model.eval()
        madds = backbone_madds(model, shapes.regions, shapes.length, cfg.model.feature_dim, shapes.vocab_size)
        model.train()
        train_flops = flops_train_step(model, **sizes)
        model.eval()
        decode_flops = flops_decode_step(model, **sizes)
        model.train()
        return {
            "model": cfg.model.kind,
            "shapes": sizes,
            "threads": torch.get_num_threads(),
            "parameters": count_parameters(model),
            "backbone": {"parameters": backbone_parameters(model), "madds_per_sample": madds},
            "flops": {"train_step": train_flops, "decode_step": decode_flops},
            "latency_ms": latency(model, repeats=shapes.repeats, **sizes),
        }


CAPTIONING = Captioning()
