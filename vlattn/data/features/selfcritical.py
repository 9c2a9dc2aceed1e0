"""self-critical.pytorch's split feature directories, read as one store.

``scripts/make_bu_data.py`` of self-critical.pytorch turns the bottom-up TSV into three siblings::

    cocobu_att/<id>.npz   key "feat" (K, D) region features ("z" in its cocotest_bu files; grid
                          features (H, W, D) are flattened to (H*W, D) as its loader does)
    cocobu_box/<id>.npy   (K, 4) x1y1x2y2 boxes
    cocobu_fc/<id>.npy    (D,) pooled feature (the mean of the regions); optional here, see pooled()

Each may instead be an LMDB file written by its ``dump_to_lmdb`` script (``cocobu_att.lmdb``, ...; see
:mod:`.lmdbstore`). Open the store with the ``*_att`` directory/LMDB or with the folder holding the
siblings; the prefix (``cocobu``, ``cocotest_bu``, ...) is free.

Boxes: ``make_bu_data`` copies the TSV's pixel boxes, and the self-critical loader divides them by the image
size of its ``cocotalk.json`` (``images[].width/height``); other extraction scripts save boxes already
divided by the image size. The unit is detected once per store from the first eight box files: every
coordinate within [0, 1] means *normalised*, anything larger *pixels* (override with
``box_units="pixels"|"normalized"``); a later file with a coordinate above 1 in a normalised store is an
error naming it. The image size comes from ``image_sizes`` (any JSON with ``images[].id/width/height``:
``cocotalk.json`` made with ``--images_root``, ``captions_val2014.json``, ``instances_*.json``) when given;
normalised boxes are then scaled to pixels. Without it, pixel boxes get the size spanned by the boxes
(a lower bound, as for M2 files) and normalised boxes are kept as they are with a 1 x 1 image size, so
the normalised boxes models receive (boxes / size) are exactly the stored ones.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vlattn.data.features.base import RegionFeatures
from vlattn.data.features.blobs import Blobs, DirBlobs, load_array
from vlattn.data.features.checks import make_regions
from vlattn.data.features.storage import IndexedStore
from vlattn.data.jsonfiles import field, read_json
from vlattn.errors import DataError

BOX_UNITS = ("pixels", "normalized")
_PARTS = {"att": ".npz", "box": ".npy", "fc": ".npy"}
_SAMPLE = 8
_UNIT_TOLERANCE = 1e-4


def self_critical_parts(path: str | Path) -> dict[str, Path] | None:
    """``{"att", "box"[, "fc"]}`` paths when ``path`` is a ``<prefix>_att`` directory/LMDB with a
    ``<prefix>_box`` sibling, or a folder holding exactly one such pair; None otherwise."""
    path = Path(path)
    candidates = [path] if path.name.removesuffix(".lmdb").endswith("_att") else (
        sorted(p for p in path.iterdir() if p.name.removesuffix(".lmdb").endswith("_att")) if path.is_dir() else []
    )
    found = [parts for att in candidates if (parts := _siblings(att)) is not None]
    if len(found) > 1:
        names = ", ".join(str(parts["att"]) for parts in found)
        raise DataError(f"several self-critical feature sets ({names}); open one *_att path", path=path)
    return found[0] if found else None


def _siblings(att: Path) -> dict[str, Path] | None:
    prefix = att.name.removesuffix(".lmdb")[: -len("_att")]
    parts = {"att": att}
    for kind in ("box", "fc"):
        for name in (f"{prefix}_{kind}", f"{prefix}_{kind}.lmdb"):
            if (att.parent / name).exists():
                parts[kind] = att.parent / name
                break
    return parts if "box" in parts and att.exists() else None


def open_blobs(path: Path, suffix: str) -> Blobs:
    """A directory of ``<id><suffix>`` files, or an LMDB of such files' bytes."""
    from vlattn.data.features.lmdbstore import LmdbBlobs, is_lmdb

    return LmdbBlobs(path) if is_lmdb(path) else DirBlobs(path, suffix)


def load_image_sizes(path: str | Path) -> dict[int, tuple[int, int]]:
    """``{image id: (width, height)}`` from a JSON file with ``images: [{"id", "width", "height"}]``."""
    images = field(read_json(path), "images", list, path=path, item="top level")
    sizes = {}
    for index, image in enumerate(images):
        where = f"images[{index}]"
        image_id = field(image, "id", int, path=path, item=where)
        width, height = (field(image, key, (int, float), path=path, item=f"image {image_id}") for key in ("width", "height"))
        sizes[image_id] = (int(width), int(height))
    if not sizes:
        raise DataError("no images with width/height", path=path)
    return sizes


