"""A directory of bottom-up ``.npz`` files, one per image.

File names: ``<id>.npz`` or the MCAN / OpenVQA names ``COCO_<split>_<12-digit id>.jpg.npz`` (any
``<prefix>_<digits>[.jpg|.jpeg|.png].npz``), in the directory itself or one level below it, so the
MCAN tree ``coco_extract/{train2014,val2014,test2015}/`` opens as one store. An id found in two files is
an error naming both. Two real key layouts are read:

* self-critical.pytorch with boxes: ``feat`` (K, D), ``boxes`` (K, 4), ``image_h``/``image_w`` when present
  (its box-less ``cocobu_att`` directories are read by :mod:`.selfcritical`);
* MCAN / OpenVQA: ``x`` stored (D, K) or (K, D), ``bbox`` (K, 4), ``image_h``, ``image_w``, ``num_bbox``.

The orientation of ``x`` is decided by the box count K and the expected feature dimension D
(constructor ``dim``, else inferred from the first file). When K == D the shape is ambiguous and
``orientation`` ("kd" or "dk") must be given. Boxes are required (no substitute geometry); a missing
image size is derived from the boxes' max extents.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable

import numpy as np

from vlattn.data.features.base import RegionFeatures
from vlattn.data.features.blobs import READ_ERRORS
from vlattn.data.features.checks import make_regions
from vlattn.data.features.record import NPZ_FILE, Record, encode_record
from vlattn.data.features.storage import IndexedStore, atomic_dir, index_files
from vlattn.errors import DataError

_NAME = re.compile(r"^(?:.*_)?(\d+)(?:\.(?:jpg|jpeg|png))?\.npz$")
_KEYS = ("feat", "x", "boxes", "bbox", "image_h", "image_w", "num_bbox", "classes", "scores")
ORIENTATIONS = ("kd", "dk")


class NpzDirStore(IndexedStore):
    """Read-only :class:`~vlattn.data.features.base.FeatureStore` over a directory of ``<id>.npz`` files."""

    def __init__(self, path: str | Path, dim: int | None = None, orientation: str | None = None) -> None:
        self.path = str(path)
        if orientation not in (None, *ORIENTATIONS):
            raise DataError(f"orientation must be one of {ORIENTATIONS}, got {orientation!r}", path=self.path)
        if not Path(self.path).is_dir():
            raise DataError("npz feature directory not found", path=self.path)
        self._files = index_files(Path(self.path), _NAME)
        self._index_ids(self._files)
        self._orientation = orientation
        self._expected_dim = dim  # None only while the first file is read to infer D
        if dim is None and not self._ids:
            raise DataError("no <id>.npz or COCO_<split>_<id>.jpg.npz files; pass dim for an empty store", path=self.path)
        self._dim = self._expected_dim = dim if dim is not None else self.get(self._ids[0]).features.shape[1]

    def file(self, image_id: int) -> Path:
        """The ``.npz`` path of ``image_id``."""
        if image_id not in self._files:
            raise DataError("image id not in the npz directory", path=self.path, item=image_id)
        return self._files[image_id]

    def _load(self, image_id: int) -> dict[str, np.ndarray]:
        """The known keys of the image's file (pickled objects refused)."""
        file = self.file(image_id)
        try:
            data = np.load(file, allow_pickle=False)
            if not isinstance(data, np.lib.npyio.NpzFile):
                raise DataError("not an .npz archive (a single .npy array?)", path=file, item=image_id)
            with data:
                return {key: data[key] for key in _KEYS if key in data.files}
        except READ_ERRORS as err:
            raise DataError(f"cannot read npz file: {err}", path=file, item=image_id) from None

    def detections(self, image_id: int) -> tuple[np.ndarray, np.ndarray] | None:
        """The detector classes (K,) int64 and scores (K,) float32 vlattn stored for ``image_id``, or None."""
        arrays = self._load(image_id)
        if "classes" not in arrays or "scores" not in arrays:
            return None
        return arrays["classes"].astype(np.int64), arrays["scores"].astype(np.float32)

    def get(self, image_id: int) -> RegionFeatures:
        """Regions of ``image_id``: features (K, D) float32, boxes (K, 4), image size."""
        arrays = self._load(image_id)
        file = self.file(image_id)
        boxes = arrays.get("boxes", arrays.get("bbox"))
        if boxes is None:
            raise DataError("no 'boxes' or 'bbox' array; region boxes are required", path=file, item=image_id)
        if "num_bbox" in arrays and int(arrays["num_bbox"].reshape(-1)[0]) != len(boxes):
            message = f"num_bbox is {int(arrays['num_bbox'].reshape(-1)[0])} but 'bbox' has {len(boxes)} rows"
            raise DataError(message, path=file, item=image_id)
        if "feat" in arrays:
            features = arrays["feat"]
        elif "x" in arrays:
            features = self._orient(arrays["x"], len(boxes), file, image_id)
        else:
            raise DataError("no 'feat' (self-critical) or 'x' (MCAN) array", path=file, item=image_id)
        width, height = (int(arrays[k].reshape(-1)[0]) if k in arrays else None for k in ("image_w", "image_h"))
        return make_regions(features, boxes, width, height, path=file, image_id=image_id, dim=self._expected_dim)

    def _orient(self, x: np.ndarray, num_boxes: int, file: Path, image_id: int) -> np.ndarray:
        """``x`` as (K, D): the axis of length K (the box count) holds regions, the other has length D."""
        if x.ndim != 2:
            raise DataError(f"'x' must be 2-D, got shape {x.shape}", path=file, item=image_id)
        if self._orientation is not None:
            return x if self._orientation == "kd" else x.T
        fits = {
            "kd": x.shape[0] == num_boxes and self._expected_dim in (None, x.shape[1]),
            "dk": x.shape[1] == num_boxes and self._expected_dim in (None, x.shape[0]),
        }
        if all(fits.values()):
            raise DataError(
                f"'x' has square shape {x.shape} (K == D); pass orientation='kd' or 'dk'", path=file, item=image_id
            )
        if not any(fits.values()):
            raise DataError(
                f"'x' shape {x.shape} fits neither (K, D) nor (D, K) "
                f"with K={num_boxes} boxes and D={self._expected_dim}",
                path=file,
                item=image_id,
            )
        return x if fits["kd"] else x.T


