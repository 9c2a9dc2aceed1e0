"""Per-item text kept in flat numpy arrays instead of Python objects, for datasets read by DataLoader workers.

A forked worker shares the parent's memory until it writes to a page, and reading a Python object writes its
reference count: a dataset holding a list of caption lists has every page holding a caption copied into every
worker as an epoch reaches its captions (COCO: 616k captions, several hundred MB per worker). Numpy arrays are read
without writing, so their pages stay shared; they also pickle as a few buffers for spawned workers.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def flat_offsets(lengths: Sequence[int] | np.ndarray) -> np.ndarray:
    """(n + 1,) int64 start offsets of ``n`` consecutive runs of ``lengths``: run i is ``[out[i], out[i + 1])``."""
    out = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(np.asarray(lengths, dtype=np.int64), out=out[1:])
    return out


class PackedTexts:
    """Groups of strings (e.g. the reference captions of each image) as one UTF-8 buffer and two offset arrays.

    ``texts[i]`` is the list of group i's strings, decoded on access.
    """

    def __init__(self, groups: Sequence[Sequence[str]]) -> None:
        encoded = [text.encode("utf-8") for group in groups for text in group]
        self._bytes = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        self._texts = flat_offsets([len(text) for text in encoded])  # (T + 1,) byte offsets of each string
        self._groups = flat_offsets([len(group) for group in groups])  # (G + 1,) string offsets of each group

    def __len__(self) -> int:
        return len(self._groups) - 1

    def __getitem__(self, index: int) -> list[str]:
        first, last = int(self._groups[index]), int(self._groups[index + 1])
        bounds = self._texts[first : last + 1].tolist()
        return [self._bytes[a:b].tobytes().decode("utf-8") for a, b in zip(bounds[:-1], bounds[1:])]
