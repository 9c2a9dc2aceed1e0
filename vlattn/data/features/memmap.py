"""The project's own fast feature layout: memory-mapped arrays in one directory.

Files (R regions in total over M images, feature dimension D)::

    meta.json      {"format": "vlattn-memmap", "version": 1, "dim": D, "num_images": M, "num_regions": R}
    features.f16   raw little-endian float16, (R, D): all regions of all images, concatenated
    boxes.f32      raw little-endian float32, (R, 4): x1y1x2y2 pixels
    ids.npy        int64 (M,): image ids in storage order
    offsets.npy    int64 (M + 1,): image i owns rows offsets[i]:offsets[i + 1]
    sizes.npy      int64 (M, 2): image width, height
    classes.npy    int64 (R,): each region's detector class (only when the regions came with classes and scores)
    scores.npy     float32 (R,): each region's detector score (idem)
    attributes.npy int64 (R,): each region's attribute class (only when the regions came with attributes and their
                   scores, beside classes and scores)
    attribute_scores.npy float32 (R,): each region's attribute score (idem)
    .vlattn.json   marker: a store written by vlattn (what ``--overwrite`` may replace)

The raw files are opened lazily in each process, so a store object pickles cheaply to DataLoader workers, and an
image's rows are read with one positioned read per file (``os.preadv`` into the output array), not through a
memory map: with a cold page cache a read through a map is a page fault per 128 KiB of read-around, each a
synchronous I/O, while one positioned read is one request. :meth:`MemmapStore.prefetch` hints the byte ranges of a
whole batch to the kernel first (:mod:`.readahead`), so a batch's requests reach the disk together rather than one
at a time (benchmarks/RESULTS.md "Scale: loader throughput"). The writer streams images (one in memory at a time) into a
temporary directory that is renamed into place only when complete; ``meta.json`` is written last.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterable

import numpy as np
import torch

from vlattn.data.features.base import RegionFeatures
from vlattn.data.features.blobs import READ_ERRORS
from vlattn.data.features.checks import finite_half, make_regions
from vlattn.data.features.labels import RegionLabels
from vlattn.data.features.readahead import will_need
from vlattn.data.features.record import MEMMAP_KEY, Record
from vlattn.data.features.storage import IndexedStore, ProcessLocal, atomic_dir
from vlattn.errors import DataError

FORMAT = "vlattn-memmap"
VERSION = 1
META = "meta.json"
_FEATURES = ("features.f16", np.dtype("<f2"))
_BOXES = ("boxes.f32", np.dtype("<f4"))


class MemmapStore(IndexedStore):
    """Read-only :class:`~vlattn.data.features.base.FeatureStore` over a memmap directory."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        root = Path(self.path)
        meta = _read_meta(root)
        self._dim = int(meta["dim"])
        self._num_regions = int(meta["num_regions"])
        try:
            self._stored_ids = np.load(root / "ids.npy", allow_pickle=False)
            self._offsets = np.load(root / "offsets.npy", allow_pickle=False)
            self._sizes = np.load(root / "sizes.npy", allow_pickle=False)
        except READ_ERRORS as err:
            raise DataError(f"cannot read memmap index arrays: {err}", path=self.path) from None
        self._check_index(int(meta["num_images"]))
        self._rows = {int(image_id): row for row, image_id in enumerate(self._stored_ids)}
        self._index_ids(self._rows)
        self._files: ProcessLocal[tuple[BinaryIO, BinaryIO]] = ProcessLocal(self._open)
        self._detections: tuple[np.ndarray, np.ndarray] | None = None
        self._attributes: tuple[np.ndarray, np.ndarray] | None = None

    def _check_index(self, num_images: int) -> None:
        """Index arrays and raw file sizes agree with ``meta.json``."""
        offsets = self._offsets
        integers = all(np.issubdtype(array.dtype, np.integer) for array in (self._stored_ids, offsets, self._sizes))
        consistent = (
            integers
            and self._stored_ids.shape == (num_images,)
            and offsets.shape == (num_images + 1,)
            and self._sizes.shape == (num_images, 2)
            and offsets[0] == 0
            and offsets[-1] == self._num_regions
            and bool(np.all(np.diff(offsets) >= 0))
            and len(np.unique(self._stored_ids)) == num_images
        )
        if not consistent:
            raise DataError("ids/offsets/sizes arrays do not match meta.json (corrupt store)", path=self.path)
        for (name, dtype), width in ((_FEATURES, self._dim), (_BOXES, 4)):
            file = Path(self.path) / name
            expected = self._num_regions * width * dtype.itemsize
            if not file.is_file() or file.stat().st_size != expected:
                raise DataError(f"expected {expected} bytes in {name} (truncated or missing file)", path=self.path)

    def _open(self) -> tuple[BinaryIO, BinaryIO]:
        """The features and boxes files, unbuffered, for this process's positioned reads."""
        try:
            return open(Path(self.path) / _FEATURES[0], "rb", buffering=0), open(Path(self.path) / _BOXES[0], "rb", buffering=0)
        except OSError as err:
            raise DataError(f"cannot open the memmap store's files: {err}", path=self.path) from None

    def _rows_of(self, file: BinaryIO, dtype: np.dtype, width: int, start: int, stop: int, image_id: int) -> np.ndarray:
        """Rows ``start:stop`` (stop - start, width) of the raw file, read with one ``preadv``."""
        out = np.empty((stop - start, width), dtype=dtype)
        try:
            read = os.preadv(file.fileno(), [out], start * width * dtype.itemsize) if out.nbytes else 0
        except OSError as err:
            raise DataError(f"cannot read {Path(file.name).name}: {err}", path=self.path, item=image_id) from None
        if read != out.nbytes:
            raise DataError(f"{Path(file.name).name} ends early (truncated after opening?)", path=self.path,
                            item=image_id)
        return out

    def get(self, image_id: int) -> RegionFeatures:
        """Regions of ``image_id``: features (N, D) float32 (stored as float16), boxes (N, 4), image size."""
        return self._read(image_id, keep_half=False)

    def get_stored(self, image_id: int) -> RegionFeatures:
        """:meth:`get` with the features (N, D) float16 as stored (the same checks; half the bytes to move, e.g.
        from a DataLoader worker: widened later they are exactly :meth:`get`'s)."""
        return self._read(image_id, keep_half=True)

    def _read(self, image_id: int, keep_half: bool) -> RegionFeatures:
        row = self._rows.get(image_id)
        if row is None:
            raise DataError("image id not in the memmap store", path=self.path, item=image_id)
        start, stop = int(self._offsets[row]), int(self._offsets[row + 1])
        features, boxes = self._files.get()
        width, height = (int(v) for v in self._sizes[row])
        return make_regions(
            self._rows_of(features, _FEATURES[1], self._dim, start, stop, image_id),
            self._rows_of(boxes, _BOXES[1], 4, start, stop, image_id),
            width,
            height,
            path=self.path,
            image_id=image_id,
            dim=self._dim,
            keep_half=keep_half,
        )

    def prefetch(self, image_ids: Iterable[int]) -> None:
        """Start reading the features and boxes of ``image_ids`` into the page cache (:mod:`.readahead`); ids not
        in the store are left for :meth:`get` to report."""
        rows = [row for row in map(self._rows.get, image_ids) if row is not None]
        for file, (_, dtype), width in zip(self._files.get(), (_FEATURES, _BOXES), (self._dim, 4)):
            row_bytes = width * dtype.itemsize
            will_need(file.fileno(), ((int(self._offsets[row]) * row_bytes,
                                       int(self._offsets[row + 1] - self._offsets[row]) * row_bytes) for row in rows))

    def detections(self, image_id: int) -> tuple[np.ndarray, np.ndarray] | None:
        """The detector classes (N,) int64 and scores (N,) float32 of ``image_id``'s regions, or None when the
        store has none."""
        if self._detections is None:
            root = Path(self.path)
            if not (root / "classes.npy").is_file():
                return None
            self._detections = (np.load(root / "classes.npy", mmap_mode="r"), np.load(root / "scores.npy", mmap_mode="r"))
        row = self._rows.get(image_id)
        if row is None:
            raise DataError("image id not in the memmap store", path=self.path, item=image_id)
        start, stop = int(self._offsets[row]), int(self._offsets[row + 1])
        return np.array(self._detections[0][start:stop]), np.array(self._detections[1][start:stop])

    def labels(self, image_id: int) -> RegionLabels | None:
        """The detector's object classes and, when stored, attribute classes of ``image_id``'s regions, with
        their scores (:class:`~.labels.RegionLabels`), or None when the store has no classes."""
        found = self.detections(image_id)
        if found is None:
            return None
        root = Path(self.path)
        if self._attributes is None and (root / "attributes.npy").is_file():
            self._attributes = (np.load(root / "attributes.npy", mmap_mode="r"),
                                np.load(root / "attribute_scores.npy", mmap_mode="r"))
        if self._attributes is None:
            return RegionLabels(*found)
        row = self._rows[image_id]
        start, stop = int(self._offsets[row]), int(self._offsets[row + 1])
        return RegionLabels(*found, np.array(self._attributes[0][start:stop]), np.array(self._attributes[1][start:stop]))


