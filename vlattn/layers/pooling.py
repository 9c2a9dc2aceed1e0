"""Pooling over a set of positions with a validity mask (padded regions or words are left out)."""

from __future__ import annotations

import torch
from torch import Tensor


def masked_mean(x: Tensor, valid: Tensor | None, dim: int = -2) -> Tensor:
    """Mean of ``x`` over its positions axis ``dim`` where ``valid`` (x's shape without the channel axis, bool)
    is True; 0 where no position is valid; a plain mean when ``valid`` is None. E.g. (B, N, C), (B, N) -> (B, C)."""
    if valid is None:
        return x.mean(dim=dim)
    kept = valid[..., None]  # (..., N, 1)
    total = x.masked_fill(~kept, 0.0).sum(dim=dim)  # (..., C); masked_fill: padding may hold anything
    return total / kept.sum(dim=dim).clamp(min=1).to(x.dtype)


def masked_max(x: Tensor, valid: Tensor | None, dim: int = -2) -> Tensor:
    """Maximum of ``x`` over ``dim`` where ``valid`` is True; 0 where no position is valid (shapes as
    :func:`masked_mean`)."""
    if valid is None:
        return x.amax(dim=dim)
    kept = valid[..., None]
    pooled = x.masked_fill(~kept, float("-inf")).amax(dim=dim)
    return torch.where(kept.any(dim=dim), pooled, torch.zeros_like(pooled))
