"""Key/value caches for incremental decoding (Vaswani et al. 2017, Sec. 3.2.3, used autoregressively).

A cache holds the *projected* keys and values of one attention site, laid out (B, H, N, d_k):

- :class:`KVCache` (decoder self-attention): each step projects only the new token(s) and appends them,
  so step t costs O(t) instead of re-running the whole prefix. Keys and values sit side by side in one
  buffer (B, H, capacity, d_k + d_v) that grows by doubling, so appending writes in place and following the
  beams is one gather per site. With gradients (SCST) the cache appends by concatenation instead: autograd
  must keep every earlier step's keys/values as they were.
- :class:`StaticKVCache` (decoder cross-attention): the image's keys/values are projected on first use
  and reused at every later step (the M2 anchor re-projects them at every step). Captioners keep it once
  per image, not per beam (see :class:`~vlattn.models.transformer.TransformerState`).
- :class:`SharedKVCache`: compute-once keys/values shared by every row (a global dictionary, batch of one);
  never reordered.

Caches live in the decoding state returned by a model's ``encode``; :func:`reorder_state` index-selects
every tensor of that state (and of the caches in it) to follow beams.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable
from typing import Any, Protocol

import torch
from torch import Tensor

Projector = Callable[[], tuple[Tensor, Tensor]]
MIN_CAPACITY = 32  # positions allocated by the first append without gradients (a 20-word caption never regrows)


class KeyValueSource(Protocol):
    """What attention fetches projected keys/values through: the caches here, or an adapter around one."""

    def fetch(self, project: Projector) -> tuple[Tensor, Tensor]: ...


class KVCache:
    """Appending cache: keys (B, H, t, d_k) and values (B, H, t, d_v) of the t positions so far, views of one
    buffer (B, H, capacity, d_k + d_v).

    Without gradients :meth:`reorder` gathers into a spare buffer when one is free: the buffer of the cache this one
    was reordered from, once that cache is gone (decoding drops each state as it reorders it), so a search
    alternates between two buffers instead of allocating (and faulting in) a new one at every step. The keys and
    values handed out are views of the buffer: valid while their cache lives."""

    def __init__(self, key: Tensor | None = None, value: Tensor | None = None) -> None:
        """Empty, or holding ``key`` (B, H, t, d_k) and ``value`` (B, H, t, d_v)."""
        self.buffer = None if key is None else torch.cat([key, value], dim=-1)  # (B, H, capacity, d_k + d_v)
        self.length = 0 if key is None else key.shape[2]
        self.key_width = 0 if key is None else key.shape[-1]
        self.projection: Any = None  # what the attention module keeps for the cache's lifetime (its joined projection)
        self.spare: Tensor | None = None  # the buffer of the cache reordered from: the next reorder's target ...
        self.spare_owner: Callable[[], KVCache | None] = lambda: None  # ... once this returns None (that cache gone)

    @classmethod
    def of_buffer(cls, buffer: Tensor, length: int, key_width: int) -> KVCache:
        """A cache over ``buffer`` (B, H, capacity, d_k + d_v) whose first ``length`` positions are filled."""
        cache = cls()
        cache.buffer, cache.length, cache.key_width = buffer, length, key_width
        return cache

    def follow(self, other: KVCache) -> KVCache:
        """This cache with ``other``'s ``projection`` (a reordered cache keeps what its attention module stored)."""
        self.projection = other.projection
        return self

    def __len__(self) -> int:
        return self.length

    @property
    def key(self) -> Tensor | None:
        """Keys (B, H, t, d_k), or None before the first append."""
        return None if self.buffer is None else self.buffer[:, :, : self.length, : self.key_width]

    @property
    def value(self) -> Tensor | None:
        """Values (B, H, t, d_v), or None before the first append."""
        return None if self.buffer is None else self.buffer[:, :, : self.length, self.key_width :]

    def fetch(self, project: Projector) -> tuple[Tensor, Tensor]:
        """Project the new key/value positions with ``project()``, append them, return all (B, H, t, d)."""
        key, value = project()  # (B, H, n, d_k), (B, H, n, d_v)
        new, self.key_width = key.shape[2], key.shape[-1]
        if key.requires_grad or value.requires_grad or (self.buffer is not None and self.buffer.requires_grad):
            return self.append_joined(torch.cat([key, value], dim=-1), key.shape[-1])
        self._reserve(key, value.shape[-1], self.length + new)
        self.buffer[:, :, self.length : self.length + new, : self.key_width] = key
        self.buffer[:, :, self.length : self.length + new, self.key_width :] = value
        self.length += new
        return self.key, self.value

    def append_joined(self, joined: Tensor, key_width: int) -> tuple[Tensor, Tensor]:
        """Append new positions whose keys and values are already side by side, ``joined`` (B, H, n, d_k + d_v)
        (the first ``key_width`` channels the keys): one copy into the buffer, or one concatenation with
        gradients. Returns all keys and values (B, H, t, d)."""
        new, self.key_width = joined.shape[2], key_width
        if joined.requires_grad or (self.buffer is not None and self.buffer.requires_grad):
            before = self.buffer
            self.buffer = joined if before is None else torch.cat([before[:, :, : self.length], joined], dim=2)
        else:
            self._reserve(joined, joined.shape[-1] - key_width, self.length + new)
            self.buffer[:, :, self.length : self.length + new] = joined
        self.length += new
        return self.key, self.value

    def _reserve(self, like: Tensor, value_width: int, length: int) -> None:
        """Make the buffer hold at least ``length`` positions (doubling), keeping the positions so far."""
        capacity = 0 if self.buffer is None else self.buffer.shape[2]
        if length <= capacity:
            return
        batch, heads = like.shape[:2]
        size = (batch, heads, max(length, 2 * capacity, MIN_CAPACITY), self.key_width + value_width)
        grown = like.new_empty(size)
        if self.buffer is not None:
            grown[:, :, : self.length] = self.buffer[:, :, : self.length]
        self.buffer, self.spare = grown, None

    def reorder(self, index: Tensor) -> KVCache:
        """A new cache holding batch rows ``index`` (B',): one gather of the positions so far (into the spare
        buffer when it is free and fits; see the class docstring)."""
        if self.buffer is None:
            return type(self)().follow(self)
        used = self.buffer[:, :, : self.length]  # (B, H, t, d_k + d_v)
        if self.buffer.requires_grad:
            return self.of_buffer(used.index_select(0, index), self.length, self.key_width).follow(self)
        shape = (index.shape[0], *self.buffer.shape[1:])  # same capacity
        free = self.spare is not None and self.spare.shape == shape and self.spare_owner() is None
        target = self.spare if free else self.buffer.new_empty(shape)
        torch.index_select(used, 0, index, out=target[:, :, : self.length])
        moved = self.of_buffer(target, self.length, self.key_width).follow(self)
        if self.buffer.shape == shape:
            moved.spare, moved.spare_owner = self.buffer, weakref.ref(self)
        return moved


