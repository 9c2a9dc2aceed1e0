"""Position-wise feed-forward network (Vaswani et al. 2017, Eq. 2): FFN(x) = max(0, x W1 + b1) W2 + b2."""

from __future__ import annotations

from torch import Tensor, nn


class FeedForward(nn.Module):
    """Linear(d->d_ff) + ReLU + dropout + Linear(d_ff->d), applied per position: (B, N, d) -> (B, N, d)."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        """(B, N, d) -> (B, N, d)."""
        return self.fc2(self.dropout(self.fc1(x).relu()))
