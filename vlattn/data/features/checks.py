"""Validation shared by every feature-store backend.

Readers hand raw arrays to :func:`make_regions`, which checks shapes, the feature dimension, finiteness
and the boxes, and returns float32 :class:`RegionFeatures` (float16 features kept as they are on request: see
:func:`make_regions`); any problem is a :class:`~vlattn.errors.DataError` naming the file and the image id.

Boxes (x1, y1, x2, y2 pixels) must lie in the image: an image without regions, an inverted box
(x2 < x1 or y2 < y1) or a box more than :data:`BOX_TOLERANCE` pixels outside the image is an error (the
usual causes: boxes stored as x, y, w, h, normalised to [0, 1], or the wrong image size). A box at most
that far outside — rounding of detector output — is clamped to the image and reported once per store with
a ``logging`` warning (logger ``vlattn.data``): once across this process and the processes forked from it, such as
DataLoader workers, which a training loop makes anew every epoch (workers started by ``spawn`` report on their own).
"""

from __future__ import annotations

import hashlib
import logging
import math
import mmap
import multiprocessing
import threading
from typing import Any, Iterable

import numpy as np
import torch

from vlattn.data.features.base import FeatureStore, RegionFeatures
from vlattn.errors import DataError

BOX_TOLERANCE = 1.0  # pixels a box may extend outside the image and be clamped rather than rejected
LOG = logging.getLogger("vlattn.data")
# The stores whose clamping was reported, by an 8-byte digest of their path (0 = free): anonymous shared memory,
# the same pages in every process forked from this one; the lock makes the look-up and the entry one step
_CLAMP_REPORTED = memoryview(mmap.mmap(-1, mmap.PAGESIZE)).cast("Q")
_CLAMP_LOCAL: set[int] = set()  # this process's reports where the shared table cannot be used
try:  # None once it could not be had (see _first_clamp_of): the table is then left alone
    _CLAMP_LOCK: Any = multiprocessing.Lock()
except OSError:  # no POSIX semaphores (some sandboxes): two processes may then both report a store
    _CLAMP_LOCK = threading.Lock()


def size_from_boxes(boxes: np.ndarray) -> tuple[int, int]:
    """(width, height) when a file does not record the image size: the boxes' max extents, rounded up.

    ``boxes`` (N, 4) x1y1x2y2. A lower bound of the true size (no box leaves the image); (1, 1) when N = 0.
    """
    if boxes.shape[0] == 0:
        return 1, 1
    width = max(1, math.ceil(float(boxes[:, 2].max())))
    height = max(1, math.ceil(float(boxes[:, 3].max())))
    return width, height


def make_regions(
    features: np.ndarray,
    boxes: np.ndarray,
    width: int | None,
    height: int | None,
    *,
    path: object,
    image_id: int,
    dim: int | None,
    keep_half: bool = False,
) -> RegionFeatures:
    """Check raw arrays and build float32 regions.

    ``features`` (N, D) with D == ``dim`` when given, ``boxes`` (N, 4), both finite; a missing
    width/height is derived with :func:`size_from_boxes`. ``keep_half``: float16 features stay float16 (the same
    checks; widening them later gives exactly the float32 values this function returns without it).
    """
    features = np.asarray(features)
    boxes = np.asarray(boxes)
    if features.ndim != 2:
        raise DataError(f"features must be 2-D (N, D), got shape {features.shape}", path=path, item=image_id)
    if dim is not None and features.shape[1] != dim:
        raise DataError(
            f"wrong feature dimension: expected {dim}, got {features.shape[1]} (shape {features.shape})",
            path=path,
            item=image_id,
        )
    if boxes.shape != (features.shape[0], 4):
        raise DataError(
            f"boxes must have shape ({features.shape[0]}, 4) to match the features, got {boxes.shape}",
            path=path,
            item=image_id,
        )
    features = features if keep_half and features.dtype == np.float16 else as_float32(features)
    boxes = boxes.astype(np.float32, copy=False)
    for name, array in (("features", features), ("boxes", boxes)):
        if not all_finite(array):
            raise DataError(f"{name} contain NaN or inf values", path=path, item=image_id)
    if features.shape[0] == 0:
        raise DataError("image has no regions (0 boxes); give it at least one or leave it out of the split",
                        path=path, item=image_id)
    if width is None or height is None:
        width, height = size_from_boxes(boxes)
    if width <= 0 or height <= 0:
        raise DataError(f"image size must be positive, got {width}x{height}", path=path, item=image_id)
    boxes = check_boxes(boxes, int(width), int(height), path=path, image_id=image_id)
    return RegionFeatures(features=features, boxes=boxes, width=int(width), height=int(height))


