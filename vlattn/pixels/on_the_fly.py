"""Features of a few image files made on the fly with the extractor a run was trained with (``vlattn caption
--images``, ``vlattn answer --image``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from vlattn.data.features.base import RegionFeatures
from vlattn.data.features.memory import MemoryStore
from vlattn.errors import ConfigError, DataError
from vlattn.pixels.images import ImageFailure, load_image
from vlattn.pixels.registry import check_request, extractor_from_record
from vlattn.pixels.weights import parse_weights


def extract_for_run(record: Mapping[str, Any] | None, files: Sequence[Path], device: torch.device, *,
                    extractor: str | None = None, weights: str | None = None, batch: int = 8) -> MemoryStore:
    """Features of ``files`` (image ids 0, 1, ... in order; boxes as fractions of each image) from the extractor ``record`` describes (the run's),
    refusing an ``extractor`` other than the run's and features of another size than the recorded (the model's).
    ``weights`` replaces the recorded weights file (checked against the recorded SHA-256)."""
    if record is None:
        raise ConfigError("the run's feature store records no extractor, so its images cannot be featurised here; "
                          "train on a store written by `vlattn features extract` (or caption with --features)")
    check_request(record, extractor, record.get("dim"))
    built = extractor_from_record(record, device, weights=parse_weights(weights) if weights is not None else None)
    check_request(record, None, built.dim)
    regions: list[RegionFeatures] = []
    for start in range(0, len(files), batch):
        try:
            images = [load_image(path, max_side=built.max_side) for path in files[start:start + batch]]
        except ImageFailure as failure:
            raise DataError(failure.reason, path=failure.path) from None
        regions += built(images)
    # boxes as fractions of the image, as the store's collation would make them
    sizes = [np.array([r.width, r.height] * 2, np.float32) for r in regions]
    return MemoryStore([r.features for r in regions], [r.boxes / size for r, size in zip(regions, sizes)])