class SelfCriticalStore(IndexedStore):
    """Read-only :class:`~vlattn.data.features.base.FeatureStore` over ``*_att`` + ``*_box`` (+ ``*_fc``)."""

    def __init__(
        self,
        path: str | Path,
        dim: int | None = None,
        *,
        box_units: str | None = None,
        image_sizes: str | Path | dict[int, tuple[int, int]] | None = None,
    ) -> None:
        self.path = str(path)
        if box_units is not None and box_units not in BOX_UNITS:
            raise DataError(f"box_units must be one of {BOX_UNITS}, got {box_units!r}", path=path)
        parts = self_critical_parts(path)
        if parts is None:
            raise DataError("not a self-critical feature set (a <prefix>_att with a <prefix>_box sibling)", path=path)
        self.parts = parts
        self._att, self._box = open_blobs(parts["att"], ".npz"), open_blobs(parts["box"], ".npy")
        self._fc = open_blobs(parts["fc"], ".npy") if "fc" in parts else None
        self._index_ids(self._att.ids())
        missing = sorted(self._id_set - set(self._box.ids()))
        if missing:
            raise DataError(f"{len(missing)} images have features but no boxes; first: {missing[:10]}",
                            path=parts["box"])
        self._sizes = load_image_sizes(image_sizes) if isinstance(image_sizes, (str, Path)) else image_sizes
        self.box_units = box_units or self._detect_units()
        self._expected_dim = dim
        if dim is None and not self._ids:
            raise DataError("no *_att files; pass dim for an empty store", path=parts["att"])
        self._dim = self._expected_dim = dim if dim is not None else self.get(self._ids[0]).features.shape[1]

    def _boxes(self, image_id: int) -> np.ndarray:
        where = self._box.where(image_id)
        boxes = np.asarray(load_array(self._box.read(image_id), (), where=where, image_id=image_id))
        if boxes.ndim != 2 or boxes.shape[1] != 4:
            raise DataError(f"boxes must have shape (K, 4), got {boxes.shape}", path=where, item=image_id)
        return boxes.astype(np.float32)

    def _detect_units(self) -> str:
        """``normalized`` when every coordinate of the first few box files lies in [0, 1]."""
        sample = [self._boxes(image_id) for image_id in self._ids[:_SAMPLE]]
        within = all(b.size == 0 or (b.min() >= -_UNIT_TOLERANCE and b.max() <= 1 + _UNIT_TOLERANCE) for b in sample)
        return "normalized" if sample and within else "pixels"

    def get(self, image_id: int) -> RegionFeatures:
        """Regions of ``image_id``: features (K, D) float32, boxes (K, 4) pixels (see the module notes)."""
        if image_id not in self._id_set:
            raise DataError("image id not in the self-critical feature set", path=self.parts["att"], item=image_id)
        where = self._att.where(image_id)
        features = load_array(self._att.read(image_id), ("feat", "z"), where=where, image_id=image_id)
        features = features.reshape(-1, features.shape[-1]) if features.ndim >= 2 else features
        boxes = self._boxes(image_id)
        if features.ndim == 2 and len(boxes) != len(features):
            raise DataError(f"{len(boxes)} boxes for {len(features)} regions of {where}",
                            path=self._box.where(image_id), item=image_id)
        size = self._sizes.get(image_id) if self._sizes is not None else None
        if self._sizes is not None and size is None:
            raise DataError("image has no width/height in the image-size file", path=self.path, item=image_id)
        if self.box_units == "normalized":
            if boxes.size and boxes.max() > 1 + _UNIT_TOLERANCE:
                raise DataError("box coordinates above 1 in a store of normalised boxes",
                                path=self._box.where(image_id), item=image_id)
            boxes = boxes * np.asarray([*size, *size], dtype=np.float32) if size else boxes
            size = size or (1, 1)
        width, height = size if size else (None, None)
        return make_regions(features, boxes, width, height, path=where, image_id=image_id, dim=self._expected_dim)

    def pooled(self, image_id: int) -> np.ndarray:
        """The ``*_fc`` pooled feature (D,) float32 of ``image_id``; the regions' mean when there is no ``*_fc``."""
        if self._fc is None:
            return self.get(image_id).features.mean(axis=0)
        where = self._fc.where(image_id)
        pooled = np.asarray(load_array(self._fc.read(image_id), (), where=where, image_id=image_id), np.float32)
        return pooled.reshape(-1)
