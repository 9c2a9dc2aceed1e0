"""Pieces shared by the decoders: the first step per image, and how a prefix grows.

Every decoder drives a model only through ``encode(features, boxes, region_mask) -> state``,
``step(tokens (B,t), state) -> (log_probs (B,V), state)`` and ``reorder(state, index (B',)) -> state``.
The first step runs once per image (so per-image work such as cross-attention keys/values is done once)
before the state is expanded to beams or samples.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
from torch import Tensor


class Generator(Protocol):
    """What decoding needs from a model."""

    def encode(self, features: Tensor, boxes: Tensor, region_mask: Tensor) -> Any: ...

    def step(self, tokens: Tensor, state: Any) -> tuple[Tensor, Any]: ...

    def reorder(self, state: Any, index: Tensor) -> Any: ...


def first_step(
    model: Generator, features: Tensor, boxes: Tensor, region_mask: Tensor, bos: int, copies: int
) -> tuple[Tensor, Any, Tensor, Tensor]:
    """Encode, take the BOS step per image, then repeat every row ``copies`` times.

    Returns ``log_probs`` (B, V) of the first token (not repeated), the repeated state, the repeated prefix
    (B * copies, 1) of BOS and ``rows`` (B * copies,), the image index of each repeated row.
    """
    batch = features.shape[0]
    state = model.encode(features, boxes, region_mask)
    prefix = torch.full((batch, 1), bos, dtype=torch.long, device=features.device)  # (B, 1)
    log_probs, state = model.step(prefix, state)  # (B, V)
    rows = torch.arange(batch, device=features.device).repeat_interleave(copies)  # (B * copies,)
    return log_probs, model.reorder(state, rows), prefix[rows], rows


def extend(prefix: Tensor, word: Tensor, finished: Tensor, pad: int, eos: int) -> tuple[Tensor, Tensor, Tensor]:
    """Append ``word`` (B,) to ``prefix`` (B, t), writing ``pad`` for rows already ``finished`` (B,).

    Returns the new prefix (B, t + 1), the written words (B,) and the updated finished flags (B,).
    """
    word = word.masked_fill(finished, pad)
    return torch.cat([prefix, word[:, None]], dim=1), word, finished | (word == eos)
