"""Read-ahead hints: a batch's regions requested from the disk together, before they are read one by one.

A DataLoader batch reads its images one after another, each a synchronous request: with a cold page cache the disk
sees one request at a time and spends most of each one on its latency. A store that can say where an image's bytes
lie offers ``prefetch(image_ids)``, which asks the kernel to start reading them all
(``posix_fadvise(POSIX_FADV_WILLNEED)``, asynchronous read-ahead into the page cache); the reads that follow find
their pages in the cache or in flight. A hint changes no result: the reads return the same bytes and report the same
errors, and a hint the kernel cannot take (no ``posix_fadvise`` on the platform, memory pressure evicting the pages
first) only leaves the reads as slow as without it.
"""

from __future__ import annotations

import os
from typing import Iterable

from vlattn.data.features.base import FeatureStore


def prefetch(store: FeatureStore, image_ids: Iterable[int]) -> None:
    """Hint ``store`` to start reading the regions of ``image_ids`` (a no-op for a store without read-ahead)."""
    hint = getattr(store, "prefetch", None)
    if hint is not None:
        hint(image_ids)


def will_need(fd: int, ranges: Iterable[tuple[int, int]]) -> None:
    """``posix_fadvise(WILLNEED)`` for each ``(offset, length)`` byte range of the open file ``fd`` (nothing where
    the platform has no ``posix_fadvise``; a refused hint is ignored, the read that follows reports real errors)."""
    if not hasattr(os, "posix_fadvise"):
        return
    for offset, length in ranges:
        if length > 0:
            try:
                os.posix_fadvise(fd, offset, length, os.POSIX_FADV_WILLNEED)
            except OSError:
                return
