"""Post-LN residual connection around a sub-layer (Vaswani et al. 2017, Sec. 3.1; NG-SAN Sec. 3.2):
LayerNorm(x + Dropout(Sublayer(x))); the doubled form of the released LW-Transformer captioning code; and the
LayerNorm variant of MCAN's released code.
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


class DoublePostNorm(nn.Module):
    """Residual + LayerNorm applied twice around one sub-layer, as the released LW-Transformer captioning code wraps
    every attention (its ``LMultiHeadAttention`` returns LayerNorm(x + dropout(y)), and the encoder/decoder layer
    adds LayerNorm(x + dropout(that))):

        forward(x, y) = outer(x, inner(x, y)) = LN_o(x + dropout(LN_i(x + dropout(y)))),

    both residuals over the same input ``x``; (B, N, d). Two LayerNorms: 4 d parameters instead of 2 d."""

    def __init__(self, d_model: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.inner = PostNorm(d_model, dropout)
        self.outer = PostNorm(d_model, dropout)

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        """Residual input ``x`` and sub-layer output ``y``, both (B, N, d) -> (B, N, d)."""
        return self.outer(x, self.inner(x, y))