def as_float32(array: np.ndarray) -> np.ndarray:
    """``array`` as float32 (itself when it is already). float16 is converted by torch: numpy's conversion is a
    scalar loop (about 3 ns per value here, more than the rest of a memmap read), torch's a vectorised one; both
    are exact, so the values are the same."""
    if array.dtype == np.float16 and array.flags.c_contiguous and array.flags.writeable:
        return torch.from_numpy(array).float().numpy()
    return array.astype(np.float32, copy=False)


def finite_half(half: np.ndarray) -> bool:
    """Whether no float16 value of ``half`` is NaN or infinite (exponent bits all set), tested on the bits: numpy's
    float16 ``isfinite`` takes about half as long as the float32 -> float16 conversion itself."""
    exponent = half.view(np.uint16) & np.uint16(0x7C00)
    return not bool((exponent == 0x7C00).any())


def all_finite(array: np.ndarray) -> bool:
    """Whether every value of the float ``array`` is finite (float16 tested on its bits: :func:`finite_half`)."""
    if array.dtype == np.float16:
        return finite_half(array)
    return bool(np.isfinite(array).all())


def check_boxes(boxes: np.ndarray, width: int, height: int, *, path: object, image_id: int) -> np.ndarray:
    """``boxes`` (N, 4) x1y1x2y2 checked against a ``width`` x ``height`` image (see the module notes);
    returns them, clamped when they overshoot by at most :data:`BOX_TOLERANCE` pixels."""
    inverted = np.flatnonzero((boxes[:, 2] < boxes[:, 0]) | (boxes[:, 3] < boxes[:, 1]))
    if inverted.size:
        k = int(inverted[0])
        raise DataError(f"box {k} {_box(boxes[k])} is inverted: x2 < x1 or y2 < y1 ({inverted.size} of {len(boxes)} "
                        "boxes); boxes must be x1, y1, x2, y2", path=path, item=image_id)
    size = np.array([width, height], dtype=np.float32)
    outside = np.maximum(np.maximum(-boxes[:, :2], 0), np.maximum(boxes[:, 2:] - size, 0)).max(axis=1)  # (N,) px
    worst = float(outside.max())
    if worst > BOX_TOLERANCE:
        k = int(outside.argmax())
        raise DataError(f"box {k} {_box(boxes[k])} lies {worst:g} px outside the {width}x{height} image; boxes must "
                        "be x1, y1, x2, y2 in pixels of the original image", path=path, item=image_id)
    if worst > 0:
        if _first_clamp_of(path):
            LOG.warning("%s: item %r: boxes extend up to %g px outside the %dx%d image; clamped to the image "
                        "(up to %g px is clamped, more is an error; reported once per store)",
                        path, image_id, worst, width, height, BOX_TOLERANCE)
        boxes = np.concatenate([np.maximum(boxes[:, :2], 0), np.minimum(boxes[:, 2:], size)], axis=1)
    return boxes


def _first_clamp_of(path: object) -> bool:
    """Whether no process sharing :data:`_CLAMP_REPORTED` has reported a clamp in store ``path`` yet; marks it
    reported. Past the table's 512 stores, or once the lock was not free within a second (a process killed while
    holding it keeps it forever: waiting must not hang the run), this process's own reports decide."""
    global _CLAMP_LOCK
    key = int.from_bytes(hashlib.blake2b(str(path).encode(), digest_size=8).digest(), "little") or 1
    if _CLAMP_LOCK is not None and _CLAMP_LOCK.acquire(timeout=1.0):
        try:
            for place, seen in enumerate(_CLAMP_REPORTED):
                if seen == key:
                    return False
                if seen == 0:
                    _CLAMP_REPORTED[place] = key
                    return True
        finally:
            _CLAMP_LOCK.release()
    else:
        _CLAMP_LOCK = None
    if key in _CLAMP_LOCAL:
        return False
    _CLAMP_LOCAL.add(key)
    return True


def _box(box: np.ndarray) -> str:
    return "(" + ", ".join(f"{v:g}" for v in box.tolist()) + ")"


def require_ids(store: FeatureStore, image_ids: Iterable[int], feature_dim: int | None = None) -> None:
    """Raise one :class:`DataError` naming the store if any id is absent or its dimension is not ``feature_dim``."""
    image_ids = list(image_ids)
    missing = [i for i in image_ids if i not in store]
    if missing:
        raise DataError(
            f"{len(missing)} of {len(image_ids)} images have no region features; first missing ids: {missing[:10]}",
            path=store.path,
        )
    if feature_dim is not None and store.dim != feature_dim:
        raise DataError(f"store has feature dimension {store.dim}, expected {feature_dim}", path=store.path)
