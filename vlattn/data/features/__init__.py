"""Region-feature stores: one protocol, several on-disk layouts (see :mod:`.base`).

``open_store(path)`` recognises the layout (:func:`detect_layout`); ``convert_store(src, dst, format)``
streams every image of one store into a new one of another layout (``m2-hdf5``, ``npz-dir`` or ``memmap``).

Layouts read: the project's memmap directory (:mod:`.memmap`), M2's HDF5 file (:mod:`.hdf5`), bottom-up
``.npz`` directories incl. MCAN's nested ``COCO_<split>_<id>.jpg.npz`` trees (:mod:`.npz`), self-critical's
``*_att``/``*_box``/``*_fc`` siblings (:mod:`.selfcritical`), bottom-up / LXMERT TSV files (:mod:`.tsv`) and
LMDB stores (:mod:`.lmdbstore`, optional ``lmdb`` package).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable, Iterator

import h5py
from tqdm import tqdm

from vlattn.data.features.base import FeatureStore, RegionFeatures
from vlattn.data.features.hdf5 import M2HDF5Store, check_m2_destination, write_m2_hdf5
from vlattn.data.features.memmap import META, MemmapStore, write_memmap
from vlattn.data.features.npz import NpzDirStore, write_npz_dir
from vlattn.data.features.selfcritical import BOX_UNITS, SelfCriticalStore, self_critical_parts
from vlattn.data.features.storage import check_store_destination
from vlattn.data.features.tsv import TSVStore, looks_like_tsv, shard_files
from vlattn.data.features.tsv_blocks import usable_cores
from vlattn.data.features.tsv_memmap import convert_tsv_memmap
from vlattn.errors import DataError
from vlattn.io import finish_interrupted_swap

__all__ = [
    "BOX_UNITS",
    "FORMATS",
    "FeatureStore",
    "M2HDF5Store",
    "MemmapStore",
    "NpzDirStore",
    "RegionFeatures",
    "SelfCriticalStore",
    "TSVStore",
    "convert_store",
    "detect_layout",
    "iter_regions",
    "open_store",
    "write_m2_hdf5",
    "write_memmap",
    "write_npz_dir",
]

Writer = Callable[..., int]

# Output layout name -> streaming writer ``(path, items, *, overwrite) -> number of images``.
FORMATS: dict[str, Writer] = {"m2-hdf5": write_m2_hdf5, "npz-dir": write_npz_dir, "memmap": write_memmap}
# Output layout name -> the check of its destination the writer makes (run first by convert_store).
_DESTINATION_CHECKS: dict[str, Callable[[str | Path, bool], Path]] = {
    "m2-hdf5": check_m2_destination, "npz-dir": check_store_destination, "memmap": check_store_destination,
}

MAX_JOBS = 8  # TSV parsing processes by default: beyond a few, the disk and the writer are the limit


def _has_npz(path: Path) -> bool:
    """``.npz`` files in ``path`` or in one of its immediate subdirectories (MCAN's split folders)."""
    return any(path.glob("*.npz")) or any(path.glob("*/*.npz"))


def detect_layout(path: str | Path) -> str:
    """The layout at ``path``: ``memmap``, ``self-critical``, ``lmdb``, ``npz-dir``, ``tsv`` or ``m2-hdf5``."""
    from vlattn.data.features.lmdbstore import is_lmdb

    path = Path(path)
    if not path.exists():
        raise DataError("feature store not found", path=path)
    if path.is_dir() and (path / META).is_file():
        return "memmap"
    if self_critical_parts(path) is not None:
        return "self-critical"
    if is_lmdb(path):
        return "lmdb"
    if path.is_dir():
        if _has_npz(path):
            return "npz-dir"
        try:
            shard_files(path)
        except DataError:
            raise DataError(f"directory holds no {META} (memmap), .npz files, *_att/*_box pair, LMDB or .tsv files",
                            path=path) from None
        return "tsv"
    if h5py.is_hdf5(path):
        return "m2-hdf5"
    if looks_like_tsv(path):
        return "tsv"
    raise DataError("not a feature store: neither HDF5, LMDB nor a bottom-up TSV file", path=path)


def _open_lmdb(path: Path, dim: int | None) -> FeatureStore:
    from vlattn.data.features.lmdbstore import LmdbRecordStore, lmdb_value_kind

    kind = lmdb_value_kind(path)
    if kind in ("npz", "npy"):
        raise DataError(f"LMDB of self-critical .{kind} files has no boxes: open the *_att LMDB beside its "
                        "*_box sibling", path=path)
    return LmdbRecordStore(path, dim=dim)


def open_store(
    path: str | Path,
    dim: int | None = None,
    orientation: str | None = None,
    *,
    box_units: str | None = None,
    image_sizes: str | Path | None = None,
) -> FeatureStore:
    """Open the store at ``path``, recognising its layout (:func:`detect_layout`).

    ``dim``, when given, is checked against the store. ``orientation`` ("kd"/"dk") settles MCAN's square
    ``x`` arrays; ``box_units`` and ``image_sizes`` apply to self-critical stores (:mod:`.selfcritical`).
    """
    path = Path(path)
    finish_interrupted_swap(path)  # a `vlattn data convert --overwrite` killed between its renames
    layout = detect_layout(path)
    if layout != "npz-dir" and orientation is not None:
        raise DataError(f"orientation applies to npz directories, not to a {layout} store", path=path)
    if layout != "self-critical" and (box_units is not None or image_sizes is not None):
        raise DataError(f"box units / image sizes apply to self-critical stores, not to a {layout} store", path=path)
    store: FeatureStore
    if layout == "memmap":
        store = MemmapStore(path)
    elif layout == "self-critical":
        store = SelfCriticalStore(path, dim=dim, box_units=box_units, image_sizes=image_sizes)
    elif layout == "lmdb":
        store = _open_lmdb(path, dim)
    elif layout == "npz-dir":
        store = NpzDirStore(path, dim=dim, orientation=orientation)
    elif layout == "tsv":
        store = TSVStore(path, dim=dim)
    else:
        store = M2HDF5Store(path, dim=dim)
    if dim is not None and store.dim != dim:
        raise DataError(f"store has feature dimension {store.dim}, expected {dim}", path=path)
    return store


def iter_regions(store: FeatureStore, image_ids: Iterable[int] | None = None) -> Iterator[tuple[int, RegionFeatures]]:
    """Stream ``(image_id, regions)`` pairs of ``store`` (all ids, sorted, by default)."""
    for image_id in store.ids() if image_ids is None else image_ids:
        yield image_id, store.get(image_id)


def _counted(items: Iterator[tuple[int, RegionFeatures]], bar: tqdm) -> Iterator[tuple[int, RegionFeatures]]:
    for item in items:
        yield item
        bar.update(1)


def convert_store(
    src: FeatureStore | str | Path,
    dst: str | Path,
    format: str,
    *,
    dim: int | None = None,
    overwrite: bool = False,
    progress: bool = False,
    jobs: int | None = None,
) -> int:
    """Copy every image of ``src`` (a store or a path for :func:`open_store`) into a new ``format`` store.

    Streams one image at a time (a TSV in one sequential pass, without an index); the destination
    appears only when complete; ``progress`` shows a bar on stderr. The destination must not be the source,
    nor contain it or lie inside it; with ``overwrite`` it replaces only a store vlattn wrote (see
    :mod:`vlattn.data.features.storage`). A TSV is parsed in ``jobs`` processes (default: the usable cores, at most
    :data:`MAX_JOBS`; :mod:`.tsv_blocks`; to memmap, each process also reads and writes its part:
    :mod:`.tsv_memmap`). Returns the image count.
    """
    if format not in FORMATS:
        raise DataError(f"unknown feature format {format!r}; valid formats: {', '.join(FORMATS)}", path=dst)
    store = open_store(src, dim=dim) if isinstance(src, (str, Path)) else src
    check_apart(Path(store.path), Path(dst))
    _DESTINATION_CHECKS[format](dst, overwrite)  # before any reading: a refused destination costs nothing
    by_bytes = isinstance(store, TSVStore)  # streamed in file order, progress in bytes, no index needed
    total = store.total_bytes() if by_bytes else len(store)
    with tqdm(total=total, desc=f"converting to {format}", unit="B" if by_bytes else "img", unit_scale=by_bytes,
              unit_divisor=1024, disable=not progress, dynamic_ncols=True) as bar:
        jobs = jobs if jobs is not None else min(usable_cores(), MAX_JOBS)
        if by_bytes and format == "memmap":  # each process reads, parses and writes its own part of the file
            return convert_tsv_memmap(store, dst, overwrite=overwrite, jobs=jobs, progress=bar.update)
        items = store.stream(bar.update, jobs=jobs) if by_bytes else _counted(iter_regions(store), bar)
        return FORMATS[format](dst, items, overwrite=overwrite)


def check_apart(source: Path, dest: Path) -> None:
    """Refuse a destination that is the source, contains it or lies inside it (replacing it would delete the
    source, or the new store would be written into the old one)."""
    source, dest = source.resolve(), dest.resolve()
    if source == dest:
        raise DataError("source and destination are the same path", path=dest)
    if source.is_relative_to(dest):
        raise DataError(f"destination contains the source store {source}", path=dest)
    if dest.is_relative_to(source):
        raise DataError(f"destination lies inside the source store {source}", path=dest)
