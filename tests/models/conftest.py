"""Tiny models and inputs shared by the model, attention and decoding tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from torch import Tensor

from vlattn.attention import ATTENTION
from vlattn.config import AttentionSpec, ModelConfig
from vlattn.models import TransformerCaptioner, build_captioner

VOCAB = 23
FEATURE_DIM = 12
BOS, EOS, PAD = 1, 2, 0


def tiny_config(attention: str = "mha", **overrides: object) -> ModelConfig:
    """A 2+2-layer, d=16 captioner using ``attention`` at every site."""
    fields = dict(
        feature_dim=FEATURE_DIM, d_model=16, num_heads=2, d_ff=32, encoder_layers=2, decoder_layers=2,
        dropout=0.0, max_positions=32,
    )
    fields.update(overrides)
    sites = {name: AttentionSpec(attention) for name in
             ("encoder_self_attention", "decoder_self_attention", "decoder_cross_attention")}
    return ModelConfig(**fields, **sites)


def tiny_captioner(attention: str = "mha", seed: int = 0, **overrides: object) -> TransformerCaptioner:
    """An eval-mode tiny captioner with deterministic weights."""
    torch.manual_seed(seed)
    return build_captioner(tiny_config(attention, **overrides), VOCAB, pad_id=PAD).eval()


def tiny_inputs(batch: int = 3, regions: int = 6, seed: int = 1) -> dict[str, Tensor]:
    """Features (B, N, D), boxes (B, N, 4), region_mask (B, N) with padding in rows 1.., tokens (B, 7)."""
    generator = torch.Generator().manual_seed(seed)
    mask = torch.ones(batch, regions, dtype=torch.bool)
    for row in range(1, batch):
        mask[row, regions - row :] = False
    features = torch.randn(batch, regions, FEATURE_DIM, generator=generator) * mask[..., None]
    corner = torch.rand(batch, regions, 2, generator=generator)
    return {
        "features": features,
        "boxes": torch.cat([corner, corner + 0.5], dim=-1),
        "region_mask": mask,
        "tokens": torch.randint(3, VOCAB, (batch, 7), generator=generator),
    }


@pytest.fixture(params=sorted(ATTENTION))
def attention_name(request: pytest.FixtureRequest) -> str:
    """Every registered attention mechanism."""
    return request.param


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """Tiny tensors: one thread avoids inter-thread hand-offs that dominate (and stall on a busy machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
