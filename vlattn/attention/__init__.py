"""Attention mechanisms behind one Q-K-V interface, and their registry.

Every mechanism is an ``nn.Module`` class with ``Options`` (a dataclass of its own options) and
``capabilities`` (:class:`~vlattn.attention.base.Capabilities`; a class whose needs depend on its options also
defines ``capabilities_for(options)``), built as ``cls(dims, options)`` and called as
``forward(query, key, value, *, mask=None, bias=None, cache=None, context=None, need_weights=False)``
-> :class:`~vlattn.attention.base.AttentionOutput` (see :mod:`vlattn.attention.base` for the contract).
New mechanisms add one file and one line in :data:`ATTENTION`. A mechanism whose options constrain the sizes
(G-MHA's groups must divide the heads) declares ``size_problem(dims, options) -> str | None``;
:func:`build_attention` turns a problem into a ``ConfigError`` naming the site.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from vlattn.attention.additive import AdditiveAttention
from vlattn.attention.base import (
    AttentionContext,
    AttentionDims,
    AttentionOutput,
    Capabilities,
    Site,
)
from vlattn.attention.cache import KeyValueSource, KVCache, SharedKVCache, StaticKVCache, reorder_state, site_cache
from vlattn.attention.catt import AdditiveCausalAttention, CausalAttention
from vlattn.attention.groupwise import GroupMultiHeadAttention
from vlattn.attention.gsa import GeometryAwareSelfAttention
from vlattn.attention.memory import MemoryAugmentedAttention
from vlattn.attention.mha import MultiHeadAttention
from vlattn.attention.ngsa import NormalizedGeometryAwareSelfAttention
from vlattn.attention.nsa import NormalizedSelfAttention
from vlattn.attention.sla import StackedLatentAttention
from vlattn.attention.stacked import StackedAttention
from vlattn.config import lookup, parse_options
from vlattn.errors import ConfigError

ATTENTION: dict[str, type[nn.Module]] = {
    "mha": MultiHeadAttention,
    "memory": MemoryAugmentedAttention,
    "additive": AdditiveAttention,
    "catt": CausalAttention,
    "catt_additive": AdditiveCausalAttention,
    "gmha": GroupMultiHeadAttention,
    "stacked": StackedAttention,
    "sla": StackedLatentAttention,
    "nsa": NormalizedSelfAttention,
    "gsa": GeometryAwareSelfAttention,
    "ngsa": NormalizedGeometryAwareSelfAttention,
}


def attention_class(name: str, where: str = "attention") -> type[nn.Module]:
    """The registered mechanism ``name``; a ``ConfigError`` naming ``where`` lists the valid names."""
    return lookup(ATTENTION, name, "attention mechanism", where)


def check_placement(
    name: str,
    dims: AttentionDims,
    *,
    site: Site,
    where: str,
    has_geometry: bool = False,
    cached: bool = False,
    options: dict[str, Any] | Any = None,
) -> None:
    """Refuse a placement the mechanism's capabilities do not allow, naming the site ``where`` and ``name``.

    ``site``: the kind of site; ``has_geometry``: the site's caller passes boxes in the context;
    ``cached``: the site decodes incrementally with an appending key/value cache; ``options``: the mechanism's
    options, for a mechanism whose needs depend on them (it defines ``capabilities_for(options)``: SLA needs
    boxes only with ``position: boxes``).
    """
    cls = attention_class(name, where)
    caps: Capabilities = cls.capabilities
    if hasattr(cls, "capabilities_for"):
        caps = cls.capabilities_for(parse_options(cls.Options, options, f"{where}.options"))
    problem = None
    if site not in caps.sites:
        allowed = ", ".join(sorted(s.value for s in caps.sites))
        problem = f"is not allowed at {site.value} sites (allowed: {allowed})"
    elif caps.needs_geometry and not has_geometry:
        problem = "needs box geometry, which this site does not provide"
    elif cached and not caps.cacheable:
        problem = "does not support the incremental key/value cache this site needs"
    elif caps.heads and dims.d_model % dims.num_heads:
        problem = f"d_model {dims.d_model} is not divisible by num_heads {dims.num_heads}"
    elif not caps.query_dim_differs and dims.q_dim != dims.k_dim:
        problem = f"needs queries and keys of one size, got {dims.q_dim} and {dims.k_dim}"
    if problem:
        raise ConfigError(f"{where}: attention {name!r} {problem}")


def build_attention(
    name: str,
    *,
    d_model: int,
    num_heads: int = 1,
    dropout: float = 0.0,
    query_dim: int | None = None,
    key_dim: int | None = None,
    options: dict[str, Any] | Any = None,
    where: str = "attention",
) -> nn.Module:
    """Instantiate the registered mechanism ``name`` with validated ``options`` (errors name ``where``)."""
    cls = attention_class(name, where)
    dims = AttentionDims(d_model, num_heads, dropout, query_dim, key_dim)
    parsed = parse_options(cls.Options, options, f"{where}.options")
    problem = cls.size_problem(dims, parsed) if hasattr(cls, "size_problem") else None
    if problem:
        raise ConfigError(f"{where}: attention {name!r} {problem}")
    return cls(dims, parsed)


__all__ = [
    "ATTENTION",
    "AdditiveAttention",
    "AdditiveCausalAttention",
    "AttentionContext",
    "AttentionDims",
    "AttentionOutput",
    "Capabilities",
    "CausalAttention",
    "GeometryAwareSelfAttention",
    "GroupMultiHeadAttention",
    "KVCache",
    "KeyValueSource",
    "MemoryAugmentedAttention",
    "MultiHeadAttention",
    "NormalizedGeometryAwareSelfAttention",
    "NormalizedSelfAttention",
    "SharedKVCache",
    "Site",
    "StackedAttention",
    "StackedLatentAttention",
    "StaticKVCache",
    "attention_class",
    "build_attention",
    "check_placement",
    "reorder_state",
    "site_cache",
]
