"""A cache of data-dependent initialisations that are slow at COCO scale, in the data root's ``cache/`` directory:
CATT's image-dictionary k-means (100,000 regions x 2048 into 500 centres takes minutes on a CPU;
benchmarks/RESULTS.md "Scale: start-up").

An entry is keyed by the hash of everything its result depends on (the caller's ``key``: e.g. the feature store's
identity, the images, the sample size, the k-means settings, the library versions, and the random generator's state
before the computation). It holds the result array, its metadata, and the generator's state after the computation,
which a hit restores: the draws that follow are those of an uncached run, so a run is identical with and without
the cache.

An entry is written atomically where no file is or over an entry vlattn wrote (recognised by its format tag when
read), never through a symbolic link; anything else at its path (a damaged entry too) is left as it is and the
result computed each time. An entry that cannot be written (a read-only data directory) only costs the computation.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vlattn.data.npz_cache import READ_ERRORS, has_format, npz_meta
from vlattn.errors import DataError, VlattnError
from vlattn.io import atomic_path, content_hash

FORMAT, VERSION = "vlattn-prepare-cache", 1

Computed = tuple[np.ndarray, dict[str, Any]]  # (result array, its JSON-able metadata)


def entry_path(cache_dir: Path, name: str, key: Any) -> tuple[Path, str]:
    """The file of the entry ``name`` for ``key`` (any JSON-able content) in ``cache_dir``, and the key's hash."""
    digest = content_hash(key)
    return cache_dir / f"{name}-{digest[:20]}.npz", digest


def written_by_vlattn(path: Path) -> bool:
    """Whether ``path`` is a regular file (not a symbolic link) holding this cache's format tag, of any version."""
    return has_format(path, FORMAT)


def _read(path: Path, digest: str) -> tuple[np.ndarray, dict[str, Any], torch.Tensor] | None:
    """(array, metadata, generator state) of the entry at ``path`` when it is this version's for ``digest``."""
    if path.is_symlink() or not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as data:
            meta = npz_meta(data)
            if meta.get("format") != FORMAT or meta.get("version") != VERSION or meta.get("key") != digest:
                return None
            return data["array"].copy(), dict(meta["result"]), torch.from_numpy(data["generator_state"].copy())
    except READ_ERRORS:
        return None


def _save(path: Path, digest: str, array: np.ndarray, meta: dict[str, Any], state: torch.Tensor) -> None:
    def replaceable(existing: Path) -> None:
        if not written_by_vlattn(existing):
            raise DataError("not a cache vlattn wrote; left as it is", path=existing)

    header = {"format": FORMAT, "version": VERSION, "key": digest, "result": meta}
    with atomic_path(path, replace=replaceable) as tmp, open(tmp, "wb") as handle:
        np.savez(handle, meta=np.array(json.dumps(header)), array=array, generator_state=state.numpy())


def cached(path: Path, digest: str, generator: torch.Generator, compute: Callable[[], Computed]) -> Computed:
    """``compute()`` (which draws from ``generator`` only), or its result read from the entry ``path`` made for
    ``digest`` (:func:`entry_path`); on a hit ``generator`` takes the state the computation left it in."""
    found = _read(path, digest)
    if found is not None:
        array, meta, state = found
        generator.set_state(state)
        return array, meta
    array, meta = compute()
    if not os.path.lexists(path) or written_by_vlattn(path):
        try:
            _save(path, digest, array, meta, generator.get_state())
        except (OSError, VlattnError):
            pass  # a cache that cannot be written (read-only directory, a file that appeared) costs the computation
    return array, meta
