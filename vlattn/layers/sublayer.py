"""Post-LN residual connection around a sub-layer (Vaswani et al. 2017, Sec. 3.1; NG-SAN Sec. 3.2):
LayerNorm(x + Dropout(Sublayer(x))).
"""

from __future__ import annotations

from torch import Tensor, nn


class PostNorm(nn.Module):
    """``forward(x, y) = LayerNorm(x + dropout(y))`` where ``y`` is the sub-layer output; (B, N, d)."""

    def __init__(self, d_model: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.norm = nn.LayerNorm(d_model)

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        """Residual input ``x`` and sub-layer output ``y``, both (B, N, d) -> (B, N, d)."""
        return self.norm(x + self.dropout(y))
