"""Pieces shared by the decoders: the first step per image, and how a prefix grows.

Every decoder drives a model only through ``encode(inputs) -> state`` (``inputs``: a mapping of the model's
input tensors, batch-first, e.g. ``features``/``boxes``/``region_mask`` for captioners),
``step(tokens (B,t), state) -> (log_probs (B,V), state)`` and ``reorder(state, index (B',)) -> state``.
The first step runs once per image (so per-image work such as cross-attention keys/values is done once)
before the state is expanded to beams or samples.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import torch
from torch import Tensor


class Generator(Protocol):
    """What decoding needs from a model."""

    def encode(self, inputs: Mapping[str, Any]) -> Any: ...

    def step(self, tokens: Tensor, state: Any) -> tuple[Tensor, Any]: ...

    def reorder(self, state: Any, index: Tensor) -> Any: ...


def batch_shape(inputs: Mapping[str, Any]) -> tuple[int, torch.device]:
    """Batch size and device of a model-inputs mapping (from its first tensor)."""
    for value in inputs.values():
        if isinstance(value, Tensor):
            return value.shape[0], value.device
    raise ValueError("model inputs hold no tensor")


def first_step(model: Generator, inputs: Mapping[str, Any], bos: int, copies: int) -> tuple[Tensor, Any, Tensor, Tensor]:
    """Encode, take the BOS step per image, then repeat every row ``copies`` times.

    Returns ``log_probs`` (B, V) of the first token (not repeated), the repeated state, the repeated prefix
    (B * copies, 1) of BOS and ``rows`` (B * copies,), the image index of each repeated row.
    """
    batch, device = batch_shape(inputs)
    state = model.encode(inputs)
    prefix = torch.full((batch, 1), bos, dtype=torch.long, device=device)  # (B, 1)
    log_probs, state = model.step(prefix, state)  # (B, V)
    rows = torch.arange(batch, device=device).repeat_interleave(copies)  # (B * copies,)
    return log_probs, model.reorder(state, rows), prefix[rows], rows


def extend(prefix: Tensor, word: Tensor, finished: Tensor, pad: int, eos: int) -> tuple[Tensor, Tensor, Tensor]:
    """Append ``word`` (B,) to ``prefix`` (B, t), writing ``pad`` for rows already ``finished`` (B,).

    Returns the new prefix (B, t + 1), the written words (B,) and the updated finished flags (B,).
    """
    word = word.masked_fill(finished, pad)
    return torch.cat([prefix, word[:, None]], dim=1), word, finished | (word == eos)
