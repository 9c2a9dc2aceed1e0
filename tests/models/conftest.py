"""Model tests: one torch thread, and the tiny models/inputs of ``registry_cases`` under short names."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from registry_cases import BOS, EOS, FEATURE_DIM, PAD, VOCAB, model_inputs, tiny_inputs, tiny_model_config

from vlattn.models import TransformerCaptioner, build_captioner

__all__ = ["BOS", "EOS", "FEATURE_DIM", "PAD", "VOCAB", "model_inputs", "tiny_captioner", "tiny_config", "tiny_inputs"]

tiny_config = tiny_model_config


def tiny_captioner(seed: int = 0, **overrides: object) -> TransformerCaptioner:
    """An eval-mode tiny Transformer captioner with deterministic weights."""
    torch.manual_seed(seed)
    return build_captioner(tiny_model_config(**overrides), VOCAB, pad_id=PAD).eval()


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """Tiny tensors: one thread avoids inter-thread hand-offs that dominate (and stall on a busy machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
