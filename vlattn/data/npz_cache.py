"""What vlattn's ``.npz`` caches share (:mod:`vlattn.data.karpathy_cache`, :mod:`vlattn.data.prepare_cache`): a JSON
``meta`` entry whose ``format`` tag says which cache a file is, read without unpickling anything."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

READ_ERRORS = (OSError, ValueError, KeyError, IndexError, TypeError, EOFError, UnicodeDecodeError,
               json.JSONDecodeError, zipfile.BadZipFile)  # what reading a damaged or foreign file raises


def npz_meta(data: np.lib.npyio.NpzFile) -> dict[str, Any]:
    """The JSON ``meta`` entry of an open cache file ({} when it is not an object)."""
    meta = json.loads(str(data["meta"]))
    return meta if isinstance(meta, dict) else {}


def has_format(path: Path, tag: str) -> bool:
    """Whether ``path`` is a regular file (not a symbolic link) whose ``meta`` holds the format ``tag``, of any
    version."""
    if path.is_symlink() or not path.is_file():
        return False
    try:
        with np.load(path, allow_pickle=False) as data:
            return npz_meta(data).get("format") == tag
    except READ_ERRORS:
        return False
