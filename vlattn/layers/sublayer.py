"""Post-LN residual connection around a sub-layer (Vaswani et al. 2017, Sec. 3.1; NG-SAN Sec. 3.2):
LayerNorm(x + Dropout(Sublayer(x))); and the LayerNorm variant of MCAN's released code.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from vlattn.layers.dropout import Dropout


class StdLayerNorm(nn.Module):
    """LayerNorm as MCAN's released code computes it (``net_utils.LayerNorm``): the *unbiased* standard
    deviation, with ``eps`` added to it rather than to the variance:
    ``weight * (x - mean) / (std + eps) + bias`` over the last axis; (..., d) -> (..., d).
    Same parameters as ``nn.LayerNorm(d)``; outputs differ by a factor sqrt((d-1)/d) (and in eps)."""

    def __init__(self, d_model: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x: Tensor) -> Tensor:
        mean = x.mean(-1, keepdim=True)
        return self.weight * (x - mean) / (x.std(-1, keepdim=True) + self.eps) + self.bias


class PostNorm(nn.Module):
    """``forward(x, y) = norm(x + dropout(y))`` where ``y`` is the sub-layer output; (B, N, d).
    ``norm`` defaults to ``nn.LayerNorm(d_model)``."""

    def __init__(self, d_model: int, dropout: float = 0.0, norm: nn.Module | None = None) -> None:
        super().__init__()
        self.dropout = Dropout(dropout)
        self.norm = norm if norm is not None else nn.LayerNorm(d_model)

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        """Residual input ``x`` and sub-layer output ``y``, both (B, N, d) -> (B, N, d)."""
        return self.norm(x + self.dropout(y))