@dataclass
class EncodedRegions:
    """One image's regions as a memmap store holds them: ``features`` (N, D) float16 (values beyond its range
    infinite: the writer refuses them), ``boxes`` (N, 4) float32, the image size and the detector's labels of
    :class:`~.base.RegionFeatures`, if any. Made by :func:`encode_regions` where the regions are read (e.g. in the
    processes parsing a TSV) so that the writing process only checks and writes."""

    features: np.ndarray
    boxes: np.ndarray
    width: int
    height: int
    classes: np.ndarray | None = None
    scores: np.ndarray | None = None
    attributes: np.ndarray | None = None
    attribute_scores: np.ndarray | None = None

    @property
    def num_regions(self) -> int:
        return int(self.features.shape[0])


def check_half(encoded: EncodedRegions, dest: Path, image_id: int) -> None:
    """Refuse features that float16 cannot hold (what the writer checks of every image)."""
    if not finite_half(encoded.features):
        overflow = "features are NaN/inf or exceed the float16 range (|x| > 65504)"
        raise DataError(overflow, path=dest, item=image_id)


def encode_regions(regions: RegionFeatures) -> EncodedRegions:
    """``regions`` in the store's dtypes (no check: :func:`write_memmap` checks the result)."""
    return EncodedRegions(to_half(regions.features), regions.boxes.astype(_BOXES[1]), regions.width, regions.height,
                          regions.classes, regions.scores, regions.attributes, regions.attribute_scores)


