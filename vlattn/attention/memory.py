"""Memory-augmented attention (Cornia et al. 2020, "Meshed-Memory Transformer for Image Captioning", Eq. 3;
initialisation: supplementary A.1, "Model dimensionality and weight initialization"):

    M_mem(X) = Attention(W_q X, K, V),   K = [W_k X; M_k],   V = [W_v X; M_v],

with ``m`` learnable key slots M_k and value slots M_v (``m`` x d each, split per head into (H, m, d_k)),
appended to the projected keys/values of every head. Queries are unchanged, so the output keeps the
queries' cardinality. The slots are never masked: a padding mask or a causal mask only covers the input
keys, and any float ``bias`` gets zero logits on the memory columns.

Initialisation (``init`` option, a key of :data:`MEMORY_INITS`):

- ``"paper"`` (default): keys ~ N(0, 1/d_k), values ~ N(0, 1/m) (variances, as the supplementary states),
  used as they are. This is the documented intent; it is also consistent with our sinusoidal decoder
  positions, which follow the paper where the official code is accidentally different (see
  :mod:`vlattn.models.m2`).
- ``"official"``: the behaviour of the released code. It draws keys/values from N(0, std 1/d_k) and
  N(0, std 1/m) and multiplies them by sqrt(d_k) and sqrt(m) at every use (which alone would give the
  paper's variances), but the model-wide Xavier-uniform pass afterwards overwrites the draw, so the stored
  (1, m, d) tensors are Xavier-uniform (fan_in = m * d, fan_out = d) and the effective slots are that
  times sqrt(d_k) / sqrt(m). The scale at use also multiplies Adam's effective step on the slots by
  sqrt(d_k) = 8 and sqrt(m) = 6.3 (d=512, 8 heads, m=40), so this option reproduces the released
  training dynamics, not only the starting point.

Caches work as for :class:`~vlattn.attention.mha.MultiHeadAttention`: only the projected input keys/values
are cached (appended or computed once) and the slots are appended after the fetch, so an appending cache
never accumulates copies of them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor, nn

from vlattn.attention.base import AttentionDims
from vlattn.attention.cache import KeyValueSource, Projector
from vlattn.attention.mha import MultiHeadAttention
from vlattn.config import MAX_WIDTH, bounded

# name -> (initialise the (m, d) key and value slots in place; return the (key, value) scales at use)
MemoryInit = Callable[[nn.Parameter, nn.Parameter, int], tuple[float, float]]


def paper_init(keys: nn.Parameter, values: nn.Parameter, d_head: int) -> tuple[float, float]:
    """Supplementary A.1: keys ~ N(0, var 1/d_k), values ~ N(0, var 1/m); no scaling at use."""
    nn.init.normal_(keys, std=d_head**-0.5)
    nn.init.normal_(values, std=values.shape[0] ** -0.5)
    return 1.0, 1.0


def official_init(keys: nn.Parameter, values: nn.Parameter, d_head: int) -> tuple[float, float]:
    """Released code: Xavier-uniform over a (1, m, d) tensor (bound sqrt(6 / ((m + 1) d))), scaled at use by
    sqrt(d_k) (keys) and sqrt(m) (values)."""
    slots, d_model = keys.shape
    for slot in (keys, values):
        nn.init.xavier_uniform_(slot.view(1, slots, d_model))
    return math.sqrt(d_head), math.sqrt(slots)


MEMORY_INITS: dict[str, MemoryInit] = {"paper": paper_init, "official": official_init}


class MemorySlots:
    """Cache adapter: fetch the input keys/values (through ``cache`` if given), then append the slots."""

    def __init__(self, cache: KeyValueSource | None, keys: Tensor, values: Tensor) -> None:
        self.cache = cache
        self.keys = keys  # (1, H, m, d_k)
        self.values = values  # (1, H, m, d_k)

    def fetch(self, project: Projector) -> tuple[Tensor, Tensor]:
        """Projected inputs (B, H, Nk, d_k) followed by the slots: (B, H, Nk + m, d_k) each."""
        key, value = project() if self.cache is None else self.cache.fetch(project)
        batch = key.shape[0]
        keys = self.keys.expand(batch, -1, -1, -1).to(key.dtype)  # (B, H, m, d_k)
        values = self.values.expand(batch, -1, -1, -1).to(value.dtype)
        return torch.cat([key, keys], dim=2), torch.cat([value, values], dim=2)


def extend_columns(logits_mask: Tensor | None, slots: int, fill: bool | float) -> Tensor | None:
    """Append ``slots`` key columns filled with ``fill`` to a mask/bias (..., Nk) -> (..., Nk + slots)."""
    if logits_mask is None:
        return None
    extra = logits_mask.new_full((*logits_mask.shape[:-1], slots), fill)  # (..., m)
    return torch.cat([logits_mask, extra], dim=-1)


class MemoryAugmentedAttention(MultiHeadAttention):
    """Multi-head attention whose keys/values are extended with ``slots`` learned memory slots (Eq. 3).

    ``forward(query (B,Nq,D), key (B,Nk,D), value (B,Nk,D))`` -> ``out`` (B,Nq,D); with ``need_weights`` the
    weights are (B, H, Nq, Nk + m), the last m columns being the memory slots.
    """

    @dataclass
    class Options:
        """``slots``: m, the number of memory slots (M2 Table 6: 20-60, default 40); ``init``: a key of
        :data:`MEMORY_INITS`."""

        slots: int = bounded(40, ge=1, le=MAX_WIDTH)
        init: Literal["paper", "official"] = "paper"

    no_weight_decay: ClassVar[tuple[str, ...]] = ("memory_keys", "memory_values")

    def __init__(self, dims: AttentionDims, options: Options | None = None) -> None:
        super().__init__(dims)
        options = options or self.Options()
        self.slots = options.slots
        self.memory_init = options.init
        self.memory_keys = nn.Parameter(torch.empty(self.slots, dims.d_model))  # M_k, (m, D)
        self.memory_values = nn.Parameter(torch.empty(self.slots, dims.d_model))  # M_v, (m, D)
        self.key_scale, self.value_scale = MEMORY_INITS[options.init](self.memory_keys, self.memory_values, self.d_head)

    def extra_repr(self) -> str:
        return f"slots={self.slots}, init={self.memory_init!r}"

    def memory(self) -> tuple[Tensor, Tensor]:
        """The slots as used, per head: keys and values (1, H, m, d_k)."""
        keys = self.split_heads(self.key_scale * self.memory_keys[None])  # (1, H, m, d_k)
        values = self.split_heads(self.value_scale * self.memory_values[None])
        return keys, values

    def key_value_source(self, cache: KeyValueSource | None) -> MemorySlots:
        """Fetch the input keys/values through ``cache`` (if any), then append the slots."""
        return MemorySlots(cache, *self.memory())

    def attend(
        self, q: Tensor, query: Tensor, key: Tensor, value: Tensor, *, mask: Tensor | None = None,
        bias: Tensor | None = None, **rest: Any,
    ) -> tuple[Tensor, Tensor | None]:
        """As :meth:`MultiHeadAttention.attend`; ``mask``/``bias`` cover the Nk input keys only and are extended
        with attend (True) / 0 for the memory slots (weights: (B, H, Nq, Nk + m))."""
        mask, bias = extend_columns(mask, self.slots, True), extend_columns(bias, self.slots, 0.0)  # (..., Nk + m)
        return super().attend(q, query, key, value, mask=mask, bias=bias, **rest)
