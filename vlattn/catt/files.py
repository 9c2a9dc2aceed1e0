"""Dictionary files: what ``vlattn catt dictionary`` writes next to the data and ``init: file`` loads.

A dictionary file is an ``.npz`` holding ``entries`` (K, D) float32 and ``meta``, a JSON string (source, size,
seed, the data it was computed from, the rows k-means saw). Files are written atomically; a missing, corrupt or
non-finite file is a one-line ``DataError`` naming it.
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vlattn.errors import DataError
from vlattn.io import atomic_path

DICTIONARY_DIR = "catt"  # under the data root


def default_dictionary_path(data_root: str | Path, source: str, size: int) -> Path:
    """``<data root>/catt/<source>-<size>.npz``, where ``vlattn catt dictionary`` writes by default."""
    return Path(data_root) / DICTIONARY_DIR / f"{source}-{size}.npz"


def resolve_dictionary_path(path: str | Path, data_root: str | Path | None) -> Path:
    """``path`` as given when absolute (or when there is no data root), else relative to the data root."""
    path = Path(path)
    return path if path.is_absolute() or data_root is None else Path(data_root) / path


@dataclass(frozen=True)
class DictionaryFile:
    """``entries`` (K, D) float32 and the ``meta`` it was written with."""

    entries: np.ndarray
    meta: dict[str, Any]


def replaceable_dictionary(path: Path) -> None:
    """Raise unless ``path`` is a dictionary file (what ``overwrite`` may replace; anything else is the user's)."""
    if path.is_symlink() or not path.is_file():
        raise DataError("refusing to overwrite: not a file (a link or a directory)", path=path)
    try:
        read_dictionary(path)
    except DataError:
        raise DataError("refusing to overwrite: not a dictionary file written by vlattn (remove it yourself or "
                        "choose another --out)", path=path) from None


def write_dictionary(path: str | Path, entries: np.ndarray, meta: dict[str, Any], *, overwrite: bool = True) -> Path:
    """Write ``entries`` (K, D) and ``meta`` to ``path`` atomically. An existing file is replaced only with
    ``overwrite`` and only if it is a dictionary file (checked when the new one is complete); never a link."""
    path = Path(path)
    with atomic_path(path, replace=replaceable_dictionary if overwrite else False) as tmp, open(tmp, "wb") as handle:
        np.savez(handle, entries=np.asarray(entries, dtype=np.float32), meta=np.asarray(json.dumps(meta, sort_keys=True)))
    return path


def read_dictionary(path: str | Path) -> DictionaryFile:
    """The dictionary at ``path``; ``DataError`` naming the file when it is missing, unreadable, not (K, D) or not
    finite."""
    path = Path(path)
    if not path.is_file():
        raise DataError("dictionary file not found (write one with `vlattn catt dictionary`)", path=path)
    try:
        with np.load(path, allow_pickle=False) as archive:
            entries = np.asarray(archive["entries"], dtype=np.float32)
            meta = json.loads(str(archive["meta"]))
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as err:
        raise DataError(f"not a dictionary file ({type(err).__name__}: {err})", path=path) from None
    if entries.ndim != 2 or len(entries) == 0:
        raise DataError(f"dictionary entries must be (K, D), got shape {entries.shape}", path=path)
    if not np.isfinite(entries).all():
        raise DataError("dictionary entries contain NaN or infinity", path=path)
    return DictionaryFile(entries, meta)
