"""Sinusoidal positional encodings (Vaswani et al. 2017, Sec. 3.5):
PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def sinusoidal_positions(length: int, d_model: int) -> Tensor:
    """The (length, d_model) table of sinusoidal encodings for positions 0..length-1."""
    position = torch.arange(length, dtype=torch.float32)[:, None]  # (L, 1)
    frequency = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    table = torch.zeros(length, d_model)
    table[:, 0::2] = torch.sin(position * frequency)
    table[:, 1::2] = torch.cos(position * frequency[: d_model // 2])
    return table


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
