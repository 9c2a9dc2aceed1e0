"""Attention mechanisms behind one Q-K-V interface, and their registry.

Every mechanism is an ``nn.Module`` built as ``cls(d_model=..., num_heads=..., dropout=..., **options)`` with
``forward(query (B,Nq,D), key (B,Nk,D), value (B,Nk,D), *, mask=None, bias=None, cache=None,
need_weights=False) -> (B,Nq,D)`` (or ``(out, weights (B,H,Nq,Nk))``). ``mask`` is bool, True = attend,
broadcastable to (B,H,Nq,Nk); ``bias`` is a float tensor added to the logits; ``cache`` is a
:class:`~vlattn.attention.cache.KVCache`. New mechanisms register themselves in :data:`ATTENTION`.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from vlattn.attention.cache import KVCache, StaticKVCache, reorder_state
from vlattn.attention.memory import MemoryAugmentedAttention
from vlattn.attention.mha import MultiHeadAttention

ATTENTION: dict[str, type[nn.Module]] = {
    "mha": MultiHeadAttention,
    "memory": MemoryAugmentedAttention,
}


def build_attention(name: str, **kwargs: Any) -> nn.Module:
    """Instantiate the registered mechanism ``name`` with ``kwargs``; unknown names list the valid ones."""
    if name not in ATTENTION:
        raise KeyError(f"unknown attention {name!r}; valid names: {', '.join(sorted(ATTENTION))}")
    return ATTENTION[name](**kwargs)


__all__ = [
    "ATTENTION",
    "KVCache",
    "MemoryAugmentedAttention",
    "MultiHeadAttention",
    "StaticKVCache",
    "build_attention",
    "reorder_state",
]
