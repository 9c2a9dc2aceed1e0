"""Per-image byte blobs: the raw ``.npz``/``.npy`` file of each image id, from a directory or an LMDB.

self-critical.pytorch keeps each feature kind either as a directory of ``<id>.npz``/``<id>.npy`` files or,
after its ``dump_to_lmdb`` script, as an LMDB whose values are those files' bytes; :class:`DirBlobs` and
:class:`~vlattn.data.features.lmdbstore.LmdbBlobs` give both the same interface, and :func:`load_array`
decodes a blob with the error naming where it came from.
"""

from __future__ import annotations

import io
import re
import tokenize
import zipfile
import zlib
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np

from vlattn.data.features.storage import index_files
from vlattn.errors import DataError

NPZ_MAGIC = b"PK\x03\x04"
NPY_MAGIC = b"\x93NUMPY"
# a damaged .npy/.npz fails anywhere in NumPy's header parser (tokenize, ast) or the zip reader (an unknown
# compression method)
READ_ERRORS = (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error, SyntaxError,
               tokenize.TokenError, NotImplementedError)


class Blobs(Protocol):
    """Bytes by image id."""

    path: str

    def ids(self) -> list[int]:
        """All image ids, sorted."""
        ...

    def read(self, image_id: int) -> bytes:
        """The blob of ``image_id``; a :class:`DataError` names the source when it is missing."""
        ...

    def where(self, image_id: int) -> str:
        """Where the blob of ``image_id`` lives (a file, or ``lmdb:key``), for error messages."""
        ...


class DirBlobs:
    """The files ``<id><suffix>`` of one directory."""

    def __init__(self, path: str | Path, suffix: str) -> None:
        self.path = str(path)
        if not Path(self.path).is_dir():
            raise DataError("feature directory not found", path=self.path)
        self._files = index_files(Path(self.path), re.compile(rf"^(\d+){re.escape(suffix)}$"), depth=0)

    def ids(self) -> list[int]:
        return sorted(self._files)

    def where(self, image_id: int) -> str:
        file = self._files.get(image_id)
        return str(file) if file is not None else self.path

    def read(self, image_id: int) -> bytes:
        file = self._files.get(image_id)
        if file is None:
            raise DataError("image id has no file here", path=self.path, item=image_id)
        try:
            return file.read_bytes()
        except OSError as err:
            raise DataError(f"cannot read file: {err}", path=file, item=image_id) from None


def load_array(blob: bytes, keys: Sequence[str], *, where: str, image_id: int) -> np.ndarray:
    """The array in ``blob``: an ``.npy`` file, or the first of ``keys`` present in an ``.npz`` archive.

    Pickled objects are refused; anything unreadable is a :class:`DataError` naming ``where``.
    """
    try:
        data = np.load(io.BytesIO(blob), allow_pickle=False)
        if isinstance(data, np.ndarray):
            return data
        with data:
            for key in keys:
                if key in data.files:
                    return data[key]
            raise DataError(f"npz archive has none of the keys {list(keys)} (keys: {data.files})",
                            path=where, item=image_id)
    except READ_ERRORS as err:
        raise DataError(f"cannot read npy/npz data: {err}", path=where, item=image_id) from None
