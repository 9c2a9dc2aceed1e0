"""The ``cache/`` directory vlattn writes into a data root (the parsed Karpathy file,
:mod:`vlattn.data.karpathy_cache`; SCST's CIDEr-D document frequencies, :class:`~vlattn.metrics.CiderDocumentFrequency`;
CATT's k-means dictionaries, :mod:`vlattn.data.prepare_cache`)
and which of it vlattn can prove it wrote: what ``vlattn data synth --overwrite`` may replace with the data set.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from vlattn.data import prepare_cache
from vlattn.data.karpathy_cache import written_by_vlattn
from vlattn.metrics import CiderDocumentFrequency

CACHE_DIR = "cache"
_READ_ERRORS = (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile)


def _cache_vlattn_wrote(path: Path) -> bool:
    """A regular file (not a symbolic link) that reads back as one of vlattn's caches."""
    if path.is_symlink() or not path.is_file():
        return False
    if written_by_vlattn(path) or prepare_cache.written_by_vlattn(path):
        return True
    try:
        CiderDocumentFrequency.load(path)
    except _READ_ERRORS:
        return False
    return True


def owned_cache_entries(root: Path) -> list[str]:
    """``cache`` and ``cache/<name>`` of ``root`` (relative, ``/``-separated) when ``root/cache`` is a directory (not
    a symbolic link) whose every entry is a cache vlattn wrote; else nothing (the directory and what it holds then
    count as a user's)."""
    folder = root / CACHE_DIR
    if folder.is_symlink() or not folder.is_dir():
        return []
    entries = sorted(folder.iterdir())
    if not all(_cache_vlattn_wrote(entry) for entry in entries):
        return []
    return [CACHE_DIR, *(f"{CACHE_DIR}/{entry.name}" for entry in entries)]