def to_half(features: np.ndarray) -> np.ndarray:
    """float32 ``features`` rounded to float16 (to nearest, ties to even; beyond the range infinite) by torch where
    it can read them in place: numpy's conversion gives the same bits at a fraction of the rate."""
    if features.dtype == np.float32 and features.flags.c_contiguous and features.flags.writeable:
        return torch.from_numpy(features).half().numpy()
    with np.errstate(over="ignore"):
        return features.astype(_FEATURES[1])


def _read_meta(root: Path) -> dict[str, object]:
    """``meta.json`` of a memmap store, checked for format and version."""
    file = root / META
    if not file.is_file():
        raise DataError(f"not a vlattn memmap store (no {META})", path=root)
    try:
        meta = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DataError(f"cannot read {META}: {err}", path=root) from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise DataError(f"{META} does not describe a {FORMAT} store of version {VERSION}", path=root)
    missing = [key for key in ("dim", "num_images", "num_regions") if not isinstance(meta.get(key), int)]
    if missing:
        raise DataError(f"{META} lacks integer keys {missing}", path=root)
    return meta


class _MemmapWriter:
    """Appends images to the raw files of a store being built in ``root`` (errors name ``dest``)."""

    def __init__(self, root: Path, dest: Path, dim: int | None, features: BinaryIO, boxes: BinaryIO) -> None:
        self.root, self.dest, self.dim = root, dest, dim
        self.features, self.boxes = features, boxes
        self.ids: list[int] = []
        self.offsets: list[int] = [0]
        self.sizes: list[tuple[int, int]] = []
        self.seen: set[int] = set()
        self.detections: tuple[list[np.ndarray], list[np.ndarray]] | None = None  # classes, scores per image
        self.attributes: tuple[list[np.ndarray], list[np.ndarray]] | None = None  # attributes, their scores

    def add(self, image_id: int, regions: RegionFeatures | EncodedRegions) -> None:
        """Append one image; checks id uniqueness, dimension and the float16 range."""
        if image_id in self.seen:
            raise DataError("duplicate image id in the input", path=self.dest, item=image_id)
        self.dim = self.dim if self.dim is not None else regions.features.shape[1]
        if regions.features.shape[1] != self.dim:
            raise DataError(
                f"wrong feature dimension: expected {self.dim}, got {regions.features.shape[1]}",
                path=self.dest,
                item=image_id,
            )
        encoded = regions if isinstance(regions, EncodedRegions) else encode_regions(regions)
        check_half(encoded, self.dest, image_id)
        self._add_detections(image_id, encoded)
        self.features.write(encoded.features.tobytes())
        self.boxes.write(encoded.boxes.tobytes())
        self.record(image_id, regions.num_regions, regions.width, regions.height)

    def record(self, image_id: int, count: int, width: int, height: int) -> None:
        """Enter an image whose ``count`` rows follow the previous image's in the raw files."""
        self.seen.add(image_id)
        self.ids.append(int(image_id))
        self.offsets.append(self.offsets[-1] + count)
        self.sizes.append((width, height))

    def _add_detections(self, image_id: int, regions: EncodedRegions) -> None:
        """Keep the regions' classes and scores; every image of a store has them or none does."""
        has = regions.classes is not None and regions.scores is not None
        if not self.ids:
            self.detections = ([], []) if has else None
        if has != (self.detections is not None):
            raise DataError("regions with and without detector classes/scores in one store", path=self.dest,
                            item=image_id)
        if self.detections is not None:
            self.detections[0].append(np.asarray(regions.classes, dtype=np.int64))
            self.detections[1].append(np.asarray(regions.scores, dtype=np.float32))
        attributed = has and regions.attributes is not None and regions.attribute_scores is not None
        if not self.ids:
            self.attributes = ([], []) if attributed else None
        if attributed != (self.attributes is not None):
            raise DataError("regions with and without attributes in one store", path=self.dest, item=image_id)
        if self.attributes is not None:
            self.attributes[0].append(np.asarray(regions.attributes, dtype=np.int64))
            self.attributes[1].append(np.asarray(regions.attribute_scores, dtype=np.float32))

    def finish(self, extractor: Record | None = None) -> None:
        """Write the index arrays (and the detections), then ``meta.json`` (with the extractor record, if any)."""
        if self.dim is None:
            raise DataError("no images to write; pass dim for an empty store", path=self.dest)
        if self.detections is not None:
            np.save(self.root / "classes.npy", np.concatenate(self.detections[0]))
            np.save(self.root / "scores.npy", np.concatenate(self.detections[1]))
        if self.attributes is not None:
            np.save(self.root / "attributes.npy", np.concatenate(self.attributes[0]))
            np.save(self.root / "attribute_scores.npy", np.concatenate(self.attributes[1]))
        np.save(self.root / "ids.npy", np.asarray(self.ids, dtype=np.int64))
        np.save(self.root / "offsets.npy", np.asarray(self.offsets, dtype=np.int64))
        np.save(self.root / "sizes.npy", np.asarray(self.sizes, dtype=np.int64).reshape(-1, 2))
        meta = {
            "format": FORMAT,
            "version": VERSION,
            "dim": int(self.dim),
            "num_images": len(self.ids),
            "num_regions": self.offsets[-1],
        }
        if extractor is not None:
            meta[MEMMAP_KEY] = dict(extractor)
        (self.root / META).write_text(json.dumps(meta, indent=2))


def write_memmap(
    path: str | Path,
    items: Iterable[tuple[int, RegionFeatures | EncodedRegions]],
    *,
    dim: int | None = None,
    overwrite: bool = False,
    extractor: Record | None = None,
) -> int:
    """Stream ``(image_id, regions)`` pairs (regions as read, or already :func:`encode_regions`'d) into a memmap
    store at ``path``; returns the number of images.

    ``dim`` is required only when ``items`` is empty; ``extractor`` is recorded in ``meta.json``
    (:mod:`.record`). The directory appears only when complete.
    """
    with atomic_dir(path, overwrite, kind="memmap") as tmp:
        with open(tmp / _FEATURES[0], "wb") as features, open(tmp / _BOXES[0], "wb") as boxes:
            writer = _MemmapWriter(tmp, Path(path), dim, features, boxes)
            for image_id, regions in items:
                writer.add(image_id, regions)
        writer.finish(extractor)
    return len(writer.ids)
