"""Key/value caches for incremental decoding (Vaswani et al. 2017, Sec. 3.2.3, used autoregressively).

A cache holds the *projected* keys and values of one attention site, laid out (B, H, N, d_k):

- :class:`KVCache` (decoder self-attention): each step projects only the new token(s) and appends them,
  so step t costs O(t) instead of re-running the whole prefix.
- :class:`StaticKVCache` (decoder cross-attention): the image's keys/values are projected on first use
  and reused at every later step (the M2 anchor re-projects them at every step).
- :class:`SharedKVCache`: compute-once keys/values shared by every row (a global dictionary, batch of one).

Caches live in the decoding state returned by a model's ``encode``; :func:`reorder_state` index-selects
every tensor of that state (and of the caches in it) to follow beams.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

Projector = Callable[[], tuple[Tensor, Tensor]]


class KVCache:
    """Appending cache: keys/values (B, H, t, d_k) grow by the new positions at every call."""

    def __init__(self, key: Tensor | None = None, value: Tensor | None = None) -> None:
        self.key = key
        self.value = value

    def __len__(self) -> int:
        return 0 if self.key is None else self.key.shape[2]

    def fetch(self, project: Projector) -> tuple[Tensor, Tensor]:
        """Project the new key/value positions with ``project()``, append them, return all (B, H, t, d_k)."""
        key, value = project()
        if self.key is not None:
            key = torch.cat([self.key, key], dim=2)  # (B, H, t, d_k)
            value = torch.cat([self.value, value], dim=2)
        self.key, self.value = key, value
        return key, value

    def reorder(self, index: Tensor) -> KVCache:
        """A new cache holding batch rows ``index`` (B',)."""
        if self.key is None:
            return type(self)()
        return type(self)(self.key.index_select(0, index), self.value.index_select(0, index))


class StaticKVCache(KVCache):
    """Compute-once cache: keys/values (B, H, N, d_k) over a fixed memory (the image regions)."""

    def fetch(self, project: Projector) -> tuple[Tensor, Tensor]:
        """Return the stored key/value, projecting them with ``project()`` on the first call only."""
        if self.key is None:
            self.key, self.value = project()
        return self.key, self.value


class SharedKVCache(StaticKVCache):
    """Compute-once cache over keys/values that every row shares (CATT's global dictionary): projected from a batch
    of one, (1, H, K, d_k), broadcast by attention to any batch; reordering rows leaves it as it is."""

    def reorder(self, index: Tensor) -> SharedKVCache:
        return self


def reorder_state(state: Any, index: Tensor) -> Any:
    """Select batch rows ``index`` (B',) of every tensor in a nested state: dataclasses (field by field),
    dicts, lists, tuples, and objects with their own ``reorder(index)`` (caches, box geometry)."""
    if isinstance(state, Tensor):
        return state.index_select(0, index)
    if hasattr(state, "reorder"):
        return state.reorder(index)
    if dataclasses.is_dataclass(state) and not isinstance(state, type):
        changes = {f.name: reorder_state(getattr(state, f.name), index) for f in dataclasses.fields(state)}
        return dataclasses.replace(state, **changes)
    if isinstance(state, dict):
        return {name: reorder_state(value, index) for name, value in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(reorder_state(value, index) for value in state)
    return state
