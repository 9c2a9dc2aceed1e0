"""Rows of batched decoding: B images, each with ``group`` consecutive rows (beams or samples), R = B g rows in all.
The decoders keep rows grouped this way; models use it to drop the rows of finished images from their states."""

from __future__ import annotations

import torch
from torch import Tensor


def image_rows(images: Tensor, group: int) -> Tensor:
    """Rows (len(images) g,) of ``images`` (n,) when each image has ``group`` consecutive rows."""
    return (images[:, None] * group + torch.arange(group, device=images.device)).reshape(-1)
