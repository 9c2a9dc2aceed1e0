"""Captioning models and their registry of kinds (``ModelConfig.kind`` -> builder)."""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from vlattn.config import ModelConfig
from vlattn.errors import ConfigError
from vlattn.models.decoder import CrossAttentionSite, DecoderLayer, TransformerDecoder
from vlattn.models.encoder import EncoderLayer, TransformerEncoder
from vlattn.models.m2 import build_m2
from vlattn.models.meshed import MeshedCrossAttention
from vlattn.models.transformer import TransformerCaptioner, attention_factory, build_transformer

MODELS: dict[str, Callable[[ModelConfig, int, int], nn.Module]] = {
    "transformer": build_transformer,
    "m2": build_m2,
}


def build_captioner(cfg: ModelConfig, vocab_size: int, pad_id: int = 0) -> nn.Module:
    """Build the captioner of kind ``cfg.kind``; unknown kinds list the valid ones."""
    if cfg.kind not in MODELS:
        raise ConfigError(f"model.kind: unknown model {cfg.kind!r}; valid kinds: {', '.join(sorted(MODELS))}")
    return MODELS[cfg.kind](cfg, vocab_size, pad_id)


__all__ = [
    "MODELS",
    "CrossAttentionSite",
    "DecoderLayer",
    "EncoderLayer",
    "MeshedCrossAttention",
    "TransformerCaptioner",
    "TransformerDecoder",
    "TransformerEncoder",
    "attention_factory",
    "build_captioner",
    "build_m2",
    "build_transformer",
]
