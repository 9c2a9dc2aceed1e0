"""What identifies a feature store's content: the fingerprint a run records of its data set, and the stricter
identity that keys caches of results computed from the features (CATT's k-means dictionaries,
:mod:`vlattn.data.prepare_cache`)."""

from __future__ import annotations

import os
from typing import Any
from pathlib import Path

from vlattn.data.features.base import FeatureStore
from vlattn.io import content_hash, read_marker


def store_fingerprint(store: FeatureStore) -> str:
    """:func:`content_hash` of a feature store's dimension, image ids and, for a store vlattn wrote, the random id
    of its marker (its features written anew give another id; a copy keeps it)."""
    return _fingerprint(store, read_marker(Path(store.path)))


def store_identity(store: FeatureStore) -> str:
    """:func:`store_fingerprint`, and for a store without vlattn's marker (a user's HDF5 file, npz directory, TSV)
    the name, size and modification time of its file or of each entry of its directory (not recursively): features
    rewritten in place change them, where the fingerprint (ids and dimension) would stay the same."""
    path = Path(store.path)
    marker = read_marker(path)
    fingerprint = _fingerprint(store, marker)
    if marker is not None:
        return fingerprint
    entries = sorted(os.scandir(path), key=lambda e: e.name) if path.is_dir() else []
    stats = [(entry.name, entry.stat().st_size, entry.stat().st_mtime_ns) for entry in entries]
    own = path.stat()
    return content_hash([fingerprint, own.st_size, own.st_mtime_ns, stats])


def _fingerprint(store: FeatureStore, marker: dict[str, Any] | None) -> str:
    """The fingerprint of ``store`` given its ``marker`` as :func:`~vlattn.io.read_marker` returned it."""
    return content_hash([store.dim, store.ids(), None if marker is None else marker.get("id")])