@dataclasses.dataclass
class JoinedAppend:
    """A key/value source whose keys and values are already projected: fetching appends ``joined``
    (B, H, n, d_k + d_v), keys in the first ``key_width`` channels, to ``cache`` (:meth:`KVCache.append_joined`)."""

    cache: KVCache
    joined: Tensor
    key_width: int

    def fetch(self, project: Projector) -> tuple[Tensor, Tensor]:
        return self.cache.append_joined(self.joined, self.key_width)


class StaticKVCache:
    """Compute-once cache: keys/values (B, H, N, d_k) over a fixed memory (the image regions)."""

    def __init__(self, key: Tensor | None = None, value: Tensor | None = None) -> None:
        self.key = key
        self.value = value

    def __len__(self) -> int:
        return 0 if self.key is None else self.key.shape[2]

    def fetch(self, project: Projector) -> tuple[Tensor, Tensor]:
        """Return the stored key/value, projecting them with ``project()`` on the first call only."""
        if self.key is None:
            self.key, self.value = project()
        return self.key, self.value

    def reorder(self, index: Tensor) -> StaticKVCache:
        """A new cache holding batch rows ``index`` (B',) (models that keep one row per beam)."""
        if self.key is None:
            return type(self)()
        return type(self)(self.key.index_select(0, index), self.value.index_select(0, index))


class SharedKVCache(StaticKVCache):
    """Compute-once cache over keys/values that every row shares (CATT's global dictionary): projected from a batch
    of one, (1, H, K, d_k), broadcast by attention to any batch; reordering rows leaves it as it is."""

    def reorder(self, index: Tensor) -> SharedKVCache:
        return self


def fetch_projections(cache: KeyValueSource | None, project: Projector) -> tuple[Tensor, Tensor]:
    """``project()`` without a cache, else through it (appended or computed once)."""
    return project() if cache is None else cache.fetch(project)


def site_cache(attention: Any, cache: KeyValueSource) -> KeyValueSource:
    """The cache a site hands its mechanism: ``cache`` as the model makes it, or the mechanism's wrapper around it
    (``attention.wrap_cache(cache)``) when the mechanism keeps more than the site's keys/values (CATT: its
    dictionary's projections)."""
    wrap = getattr(attention, "wrap_cache", None)
    return cache if wrap is None else wrap(cache)


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
