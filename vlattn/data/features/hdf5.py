"""M2 Transformer's single HDF5 file of detector regions (``coco_detections.hdf5`` layout).

Per image id: dataset ``<id>_features`` (N, D) (D = 2048 for bottom-up features), ``<id>_boxes``
(N, 4) x1y1x2y2 pixels and optionally ``<id>_cls_prob`` (N, C) detector class probabilities.
The original files do not record the image size; files written by :func:`write_m2_hdf5` store it as
``width``/``height`` attributes of ``<id>_features``. Without them the size is derived from the boxes'
max extents (:func:`~vlattn.data.features.checks.size_from_boxes`), a lower bound of the true size.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable

import h5py
import numpy as np

from vlattn.data.features.base import RegionFeatures
from vlattn.data.features.checks import make_regions
from vlattn.data.features.record import HDF5_ATTRIBUTE, Record, encode_record
from vlattn.data.features.storage import IndexedStore, ProcessLocal, check_destination, refuse_overwrite
from vlattn.errors import DataError
from vlattn.io import atomic_path, remove_stale_temporaries, writing

_FEATURES_KEY = re.compile(r"^(\d+)_features$")
# Errors h5py raises on files with damaged internals (a broken B-tree, heap or object header; an AssertionError
# from its low-level readers included).
_H5_ERRORS = (OSError, KeyError, ValueError, RuntimeError, AssertionError)
MARKER_ATTRIBUTE, KIND = "vlattn", "m2-hdf5"  # root attribute of files written by write_m2_hdf5


class M2HDF5Store(IndexedStore):
    """Read-only :class:`~vlattn.data.features.base.FeatureStore` over one M2 HDF5 file.

    The file is opened lazily in each process; the object pickles for DataLoader workers.
    ``dim`` is checked against every item when given, else taken from the first image.
    """

    def __init__(self, path: str | Path, dim: int | None = None) -> None:
        self.path = str(path)
        if not Path(self.path).is_file():
            raise DataError("HDF5 feature file not found", path=self.path)
        try:
            with self._open() as handle:
                self._index_ids(int(m.group(1)) for key in handle.keys() if isinstance(key, str) and (m := _FEATURES_KEY.match(key)))
                self._dim = dim if dim is not None else self._first_dim(handle)
        except _H5_ERRORS as err:
            raise DataError(f"cannot read HDF5 file (damaged?): {err}", path=self.path) from None
        self._handle: ProcessLocal[h5py.File] = ProcessLocal(self._open)

    def _first_dim(self, handle: h5py.File) -> int:
        """D read from the shape of the first image's features."""
        if not self._ids:
            raise DataError("no '<id>_features' datasets; pass dim for an empty store", path=self.path)
        dataset = self._dataset(handle, self._ids[0], "features")
        assert dataset is not None  # listed by the index
        shape = dataset.shape
        if len(shape) != 2:
            raise DataError(f"features must be 2-D (N, D), got shape {shape}", path=self.path, item=self._ids[0])
        return int(shape[1])

    def _open(self) -> h5py.File:
        try:
            return h5py.File(self.path, "r")
        except OSError as err:
            raise DataError(f"cannot read HDF5 file: {err}", path=self.path) from None

    def _dataset(self, handle: h5py.File, image_id: int, suffix: str) -> h5py.Dataset | None:
        """Dataset ``<id>_<suffix>``, or None when the file has none; a group of that name is an error."""
        key = f"{image_id}_{suffix}"
        try:
            found = handle.get(key)
        except _H5_ERRORS as err:
            raise DataError(f"cannot read {key} (damaged file?): {err}", path=self.path, item=image_id) from None
        if found is not None and not isinstance(found, h5py.Dataset):
            raise DataError(f"{key} is an HDF5 group, not a dataset", path=self.path, item=image_id)
        return found

    def _read(self, image_id: int, suffix: str) -> np.ndarray | None:
        """Dataset ``<id>_<suffix>`` as an array, or None when the file has no such dataset."""
        dataset = self._dataset(self._handle.get(), image_id, suffix)
        if dataset is None:
            return None
        try:
            return dataset[()]
        except _H5_ERRORS as err:
            raise DataError(f"cannot read dataset {dataset.name} (damaged file?): {err}", path=self.path,
                            item=image_id) from None

    def _size(self, image_id: int) -> tuple[int | None, int | None]:
        """``width``/``height`` attributes of ``<id>_features`` (None when not stored)."""
        try:
            attrs = self._handle.get()[f"{image_id}_features"].attrs
            width, height = attrs.get("width"), attrs.get("height")
        except _H5_ERRORS as err:
            raise DataError(f"cannot read the image size (damaged file?): {err}", path=self.path,
                            item=image_id) from None
        return None if width is None else int(width), None if height is None else int(height)

    def get(self, image_id: int) -> RegionFeatures:
        """Regions of ``image_id``: features (N, D) float32, boxes (N, 4), image size."""
        if image_id not in self._id_set:
            raise DataError("image id not in the feature file", path=self.path, item=image_id)
        features = self._read(image_id, "features")
        boxes = self._read(image_id, "boxes")
        if boxes is None:
            raise DataError(f"dataset {image_id}_boxes is missing", path=self.path, item=image_id)
        width, height = self._size(image_id)
        return make_regions(features, boxes, width, height, path=self.path, image_id=image_id, dim=self._dim)

    def detections(self, image_id: int) -> tuple[np.ndarray, np.ndarray] | None:
        """The detector classes (N,) int64 and scores (N,) float32 vlattn stored for ``image_id``, or None."""
        if image_id not in self._id_set:
            raise DataError("image id not in the feature file", path=self.path, item=image_id)
        classes, scores = self._read(image_id, "classes"), self._read(image_id, "scores")
        if classes is None or scores is None:
            return None
        return np.asarray(classes, dtype=np.int64), np.asarray(scores, dtype=np.float32)

    def cls_prob(self, image_id: int) -> np.ndarray | None:
        """Detector class probabilities (N, C) float32 of ``image_id``, or None when not stored."""
        if image_id not in self._id_set:
            raise DataError("image id not in the feature file", path=self.path, item=image_id)
        probs = self._read(image_id, "cls_prob")
        return None if probs is None else np.asarray(probs, dtype=np.float32)


