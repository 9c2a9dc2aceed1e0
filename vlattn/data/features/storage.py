"""Helpers shared by the store backends: atomic output, per-process lazy handles, the id index."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Generic, Iterable, Iterator, TypeVar

from vlattn.errors import DataError

T = TypeVar("T")


def check_destination(path: str | Path, overwrite: bool) -> Path:
    """Refuse to replace an existing ``path`` unless ``overwrite``; return it as a :class:`Path`."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise DataError("destination exists; pass overwrite=True (--overwrite) to replace it", path=path)
    return path


@contextlib.contextmanager
def atomic_dir(path: str | Path, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary directory next to ``path``; on success it becomes ``path``.

    If the body raises, the temporary directory is removed and an existing ``path`` is untouched.
    With ``overwrite`` an existing ``path`` is moved aside, replaced and then deleted.
    """
    path = check_destination(path, overwrite)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        old = None
        if path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
            os.replace(path, old / path.name)
        os.replace(tmp, path)
        if old is not None:
            shutil.rmtree(old)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


class ProcessLocal(Generic[T]):
    """A resource opened on first use in each process (DataLoader workers fork or spawn).

    Pickling drops the resource, so store objects holding one can be sent to workers.
    """

    def __init__(self, opener: Callable[[], T]) -> None:
        self._opener = opener
        self._pid: int | None = None
        self._value: T | None = None

    def get(self) -> T:
        """The resource for the current process, opened if needed."""
        if self._pid != os.getpid() or self._value is None:
            self._value = self._opener()
            self._pid = os.getpid()
        return self._value

    def __getstate__(self) -> dict[str, object]:
        return {"_opener": self._opener, "_pid": None, "_value": None}


class IndexedStore:
    """The id-bookkeeping half of the :class:`~vlattn.data.features.base.FeatureStore` protocol.

    Backends call :meth:`_index_ids` once and set ``_dim``; they implement ``get``.
    """

    path: str
    _dim: int
    _ids: list[int]
    _id_set: frozenset[int]

    def _index_ids(self, image_ids: Iterable[int]) -> None:
        self._ids = sorted(int(image_id) for image_id in image_ids)
        self._id_set = frozenset(self._ids)

    @property
    def dim(self) -> int:
        """D, the feature dimension."""
        return self._dim

    def ids(self) -> list[int]:
        """All image ids, sorted."""
        return list(self._ids)

    def __contains__(self, image_id: object) -> bool:
        return image_id in self._id_set

    def __len__(self) -> int:
        return len(self._ids)

    def __iter__(self) -> Iterator[int]:
        return iter(self._ids)


def index_files(root: Path, pattern: re.Pattern[str], depth: int = 1) -> dict[int, Path]:
    """``{image id: file}`` for the files under ``root`` whose name ``pattern`` matches (group 1 = the id).

    Looks in ``root`` and in subdirectories down to ``depth`` levels below it (one per split directory).
    An id found in two files is a :class:`DataError` naming both.
    """
    found: dict[int, Path] = {}
    pending = [(root, 0)]
    while pending:
        folder, level = pending.pop()
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.is_dir() and level < depth:
                    pending.append((Path(entry.path), level + 1))
                elif (match := pattern.match(entry.name)) and entry.is_file():
                    image_id = int(match.group(1))
                    if image_id in found:
                        raise DataError(f"image id {image_id} is in two files: {found[image_id]} and {entry.path}",
                                        path=root)
                    found[image_id] = Path(entry.path)
    return found
