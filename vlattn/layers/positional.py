"""Sinusoidal encodings (Vaswani et al. 2017, Sec. 3.5):
PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)).

:func:`sinusoidal_encoding` encodes any real positions (NG-SAN's "absolute" geometry baseline encodes box
coordinates with it, :mod:`vlattn.layers.boxes`); :class:`SinusoidalPositions` holds the table of integer
positions 0..max-1 for word sequences.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def sinusoidal_encoding(positions: Tensor, d_model: int) -> Tensor:
    """Encodings (..., d_model) of real ``positions`` (...): sines in the even channels, cosines in the odd."""
    frequency = torch.exp(
        torch.arange(0, d_model, 2, dtype=torch.float32, device=positions.device) * (-math.log(10000.0) / d_model)
    )  # (ceil(d/2),)
    angles = positions.to(torch.float32)[..., None] * frequency  # (..., ceil(d/2))
    table = torch.zeros(*positions.shape, d_model, device=positions.device)
    table[..., 0::2] = torch.sin(angles)
    table[..., 1::2] = torch.cos(angles[..., : d_model // 2])
    return table


def sinusoidal_positions(length: int, d_model: int) -> Tensor:
    """The (length, d_model) table of sinusoidal encodings for positions 0..length-1."""
    return sinusoidal_encoding(torch.arange(length), d_model)


class SinusoidalPositions(nn.Module):
    """Fixed (non-trainable, not saved) encodings: ``forward(length, start=0) -> (length, d_model)``."""

    def __init__(self, d_model: int, max_positions: int) -> None:
        super().__init__()
        self.register_buffer("table", sinusoidal_positions(max_positions, d_model), persistent=False)

    def forward(self, length: int, start: int = 0) -> Tensor:
        """Encodings of positions start..start+length-1, (length, d_model)."""
        if start + length > self.table.shape[0]:
            raise ValueError(f"position {start + length - 1} exceeds max_positions {self.table.shape[0]}")
        return self.table[start : start + length]
