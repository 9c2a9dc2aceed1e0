"""Absolute box geometry as extra region-feature channels.

Detector features encode *what* a region shows, not *where* it is. Appending the normalised box
``(x1, y1, x2, y2, w * h)`` to every region feature (as self-critical.pytorch's ``use_box`` and the
MCAN/OpenVQA bottom-up pipelines do) lets a captioner talk about positions ("at the top", "left of").
Enabled by ``model.box_input``; boxes arrive normalised to [0, 1] (``vlattn.data.regions.normalize_boxes``).
"""

from __future__ import annotations

import torch
from torch import Tensor

BOX_CHANNELS = 5


def box_channels(boxes: Tensor) -> Tensor:
    """Normalised boxes (B, N, 4) x1y1x2y2 -> (B, N, 5): the four coordinates and the relative area."""
    area = (boxes[..., 2] - boxes[..., 0]) * (boxes[..., 3] - boxes[..., 1])  # (B, N)
    return torch.cat([boxes, area[..., None]], dim=-1)


def with_box_channels(features: Tensor, boxes: Tensor) -> Tensor:
    """features (B, N, D), boxes (B, N, 4) -> (B, N, D + 5)."""
    return torch.cat([features, box_channels(boxes).to(features.dtype)], dim=-1)
