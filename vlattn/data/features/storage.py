"""Helpers shared by the store backends: atomic output that replaces only what vlattn wrote, per-process
lazy handles, the id index.

Every directory vlattn writes as a whole (a feature store, the synthetic data set) holds a marker file,
:data:`MARKER`, naming what it is, a random id and every file and folder written into it (at any depth).
``--overwrite`` replaces a destination only if it carries such a marker of an accepted kind and holds nothing
else, checked again at the moment of replacement; anything else is refused with a
:class:`~vlattn.errors.DataError`, so a user's directory or file is never deleted. Without ``--overwrite``, a
destination that appears while the writer runs is kept and the new one is not put in its place.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import Callable, Collection, Generic, Iterable, Iterator, TypeVar

from vlattn.errors import DataError, WriteError
from vlattn.io import (
    MARKER,
    complete_dir,
    finish_interrupted_swap,
    foreign_entries,
    make_temporary_dir,
    read_marker,
    remove_owned,
    remove_stale_temporaries,
    replace_dir,
    writing,
)

T = TypeVar("T")

FEATURE_STORE_KINDS = ("memmap", "npz-dir")  # directory stores (an M2 HDF5 store is one file)


def refuse_overwrite(path: Path, reason: str, what: str) -> DataError:
    """The one-line error for a destination ``--overwrite`` must not replace."""
    return DataError(f"refusing to overwrite: {reason}; --overwrite replaces only {what} written by vlattn "
                     "(remove it yourself or choose another destination)", path=path)


def check_replaceable(
    path: Path, kinds: Collection[str], what: str, also_owned: Callable[[Path], Iterable[str]] | None = None
) -> None:
    """Raise unless ``path`` is a directory vlattn wrote as one of ``kinds`` and holds nothing else (at any
    depth) than its marker's entries and what ``also_owned(path)`` proves vlattn wrote there later (relative
    paths, e.g. :func:`vlattn.data.cache_dir.owned_cache_entries`)."""
    if path.is_symlink():
        raise refuse_overwrite(path, "it is a symbolic link", what)
    if not path.is_dir():
        raise refuse_overwrite(path, "it is a file", what)
    marker = read_marker(path)
    if marker is None:
        raise refuse_overwrite(path, f"it has no {MARKER} marker", what)
    if marker["kind"] not in kinds:
        raise refuse_overwrite(path, f"it is a {marker['kind']}, not {what}", what)
    foreign = foreign_entries(path, [*marker["entries"], *(also_owned(path) if also_owned is not None else ())])
    if foreign:
        raise refuse_overwrite(path, f"it holds files vlattn did not write: {', '.join(foreign[:5])}", what)


def check_destination(
    path: str | Path, overwrite: bool, check: Callable[[Path], None] | None = None
) -> Path:
    """Refuse an existing ``path`` unless ``overwrite`` and ``check(path)`` passes; return it as a :class:`Path`."""
    path = Path(path)
    if path.exists() or path.is_symlink():
        if not overwrite:
            raise DataError("destination exists; pass overwrite=True (--overwrite) to replace it", path=path)
        if check is not None:
            check(path)
    return path


def check_store_destination(path: str | Path, overwrite: bool) -> Path:
    """:func:`check_destination` for a directory feature store (replaces only one vlattn wrote)."""
    return check_destination(path, overwrite, lambda p: check_replaceable(p, FEATURE_STORE_KINDS, "a feature store"))


@contextlib.contextmanager
def final_names(tmp: Path, path: Path) -> Iterator[None]:
    """A :class:`WriteError` inside the temporary directory ``tmp`` names the file where it will be: under ``path``
    (the temporary directory is gone by the time the user reads the error)."""
    try:
        yield
    except WriteError as err:
        where, inside = Path(os.path.abspath(str(err.path))), Path(os.path.abspath(tmp))
        if not where.is_relative_to(inside):
            raise
        raise WriteError(path / where.relative_to(inside), err.reason) from None


@contextlib.contextmanager
def atomic_dir(
    path: str | Path,
    overwrite: bool = False,
    *,
    kind: str,
    replaces: Collection[str] = FEATURE_STORE_KINDS,
    what: str = "a feature store",
    also_owned: Callable[[Path], Iterable[str]] | None = None,
) -> Iterator[Path]:
    """Yield a temporary directory next to ``path``; on success it becomes ``path``, marked as ``kind`` with
    everything written into it.

    An existing ``path`` is replaced only with ``overwrite`` and only if it is a directory vlattn wrote as one
    of ``replaces`` holding nothing else (:func:`check_replaceable`, with ``also_owned``; ``what`` names them in
    the error), checked
    before writing and again at the moment of replacement; it is moved aside, replaced and then deleted. A
    ``path`` that appears while the body runs is kept (without ``overwrite``, or when it fails the check) and
    the new directory discarded, with an error. If the body raises, the temporary directory is removed and an
    existing ``path`` is untouched. A swap a killed writer left between its renames is finished first (so an
    existing ``path`` is the one it completed, :func:`vlattn.io.finish_interrupted_swap`); other leftovers of
    killed earlier writers of ``path`` (proven vlattn's by their marker) are removed.
    """
    finish_interrupted_swap(path)
    check = (lambda p: check_replaceable(p, replaces, what, also_owned)) if overwrite else None
    path = check_destination(path, overwrite, check)
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(path)
    tmp = make_temporary_dir(path)
    try:
        with writing(path), final_names(tmp, path):
            yield tmp
            complete_dir(tmp, kind)
            replace_dir(tmp, path, check)
    finally:
        if tmp.exists():
            remove_owned(tmp)


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
