"""``grid``: a torchvision ResNet's last feature map average-pooled to an N x N grid of cells.

Each image is resized to ``size`` x ``size`` (bilinear, aspect not kept, so cell k always covers the same fraction
of the image), normalised with ImageNet's mean and standard deviation, and run through the ResNet up to its last
stage (``layer4``: 2048 channels for ResNet-50/101/152, 512 for ResNet-18/34); the map is average-pooled to N x N
and each cell is one region, row by row, its box the cell of the original image. A 448 x 448 input gives a 14 x 14
map, so ``grid=14`` keeps it as it is (the SLA paper's 14 x 14 x 2048 grid).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from vlattn.config import bounded
from vlattn.data.features.base import RegionFeatures
from vlattn.pixels.images import LoadedImage
from vlattn.pixels.torch_models import (
    IMAGENET_MEAN, IMAGENET_STD, cell_boxes, image_tensors, library_versions, named_weights, torchvision,
)
from vlattn.pixels.weights import WeightSource, build_seeded, load_weights


@dataclass
class GridOptions:
    """``arch`` the torchvision ResNet, ``grid`` N (cells per side), ``size`` the input side in pixels."""

    arch: Literal["resnet18", "resnet34", "resnet50", "resnet101", "resnet152"] = "resnet50"
    grid: int = bounded(7, ge=1)
    size: int = bounded(448, ge=32)


class GridExtractor:
    """Features (N*N, C) per image from a ResNet's ``layer4`` map."""

    name = "grid"

    def __init__(self, options: GridOptions, weights: WeightSource, device: torch.device) -> None:
        models = torchvision().models
        network = build_seeded(lambda: getattr(models, options.arch)(weights=None), weights.seed)
        self.sha256 = load_weights(network, weights, named_weights(options.arch))
        self.body = nn.Sequential(*list(network.children())[:-2]).to(device).eval()  # without avgpool and fc
        self.options, self.weights, self.device = options, weights, device
        self.dim = network.fc.in_features
        self.max_side = 2 * options.size  # loading larger only to shrink again would waste memory
        self.mean = torch.tensor(IMAGENET_MEAN, device=device).view(1, 3, 1, 1)
        self.std = torch.tensor(IMAGENET_STD, device=device).view(1, 3, 1, 1)

    def record(self) -> dict[str, Any]:
        """The store's extractor record (:mod:`vlattn.data.features.record`)."""
        return {"name": self.name, "dim": self.dim, "weights": {**self.weights.describe(), "sha256": self.sha256},
                "settings": asdict(self.options), "library": library_versions()}

    @torch.no_grad()
    def __call__(self, images: Sequence[LoadedImage]) -> list[RegionFeatures]:
        side, k = self.options.size, self.options.grid
        batch = torch.stack([F.interpolate(x[None], size=(side, side), mode="bilinear", align_corners=False,
                                           antialias=True)[0] for x in image_tensors(images, self.device)])
        maps = self.body((batch - self.mean) / self.std)  # (B, C, side/32, side/32)
        cells = F.adaptive_avg_pool2d(maps, k).flatten(2).transpose(1, 2).cpu().numpy()  # (B, k*k, C)
        return [RegionFeatures(cells[i], cell_boxes(image.width, image.height, k), image.width, image.height)
                for i, image in enumerate(images)]
