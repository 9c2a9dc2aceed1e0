"""Models and their registry of kinds (``ModelConfig.kind`` -> :class:`ModelKind`: the task the kind serves
and its builder). Captioners are built as ``build(cfg, vocab_size, pad_id)``; VQA models as
``build(cfg, num_words, num_answers, pad_id)``, map the inputs mapping to answer logits (B, A) and expose
``word_embeddings`` (MCAN's and the twin-stream model's come from the shared :class:`QuestionEncoder`).

Builders validate everything they read (kind options, each site's mechanism, options and placement,
feed-forward) with ``ConfigError``s naming the key; :func:`check_model_config` runs a builder on the meta
device so that a config is validated when it loads, without allocating weights. A kind serving another task
than the config's is refused when the config loads (:func:`model_kind`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import nn

from vlattn.config import ModelConfig, lookup
from vlattn.errors import ConfigError
from vlattn.models.catt import CattCaptioner, build_catt
from vlattn.models.decoder import CrossAttentionSite, DecoderLayer, LayerCache, TransformerDecoder
from vlattn.models.encoder import EncoderLayer, Memory, TransformerEncoder
from vlattn.models.footprint import check_footprint
from vlattn.models.lxmert import Lxmert, build_lxmert
from vlattn.models.lxmert_catt import build_lxmert_catt
from vlattn.models.m2 import build_m2
from vlattn.models.mcan import MCAN, build_mcan
from vlattn.models.mcan_catt import MCANCatt, build_mcan_catt
from vlattn.models.meshed import MeshedCrossAttention
from vlattn.models.question import QuestionEncoder
from vlattn.models.transformer import (
    ModelInputs,
    Parts,
    TransformerCaptioner,
    TransformerState,
    build_transformer,
    encoder_decoder,
)
from vlattn.models.twin_stream import TwinStreamVQA, build_twin_stream
from vlattn.models.updown import UpDownCaptioner, UpDownState, build_updown


@dataclass(frozen=True)
class ModelKind:
    """A registered model kind: ``task``, the name of the task (``vlattn.tasks.TASKS``) whose models it
    builds (and ``also``, other tasks it serves), ``build``, its builder (the task decides the builder's
    arguments), and ``reads``, the keys of the ``model`` section it reads (a config setting another one is refused:
    :mod:`vlattn.validation`)."""

    task: str
    build: Callable[..., nn.Module]
    reads: frozenset[str]
    also: tuple[str, ...] = ()  # further tasks whose models it builds with the same builder
    boxes: bool = False  # its models always read the region boxes (LXMERT's region embedding)
    layered: bool = True  # its models list their layers in backbone_layers() (compilation, the backbone's figures)

    def serves(self, task: str) -> bool:
        return task == self.task or task in self.also


# model keys by the models reading them (tests/models/test_model_reads.py records what each kind's builder reads)
_EVERY_KIND = frozenset({"kind", "feature_dim", "d_model", "dropout", "attention_dropout", "embedding_dropout",
                         "dropout_mask", "box_input", "options"})
_STACK = frozenset({"num_heads", "d_ff", "encoder_layers", "decoder_layers", "encoder_self_attention",
                    "decoder_self_attention", "decoder_cross_attention", "feed_forward", "box_encoding"})
_WORD_OUTPUT = frozenset({"max_positions", "tie_embeddings", "output_bias"})
_CAPTIONER = _EVERY_KIND | _STACK | _WORD_OUTPUT
_VQA_STACK = _EVERY_KIND | _STACK | {"word_vectors"}

MODELS: dict[str, ModelKind] = {
    "transformer": ModelKind("captioning", build_transformer, _CAPTIONER),
    "m2": ModelKind("captioning", build_m2, _CAPTIONER),
    "updown": ModelKind("captioning", build_updown, _EVERY_KIND | {"num_heads", "decoder_cross_attention",
                                                                   "tie_embeddings", "output_bias"},
                        layered=False),  # two LSTM cells stepped word by word: no layer stack
    "mcan": ModelKind("vqa", build_mcan, _VQA_STACK),
    "twin_stream": ModelKind("vqa", build_twin_stream, _EVERY_KIND | {"word_vectors"}),
    "catt": ModelKind("captioning", build_catt, _CAPTIONER),
    "mcan_catt": ModelKind("vqa", build_mcan_catt, _VQA_STACK),
    "lxmert": ModelKind("vqa", build_lxmert, _EVERY_KIND | _STACK | {"max_positions"}, also=("nlvr2", "pretraining"),
                        boxes=True),  # VQA v2 and GQA are both task vqa
    "lxmert_catt": ModelKind("vqa", build_lxmert_catt, _EVERY_KIND | _STACK | {"max_positions"},
                             also=("nlvr2", "pretraining"),
                             boxes=True),
}


def model_kind(kind: str, task: str) -> ModelKind:
    """The registered kind ``kind`` (unknown kinds list the valid ones), which must serve ``task``; errors
    name ``model.kind``."""
    entry = lookup(MODELS, kind, "model kind", "model.kind")
    if not entry.serves(task):
        own = ", ".join(sorted(name for name, other in MODELS.items() if other.serves(task))) or "(none)"
        raise ConfigError(
            f"model.kind: {kind!r} is a {entry.task} model, but the config's task is {task!r} (its kinds: {own})"
        )
    return entry


def build_captioner(cfg: ModelConfig, vocab_size: int, pad_id: int = 0) -> nn.Module:
    """Build the captioner of kind ``cfg.kind``; unknown kinds list the valid ones."""
    return model_kind(cfg.kind, "captioning").build(cfg, vocab_size, pad_id)


def build_vqa_model(cfg: ModelConfig, num_words: int, num_answers: int, pad_id: int = 0) -> nn.Module:
    """Build the VQA model of kind ``cfg.kind``; unknown kinds list the valid ones."""
    return model_kind(cfg.kind, "vqa").build(cfg, num_words, num_answers, pad_id)


@contextlib.contextmanager
def without_initialisation() -> Iterator[None]:
    """Make every ``torch.nn.init`` function a no-op for the duration: weights built on the meta device have no
    values to initialise, and running the initialisers there imports ``torch._dynamo`` (seconds of start-up
    for every command that loads a config)."""
    names = [name for name in dir(nn.init) if name.endswith("_") and not name.startswith("_")]
    saved = {name: getattr(nn.init, name) for name in names}
    try:
        for name in names:
            setattr(nn.init, name, lambda tensor, *args, **kwargs: tensor)
        yield
    finally:
        for name, function in saved.items():
            setattr(nn.init, name, function)


def check_model_config(cfg: ModelConfig, vocab_size: int = 8) -> nn.Module:
    """Raise the ``ConfigError`` that building the captioner ``cfg`` would raise, or that its weights need more
    memory than is available (:func:`~vlattn.models.footprint.check_footprint`), without allocating weights;
    returns the model built on the meta device (its structure, no data)."""
    with torch.device("meta"), without_initialisation():
        model = build_captioner(cfg, vocab_size)
    check_footprint(model, cfg)
    return model


def check_vqa_model_config(cfg: ModelConfig, size: int = 8, answers: int | None = None) -> nn.Module:
    """Raise the ``ConfigError`` that building the VQA model ``cfg`` (``size`` words, ``answers`` candidate answers,
    default ``size``) would raise, or that its weights need more memory than is available, without allocating
    weights; returns the model built on the meta device."""
    with torch.device("meta"), without_initialisation():
        model = build_vqa_model(cfg, size, size if answers is None else answers)
    check_footprint(model, cfg)
    return model


__all__ = [
    "MCAN",
    "MCANCatt",
    "MODELS",
    "CattCaptioner",
    "ModelKind",
    "CrossAttentionSite",
    "DecoderLayer",
    "EncoderLayer",
    "LayerCache",
    "Lxmert",
    "Memory",
    "MeshedCrossAttention",
    "ModelInputs",
    "Parts",
    "QuestionEncoder",
    "TransformerCaptioner",
    "TransformerDecoder",
    "TransformerEncoder",
    "TransformerState",
    "TwinStreamVQA",
    "UpDownCaptioner",
    "UpDownState",
    "build_captioner",
    "build_catt",
    "build_lxmert",
    "build_lxmert_catt",
    "build_m2",
    "build_mcan",
    "build_mcan_catt",
    "build_transformer",
    "build_twin_stream",
    "build_updown",
    "build_vqa_model",
    "check_model_config",
    "check_vqa_model_config",
    "encoder_decoder",
    "model_kind",
]
