"""Position-wise feed-forward networks and their registry (timm's ``mlp_layer`` idea): every entry is a
class with an ``Options`` dataclass, built as ``cls(d_model, d_ff, dropout, options)`` and mapping
(B, N, d) -> (B, N, d). ``plain`` is Vaswani et al. 2017, Eq. 2: FFN(x) = max(0, x W1 + b1) W2 + b2.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import Tensor, nn

from vlattn.config import lookup, parse_options


class FeedForward(nn.Module):
    """Linear(d->d_ff) + ReLU + dropout + Linear(d_ff->d), applied per position: (B, N, d) -> (B, N, d)."""

    @dataclass
    class Options:
        """The plain feed-forward network has no options of its own."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, options: Options | None = None) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        """(B, N, d) -> (B, N, d)."""
        return self.fc2(self.dropout(self.fc1(x).relu()))


FEED_FORWARD: dict[str, type[nn.Module]] = {"plain": FeedForward}


def build_feed_forward(
    name: str, d_model: int, d_ff: int, dropout: float = 0.0, options: dict[str, Any] | Any = None,
    where: str = "feed_forward",
) -> nn.Module:
    """Instantiate the registered feed-forward ``name`` with validated ``options`` (errors name ``where``)."""
    cls = lookup(FEED_FORWARD, name, "feed-forward", where)
    return cls(d_model, d_ff, dropout, parse_options(cls.Options, options, f"{where}.options"))
