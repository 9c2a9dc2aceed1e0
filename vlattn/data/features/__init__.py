"""Region-feature stores: one protocol, several on-disk layouts (see :mod:`.base`).

``open_store(path)`` recognises the layout; ``convert_store(src, dst, format)`` streams every image of
one store into a new one of another layout (``m2-hdf5``, ``npz-dir`` or ``memmap``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable, Iterator

import h5py

from vlattn.data.features.base import FeatureStore, RegionFeatures
from vlattn.data.features.hdf5 import M2HDF5Store, write_m2_hdf5
from vlattn.data.features.memmap import META, MemmapStore, write_memmap
from vlattn.data.features.npz import NpzDirStore, write_npz_dir
from vlattn.errors import DataError

__all__ = [
    "FORMATS",
    "FeatureStore",
    "M2HDF5Store",
    "MemmapStore",
    "NpzDirStore",
    "RegionFeatures",
    "convert_store",
    "iter_regions",
    "open_store",
    "write_m2_hdf5",
    "write_memmap",
    "write_npz_dir",
]

Writer = Callable[..., int]

# Output layout name -> streaming writer ``(path, items, *, overwrite) -> number of images``.
FORMATS: dict[str, Writer] = {"m2-hdf5": write_m2_hdf5, "npz-dir": write_npz_dir, "memmap": write_memmap}


def open_store(path: str | Path, dim: int | None = None, orientation: str | None = None) -> FeatureStore:
    """Open the store at ``path``, recognising its layout.

    A directory with ``meta.json`` is a memmap store, a directory of ``<id>.npz`` files an npz store
    (``dim``/``orientation`` resolve the MCAN ``x`` orientation), an HDF5 file an M2 store.
    ``dim``, when given, is checked against the store.
    """
    path = Path(path)
    if path.is_dir():
        if (path / META).is_file():
            store: FeatureStore = MemmapStore(path)
        elif any(path.glob("*.npz")):
            store = NpzDirStore(path, dim=dim, orientation=orientation)
        else:
            raise DataError(f"directory holds neither {META} (memmap store) nor .npz files", path=path)
    elif path.is_file():
        if not h5py.is_hdf5(path):
            raise DataError("not an HDF5 file (and not a feature directory)", path=path)
        store = M2HDF5Store(path, dim=dim)
    else:
        raise DataError("feature store not found", path=path)
    if dim is not None and store.dim != dim:
        raise DataError(f"store has feature dimension {store.dim}, expected {dim}", path=path)
    return store


def iter_regions(store: FeatureStore, image_ids: Iterable[int] | None = None) -> Iterator[tuple[int, RegionFeatures]]:
    """Stream ``(image_id, regions)`` pairs of ``store`` (all ids, sorted, by default)."""
    for image_id in store.ids() if image_ids is None else image_ids:
        yield image_id, store.get(image_id)


def convert_store(
    src: FeatureStore | str | Path, dst: str | Path, format: str, *, dim: int | None = None, overwrite: bool = False
) -> int:
    """Copy every image of ``src`` (a store or a path for :func:`open_store`) into a new ``format`` store.

    Streams one image at a time; the destination appears only when complete. Returns the image count.
    """
    if format not in FORMATS:
        raise DataError(f"unknown feature format {format!r}; valid formats: {', '.join(FORMATS)}", path=dst)
    store = open_store(src, dim=dim) if isinstance(src, (str, Path)) else src
    if Path(store.path).resolve() == Path(dst).resolve():
        raise DataError("source and destination are the same path", path=dst)
    return FORMATS[format](dst, iter_regions(store), overwrite=overwrite)
