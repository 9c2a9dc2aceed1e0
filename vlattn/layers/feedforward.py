"""Position-wise feed-forward networks and their registry (timm's ``mlp_layer`` idea): every entry is a
class with an ``Options`` dataclass, built as ``cls(d_model, d_ff, dropout, options)`` and mapping
(B, N, d) -> (B, N, d). A class whose options constrain the sizes declares ``size_problem(d_model, d_ff,
options) -> str | None``; :func:`build_feed_forward` turns a problem into a ``ConfigError`` naming the key.

- ``plain``: Vaswani et al. 2017, Eq. 2: FFN(x) = max(0, x W1 + b1) W2 + b2.

The non-linearity is the model kind's choice, not an option of the entry: ``activation`` ``relu`` (the
Transformer) or ``gelu`` (BERT and LXMERT: the exact, erf-based GeLU).
- ``gffn``: LW-Transformer's group-wise FFN (Luo et al. 2022, Sec. III-B, Eq. 7-8): the expanding layer
  H = max(0, x W1 + b1) stays dense (d -> d_f, "to protect the non-linearity"), then the hidden units split
  into k groups H_i of d_f / k and each is mapped to d / k channels, G-FFN(x) = [H_1 W2 + b2, ..., H_k W2 + b2],
  with one W2 in R^{d_f/k x d/k} shared by the groups (WS) or one per group. ``group_intermediate`` (G-IL,
  Table III, the "mini" variant) makes the expanding layer group-wise too (d/k -> d_f/k per group), which
  splits the FFN into k independent ones. k = 1 is the plain FFN (same parameter names and shapes). The released
  captioning code's ``LPositionWiseFeedForward`` (luogen1996/LWTransformer) is this with ``share_weights``: dense
  ``fc1``, ReLU, dropout, then one ``fc2`` (d_f/k -> d/k) over the k contiguous hidden groups; its residual,
  dropout and LayerNorm are the layer's post-norm here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch.nn.functional as F
from torch import Tensor, nn

from vlattn.config import MAX_HEADS, bounded, lookup, parse_options
from vlattn.errors import ConfigError
from vlattn.layers.dropout import Dropout
from vlattn.layers.grouped import GroupedLinear


Activation = Literal["relu", "gelu"]
ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


class FeedForward(nn.Module):
    """Linear(d->d_ff) + activation (ReLU by default) + dropout + Linear(d_ff->d), applied per position:
    (B, N, d) -> (B, N, d)."""

    @dataclass
    class Options:
        """The plain feed-forward network has no options of its own."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, options: Options | None = None,
                 activation: Activation = "relu") -> None:
        super().__init__()
        self.fc1, self.fc2 = self.layers(d_model, d_ff, options)
        self.dropout = Dropout(dropout)
        self.activation = ACTIVATIONS[activation]

    def layers(self, d_model: int, d_ff: int, options: object) -> tuple[nn.Module, nn.Module]:
        """The expanding (d -> d_ff) and scaling (d_ff -> d) layers: dense here."""
        return nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x: Tensor) -> Tensor:
        """(B, N, d) -> (B, N, d)."""
        return self.fc2(self.dropout(self.activation(self.fc1(x))))


class GroupFeedForward(FeedForward):
    """G-FFN (Eq. 7-8): dense (or, with G-IL, group-wise) Linear(d->d_ff) + ReLU + dropout, then a group-wise
    Linear(d_ff->d); (B, N, d) -> (B, N, d)."""

    @dataclass
    class Options:
        """``groups`` k (divides d and d_ff), ``share_weights`` (WS) across groups, ``group_intermediate``
        (G-IL: the expanding layer group-wise too)."""

        groups: int = bounded(2, ge=1, le=MAX_HEADS)
        share_weights: bool = True
        group_intermediate: bool = False

    @staticmethod
    def size_problem(d_model: int, d_ff: int, options: Options) -> str | None:
        """Why ``options`` cannot split these sizes into groups (None if they can)."""
        for name, size in (("d_model", d_model), ("d_ff", d_ff)):
            if size % options.groups:
                return f"{name} {size} is not divisible by groups {options.groups}"
        return None

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, options: Options | None = None,
                 activation: Activation = "relu") -> None:
        options = options or self.Options()
        problem = self.size_problem(d_model, d_ff, options)
        if problem:
            raise ValueError(problem)
        super().__init__(d_model, d_ff, dropout, options, activation)
        self.groups = options.groups

    def layers(self, d_model: int, d_ff: int, options: Options) -> tuple[nn.Module, nn.Module]:
        """Dense (group-wise with G-IL) expanding layer; group-wise scaling layer (Eq. 8)."""
        k, shared = options.groups, options.share_weights
        expand = GroupedLinear(d_model, d_ff, k, shared=shared) if options.group_intermediate else nn.Linear(d_model, d_ff)
        return expand, GroupedLinear(d_ff, d_model, k, shared=shared)


FEED_FORWARD: dict[str, type[nn.Module]] = {"plain": FeedForward, "gffn": GroupFeedForward}


def build_feed_forward(
    name: str, d_model: int, d_ff: int, dropout: float = 0.0, options: dict[str, Any] | Any = None,
    where: str = "feed_forward", activation: Activation = "relu",
) -> nn.Module:
    """Instantiate the registered feed-forward ``name`` with validated ``options`` (errors name ``where``) and the
    model's ``activation``."""
    cls = lookup(FEED_FORWARD, name, "feed-forward", where)
    parsed = parse_options(cls.Options, options, f"{where}.options")
    problem = cls.size_problem(d_model, d_ff, parsed) if hasattr(cls, "size_problem") else None
    if problem:
        raise ConfigError(f"{where}: feed-forward {name!r} {problem}")
    return cls(d_model, d_ff, dropout, parsed, activation)
