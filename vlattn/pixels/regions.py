"""``regions``: torchvision Faster R-CNN boxes with RoIAlign-pooled backbone features, class and score per box.

The boxes are cut as the bottom-up features are (Anderson et al.'s ``generate_tsv``): the detector's boxes after
class-wise non-maximum suppression (IoU ``nms``), every box scoring at least ``score_threshold`` but no fewer than
``min_boxes`` and no more than ``max_boxes`` (the best-scoring first). Each box's feature is the mean of a
``pool`` x ``pool`` RoIAlign of the ResNet's last stage (C5, stride 32, 2048 channels) — the bottom-up features'
pooled res5 vector, from torchvision's COCO detector instead of their Visual Genome one. An image on which the
detector finds nothing gets one region, the whole image, with class 0 and score 0.

Images are resized as torchvision's detectors do (shorter side ``min_size``, longer at most ``max_size``; the
bottom-up features used 600 and 1000); boxes are returned in the original image's pixels.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal, Sequence

import numpy as np
import torch

from vlattn.config import bounded
from vlattn.data.features.base import RegionFeatures
from vlattn.errors import ConfigError
from vlattn.pixels.images import LoadedImage
from vlattn.pixels.torch_models import image_tensors, library_versions, named_weights, torchvision
from vlattn.pixels.weights import WeightSource, build_seeded, load_weights

STRIDE = 32  # of the ResNet's last stage


@dataclass
class RegionOptions:
    """Detector and box selection (see the module docstring)."""

    arch: Literal["fasterrcnn_resnet50_fpn", "fasterrcnn_resnet50_fpn_v2"] = "fasterrcnn_resnet50_fpn"
    min_size: int = bounded(600, ge=32)
    max_size: int = bounded(1000, ge=32)
    score_threshold: float = bounded(0.2, ge=0.0, le=1.0)
    nms: float = bounded(0.3, gt=0.0, le=1.0)
    min_boxes: int = bounded(10, ge=1)
    max_boxes: int = bounded(100, ge=1)
    pool: int = bounded(7, ge=1)


def _detector(options: RegionOptions) -> torch.nn.Module:
    """A randomly initialised detector of ``options.arch`` with the selection settings (weights loaded later)."""
    detection = torchvision().models.detection
    settings = dict(num_classes=91, min_size=options.min_size, max_size=options.max_size, box_score_thresh=0.0,
                    box_nms_thresh=options.nms, box_detections_per_img=options.max_boxes)
    if options.arch == "fasterrcnn_resnet50_fpn_v2":
        return detection.fasterrcnn_resnet50_fpn_v2(weights=None, weights_backbone=None, **settings)
    # torchvision builds the v1 backbone with frozen batch norms only when it loads weights; built here so that any
    # of its state dicts (torchvision's COCO weights, a file of them) fits
    ops, models = torchvision().ops, torchvision().models
    backbone = models.resnet50(weights=None, norm_layer=ops.misc.FrozenBatchNorm2d)
    body = detection.backbone_utils._resnet_fpn_extractor(backbone, 3)
    return detection.FasterRCNN(body, **settings)


class RegionExtractor:
    """Detected boxes (10-100 by default) with C5 RoIAlign features, classes and scores."""

    name = "regions"

    def __init__(self, options: RegionOptions, weights: WeightSource, device: torch.device) -> None:
        if options.min_boxes > options.max_boxes:
            raise ConfigError(f"--set min_boxes={options.min_boxes} exceeds max_boxes={options.max_boxes}")
        self.model = build_seeded(lambda: _detector(options), weights.seed)
        self.sha256 = load_weights(self.model, weights, named_weights(options.arch))
        if weights.source == "torchvision" and "COCO_V1" in str(named_weights(options.arch)(weights.name)):
            torchvision().models.detection._utils.overwrite_eps(self.model, 0.0)  # as torchvision's own builder
        self.model.to(device).eval()
        self.options, self.weights, self.device = options, weights, device
        self.dim = 2048
        self.max_side = options.max_size
        self.categories = self._categories(weights)

    def _categories(self, weights: WeightSource) -> list[str] | None:
        if weights.source != "torchvision":
            return None
        return list(named_weights(self.options.arch)(weights.name).meta["categories"])

    def record(self) -> dict[str, Any]:
        """The store's extractor record (:mod:`vlattn.data.features.record`)."""
        settings: dict[str, Any] = asdict(self.options)
        if self.categories is not None:
            settings["categories"] = self.categories
        return {"name": self.name, "dim": self.dim, "weights": {**self.weights.describe(), "sha256": self.sha256},
                "settings": settings, "library": library_versions()}

    def _select(self, scores: torch.Tensor) -> int:
        """How many of the (score-sorted) detections to keep."""
        confident = int((scores >= self.options.score_threshold).sum())
        return min(len(scores), max(self.options.min_boxes, min(confident, self.options.max_boxes)))

    @torch.no_grad()
    def __call__(self, images: Sequence[LoadedImage]) -> list[RegionFeatures]:
        model = self.model
        batch, _ = model.transform(image_tensors(images, self.device))
        stages = model.backbone.body(batch.tensors)  # C2..C5
        pyramid = model.backbone.fpn(stages)
        proposals, _ = model.rpn(batch, pyramid)
        detections, _ = model.roi_heads(pyramid, proposals, batch.image_sizes)
        kept = []
        for (height, width), found in zip(batch.image_sizes, detections):
            n = self._select(found["scores"])
            if n == 0:
                whole = torch.tensor([[0.0, 0.0, float(width), float(height)]], device=self.device)
                kept.append((whole, torch.zeros(1, dtype=torch.long), torch.zeros(1)))
            else:
                kept.append((found["boxes"][:n], found["labels"][:n].cpu(), found["scores"][:n].cpu()))
        roi_align = torchvision().ops.roi_align
        pooled = roi_align(stages[list(stages)[-1]], [boxes for boxes, _, _ in kept], self.options.pool,
                           spatial_scale=1.0 / STRIDE, sampling_ratio=2, aligned=True).mean((2, 3)).cpu().numpy()
        out, start = [], 0
        for image, (height, width), (boxes, labels, scores) in zip(images, batch.image_sizes, kept):
            scale = torch.tensor([image.width / width, image.height / height] * 2, device=boxes.device)
            stop = start + len(boxes)
            out.append(RegionFeatures(pooled[start:stop], (boxes * scale).cpu().numpy().astype(np.float32),
                                      image.width, image.height, classes=labels.numpy().astype(np.int64),
                                      scores=scores.numpy().astype(np.float32)))
            start = stop
        return out
