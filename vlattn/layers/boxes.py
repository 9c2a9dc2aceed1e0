"""Absolute box geometry at the encoder input, two ways:

- ``model.box_input``: appending the normalised box ``(x1, y1, x2, y2, w * h)`` to every region feature (as
  self-critical.pytorch's ``use_box`` and the MCAN/OpenVQA bottom-up pipelines do) lets a captioner talk
  about positions ("at the top", "left of"); :func:`with_box_channels`.
- ``model.box_encoding: sinusoidal``: NG-SAN's "absolute" baseline (Sec. 5.3, Table 4): the box centre,
  width and height, normalised by the image size, embedded "to a sinusoidal representation using the same
  method as the positional encodings" and added to the projected region features; no parameters.
  Each of (x, y, w, h) gets d/4 channels, encoded at position ``value * BOX_POSITION_SCALE``: the paper
  gives no scale, and positions in [0, 1] would leave all but the fastest sinusoids constant, so one image
  side spans 100 positions (the factor Relation Networks apply to box geometry before its sinusoids);
  :class:`SinusoidalBoxEncoding`.

Boxes arrive normalised to [0, 1] (``vlattn.data.regions.normalize_boxes``).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from vlattn.layers.positional import sinusoidal_encoding

BOX_CHANNELS = 5
BOX_POSITION_SCALE = 100.0


def box_channels(boxes: Tensor) -> Tensor:
    """Normalised boxes (B, N, 4) x1y1x2y2 -> (B, N, 5): the four coordinates and the relative area."""
    area = (boxes[..., 2] - boxes[..., 0]) * (boxes[..., 3] - boxes[..., 1])  # (B, N)
    return torch.cat([boxes, area[..., None]], dim=-1)


def with_box_channels(features: Tensor, boxes: Tensor) -> Tensor:
    """features (B, N, D), boxes (B, N, 4) -> (B, N, D + 5)."""
    return torch.cat([features, box_channels(boxes).to(features.dtype)], dim=-1)


class SinusoidalBoxEncoding(nn.Module):
    """``forward(boxes (B, N, 4) normalised x1y1x2y2) -> (B, N, d_model)``: sinusoidal encodings of the centre
    x, centre y, width and height (d_model / 4 channels each, in that order). No parameters."""

    def __init__(self, d_model: int, scale: float = BOX_POSITION_SCALE) -> None:
        super().__init__()
        if d_model % 4:
            raise ValueError(f"the sinusoidal box encoding needs d_model divisible by 4, got {d_model}")
        self.d_model = d_model
        self.scale = scale

    def forward(self, boxes: Tensor) -> Tensor:
        x1, y1, x2, y2 = boxes.unbind(-1)
        geometry = torch.stack([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1], dim=-1)  # (B, N, 4)
        encoded = sinusoidal_encoding(geometry * self.scale, self.d_model // 4)  # (B, N, 4, d/4)
        return encoded.flatten(-2).to(boxes.dtype)  # (B, N, d)
