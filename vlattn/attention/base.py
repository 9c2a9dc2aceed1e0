"""The typed parts of the one attention contract every mechanism follows.

``forward(query (B,Nq,Dq), key (B,Nk,Dk), value (B,Nk,Dk), *, mask=None, bias=None, cache=None,
context=None, need_weights=False) -> AttentionOutput(out (B,Nq,out_dim), weights or None)``

- ``mask``: bool, True = attend, broadcastable to (B, H, Nq, Nk) (PyTorch SDPA convention).
- ``bias``: float added to the logits, same broadcast (precomputed, query-independent biases).
- ``cache``: a :class:`~vlattn.attention.cache.KVCache` for incremental decoding.
- ``context``: an :class:`AttentionContext` carrying what some mechanisms need and others ignore — the
  site, a per-query mask (NSA's masked instance statistics), and the boxes with their pairwise geometry
  (GSA's bias needs the layer's own queries, so it cannot be precomputed into ``bias``).
- The return value is always an :class:`AttentionOutput`; ``weights`` is None unless ``need_weights``.

Each mechanism class declares :class:`Capabilities` (checked by the model builders, which refuse a bad
placement with a ``ConfigError`` naming the site and the mechanism) and an ``Options`` dataclass (its
mechanism-specific options, validated when a config loads). It is built as ``cls(dims, options)``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NamedTuple

from torch import Tensor

from vlattn.layers.geometry import BoxGeometry


class Site(str, enum.Enum):
    """Where an attention module sits.

    ``encoder_self``: non-causal self-attention over a whole set (regions, question words);
    ``decoder_self``: causal self-attention of an autoregressive decoder (one token at a time, cached);
    ``cross``: queries from one stream attend over another (decoder -> regions, question-guided image
    attention, an LSTM's top-down attention over regions).
    """

    ENCODER_SELF = "encoder_self"
    DECODER_SELF = "decoder_self"
    CROSS = "cross"


ALL_SITES = frozenset(Site)


@dataclass(frozen=True)
class Capabilities:
    """What a mechanism supports or needs; :func:`vlattn.attention.check_placement` enforces it."""

    sites: frozenset[Site] = ALL_SITES  # where it may be placed (NSA/GSA: encoder self-attention only)
    cacheable: bool = True  # supports an appending KVCache (needed at decoder_self sites)
    needs_geometry: bool = False  # needs boxes in the context (GSA)
    heads: bool = True  # multi-head: d_model must divide by num_heads
    query_dim_differs: bool = False  # accepts queries of another size than keys (additive attention)


@dataclass(frozen=True)
class AttentionDims:
    """Sizes of one attention module.

    ``d_model``: the width of the heads' projections and of the output for Transformer mechanisms; the
    hidden size of the scoring MLP for additive attention. ``query_dim``/``key_dim`` default to ``d_model``
    (values have the keys' size). ``dropout`` applies to the attention weights.
    """

    d_model: int
    num_heads: int = 1
    dropout: float = 0.0
    query_dim: int | None = None
    key_dim: int | None = None

    @property
    def q_dim(self) -> int:
        return self.d_model if self.query_dim is None else self.query_dim

    @property
    def k_dim(self) -> int:
        return self.d_model if self.key_dim is None else self.key_dim


@dataclass
class AttentionContext:
    """Per-call information that mechanisms may use; every field is optional except the site.

    ``query_mask``: bool (B, Nq), True = real query (padding excluded from statistics over queries).
    ``geometry``: the boxes of the keys' regions (and, at self-attention sites, of the queries), with
    pairwise relative geometry computed once per image and shared by all layers.
    """

    site: Site
    query_mask: Tensor | None = None
    geometry: BoxGeometry | None = None


class AttentionOutput(NamedTuple):
    """``out`` (B, Nq, out_dim); ``weights`` (B, H, Nq, Nk') when asked for, else None."""

    out: Tensor
    weights: Tensor | None