def _check_replaceable(path: Path) -> None:
    """Raise unless ``path`` is an HDF5 feature file written by :func:`write_m2_hdf5` (marked by an attribute)."""
    what = "an HDF5 feature file"
    if path.is_symlink() or not path.is_file():
        raise refuse_overwrite(path, "it is a symbolic link" if path.is_symlink() else "it is a directory", what)
    try:
        with h5py.File(path, "r") as handle:
            kind = handle.attrs.get(MARKER_ATTRIBUTE)
    except OSError:
        kind = None
    if kind != KIND:
        raise refuse_overwrite(path, f"it has no {MARKER_ATTRIBUTE}={KIND} attribute", what)


def check_m2_destination(path: str | Path, overwrite: bool) -> Path:
    """:func:`~vlattn.data.features.storage.check_destination` for an M2 HDF5 file (replaces only vlattn's own)."""
    return check_destination(path, overwrite, _check_replaceable)


def write_m2_hdf5(
    path: str | Path, items: Iterable[tuple[int, RegionFeatures]], *, overwrite: bool = False,
    extractor: Record | None = None,
) -> int:
    """Write ``(image_id, regions)`` pairs as one M2 HDF5 file, atomically; returns the number of images.

    Items are streamed (one image in memory at a time). Image size goes to ``width``/``height``
    attributes of ``<id>_features``; detector classes and scores, when the regions have them, to ``<id>_classes``
    and ``<id>_scores``; ``extractor`` to the root attribute ``vlattn_extractor`` (:mod:`.record`). The root
    attribute ``vlattn="m2-hdf5"`` marks the file as vlattn's, the only kind of existing file ``overwrite`` replaces.
    """
    path = check_m2_destination(path, overwrite)
    with writing(path):
        remove_stale_temporaries(path)
    count = 0
    # h5py writes through a Python file object, so a failed write (disk full, a file-size limit) comes back as
    # an OSError here; HDF5's own file driver crashes the process when its cached metadata cannot be flushed
    with atomic_path(path, replace=_check_replaceable if overwrite else False) as tmp, open(tmp, "r+b") as file:
        with h5py.File(file, "w") as handle:
            handle.attrs[MARKER_ATTRIBUTE] = KIND
            if extractor is not None:
                handle.attrs[HDF5_ATTRIBUTE] = encode_record(extractor)
            for image_id, regions in items:
                dataset = handle.create_dataset(f"{image_id}_features", data=regions.features)
                dataset.attrs["width"] = regions.width
                dataset.attrs["height"] = regions.height
                handle.create_dataset(f"{image_id}_boxes", data=regions.boxes)
                if regions.classes is not None and regions.scores is not None:
                    handle.create_dataset(f"{image_id}_classes", data=np.asarray(regions.classes, np.int64))
                    handle.create_dataset(f"{image_id}_scores", data=np.asarray(regions.scores, np.float32))
                count += 1
    return count
