"""``synth``: the synthetic data set's own region CNN run on pixels over a K x K grid of windows.

It embeds each grid cell from the window centred on it exactly as the generator does
(:mod:`vlattn.data.synth.featurize`), so extracting a data set's rendered images with its ``extractor.safetensors``
and the generator's ``--grid K`` reproduces its ``grid_features/`` store. An image of another size is first
resized (bilinear, aspect not kept) to the square the CNN was trained on; the cells' boxes are given in the
original image's pixels. The generator's detection store (``features/``) cannot be reproduced from pixels: its
boxes come from the scene's simulated detector.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np
import torch
from PIL import Image

from vlattn.config import bounded
from vlattn.data.features.base import RegionFeatures
from vlattn.data.synth.extractor import WEIGHTS_FILE, extract, load_extractor, window_crops
from vlattn.data.synth.featurize import grid_boxes
from vlattn.errors import DataError
from vlattn.io import state_sha256
from vlattn.pixels.images import LoadedImage
from vlattn.pixels.weights import WeightSource


@dataclass
class SynthOptions:
    """``grid``: K, the cells per side (the generator's ``--grid``; the demos use 6)."""

    grid: int = bounded(6, ge=1)


class SynthExtractor:
    """Features (K*K, D) of each image's grid cells from the synthetic set's :class:`RegionCNN`."""

    name = "synth"

    def __init__(self, options: SynthOptions, weights: WeightSource | None, device: torch.device) -> None:
        if weights is None or weights.source != "file" or weights.path is None:
            raise DataError("--extractor synth needs --weights: a synthetic data set's directory or its "
                            f"{WEIGHTS_FILE}")
        path = weights.path / WEIGHTS_FILE if weights.path.is_dir() else weights.path
        self.model, self.image_size = load_extractor(path)
        self.options, self.weights, self.device = options, WeightSource("file", path=path.resolve()), device
        self.model.to(device)
        self.dim = self.model.heads["shape"].in_features
        self.max_side = max(self.image_size, 64)
        self.sha256 = state_sha256(self.model.state_dict())
        self.cells = grid_boxes(self.image_size, options.grid)  # (K*K, 4) in the CNN's square image

    def record(self) -> dict[str, Any]:
        """The store's extractor record (:mod:`vlattn.data.features.record`)."""
        settings = {**asdict(self.options), "image_size": self.image_size}
        return {"name": self.name, "dim": self.dim, "weights": {**self.weights.describe(), "sha256": self.sha256},
                "settings": settings}

    def _square(self, image: LoadedImage) -> np.ndarray:
        """The image as the (S, S, 3) square the CNN reads."""
        if image.pixels.shape[:2] == (self.image_size, self.image_size):
            return image.pixels
        resized = Image.fromarray(image.pixels).resize((self.image_size, self.image_size), Image.Resampling.BILINEAR)
        return np.asarray(resized)

    def __call__(self, images: Sequence[LoadedImage]) -> list[RegionFeatures]:
        crops = np.concatenate([window_crops(self._square(image), self.cells) for image in images])
        features = extract(self.model, crops)
        cells = len(self.cells)
        out = []
        for k, image in enumerate(images):
            scale = np.array([image.width, image.height] * 2, np.float32) / self.image_size
            out.append(RegionFeatures(features[k * cells:(k + 1) * cells], self.cells * scale, image.width,
                                      image.height))
        return out
