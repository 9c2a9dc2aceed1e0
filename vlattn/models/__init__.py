"""Models and their registry of kinds (``ModelConfig.kind`` -> builder ``(cfg, vocab_size, pad_id)``).

Builders validate everything they read (kind options, each site's mechanism, options and placement,
feed-forward) with ``ConfigError``s naming the key; :func:`check_model_config` runs a builder on the meta
device so that a config is validated when it loads, without allocating weights.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from vlattn.config import ModelConfig, lookup
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

MODELS: dict[str, Callable[[ModelConfig, int, int], nn.Module]] = {
    "transformer": build_transformer,
    "m2": build_m2,
}


def build_captioner(cfg: ModelConfig, vocab_size: int, pad_id: int = 0) -> nn.Module:
    """Build the model of kind ``cfg.kind``; unknown kinds list the valid ones."""
    return lookup(MODELS, cfg.kind, "model kind", "model.kind")(cfg, vocab_size, pad_id)


def check_model_config(cfg: ModelConfig, vocab_size: int = 8) -> None:
    """Raise the ``ConfigError`` that building ``cfg`` would raise, without allocating weights."""
    with torch.device("meta"):
        build_captioner(cfg, vocab_size)


__all__ = [
    "MODELS",
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
    "build_m2",
    "build_transformer",
    "check_model_config",
    "encoder_decoder",
]
