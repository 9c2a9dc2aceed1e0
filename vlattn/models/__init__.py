"""Models and their registry of kinds (``ModelConfig.kind`` -> :class:`ModelKind`: the task the kind serves
and its builder; captioners are built as ``build(cfg, vocab_size, pad_id)``).

Builders validate everything they read (kind options, each site's mechanism, options and placement,
feed-forward) with ``ConfigError``s naming the key; :func:`check_model_config` runs a builder on the meta
device so that a config is validated when it loads, without allocating weights. A kind serving another task
than the config's is refused when the config loads (:func:`model_kind`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from vlattn.config import ModelConfig, lookup
from vlattn.errors import ConfigError
from vlattn.models.catt import CattCaptioner, build_catt
from vlattn.models.decoder import CrossAttentionSite, DecoderLayer, LayerCache, TransformerDecoder
from vlattn.models.encoder import EncoderLayer, Memory, TransformerEncoder
from vlattn.models.m2 import build_m2
from vlattn.models.meshed import MeshedCrossAttention
from vlattn.models.transformer import (
    ModelInputs,
    Parts,
    TransformerCaptioner,
    TransformerState,
    build_transformer,
    encoder_decoder,
)


@dataclass(frozen=True)
class ModelKind:
    """A registered model kind: ``task``, the name of the task (``vlattn.tasks.TASKS``) whose models it
    builds, and ``build``, its builder (the task decides the builder's arguments)."""

    task: str
    build: Callable[..., nn.Module]


MODELS: dict[str, ModelKind] = {
    "transformer": ModelKind("captioning", build_transformer),
    "m2": ModelKind("captioning", build_m2),
    "catt": ModelKind("captioning", build_catt),
}


def model_kind(kind: str, task: str) -> ModelKind:
    """The registered kind ``kind`` (unknown kinds list the valid ones), which must serve ``task``; errors
    name ``model.kind``."""
    entry = lookup(MODELS, kind, "model kind", "model.kind")
    if entry.task != task:
        own = ", ".join(sorted(name for name, other in MODELS.items() if other.task == task)) or "(none)"
        raise ConfigError(
            f"model.kind: {kind!r} is a {entry.task} model, but the config's task is {task!r} (its kinds: {own})"
        )
    return entry


def build_captioner(cfg: ModelConfig, vocab_size: int, pad_id: int = 0) -> nn.Module:
    """Build the captioner of kind ``cfg.kind``; unknown kinds list the valid ones."""
    return model_kind(cfg.kind, "captioning").build(cfg, vocab_size, pad_id)


def check_model_config(cfg: ModelConfig, vocab_size: int = 8) -> None:
    """Raise the ``ConfigError`` that building the captioner ``cfg`` would raise, without allocating weights."""
    with torch.device("meta"):
        build_captioner(cfg, vocab_size)


__all__ = [
    "MODELS",
    "CattCaptioner",
    "ModelKind",
    "CrossAttentionSite",
    "DecoderLayer",
    "EncoderLayer",
    "LayerCache",
    "Memory",
    "MeshedCrossAttention",
    "ModelInputs",
    "Parts",
    "TransformerCaptioner",
    "TransformerDecoder",
    "TransformerEncoder",
    "TransformerState",
    "build_captioner",
    "build_catt",
    "build_m2",
    "build_transformer",
    "check_model_config",
    "encoder_decoder",
    "model_kind",
]