def write_npz_dir(
    path: str | Path,
    items: Iterable[tuple[int, RegionFeatures]],
    *,
    layout: str = "feat",
    overwrite: bool = False,
    extractor: Record | None = None,
) -> int:
    """Write ``(image_id, regions)`` pairs as ``<id>.npz`` files, atomically; returns the number of images.

    ``layout="feat"``: self-critical keys ``feat`` (K, D), ``boxes``, ``image_h``, ``image_w``;
    ``layout="x"``: MCAN keys ``x`` stored (D, K), ``bbox``, ``image_h``, ``image_w``, ``num_bbox``. Regions with
    detector classes and scores add ``classes`` (K,) and ``scores`` (K,); ``extractor`` is written to
    ``extractor.json`` (:mod:`.record`).
    """
    if layout not in ("feat", "x"):
        raise DataError(f"npz layout must be 'feat' or 'x', got {layout!r}", path=path)
    count = 0
    with atomic_dir(path, overwrite, kind="npz-dir") as tmp:
        for image_id, regions in items:
            size = {"image_h": np.int64(regions.height), "image_w": np.int64(regions.width)}
            if layout == "feat":
                arrays = {"feat": regions.features, "boxes": regions.boxes, **size}
            else:
                num_bbox = np.int64(regions.num_regions)
                arrays = {"x": regions.features.T, "bbox": regions.boxes, "num_bbox": num_bbox, **size}
            if regions.classes is not None and regions.scores is not None:
                arrays.update(classes=np.asarray(regions.classes, np.int64), scores=np.asarray(regions.scores, np.float32))
            np.savez(tmp / f"{image_id}.npz", **arrays)
            count += 1
        if extractor is not None:
            (tmp / NPZ_FILE).write_text(encode_record(extractor))
    return count
