"""Sinusoidal encodings and positional encodings of decoder tokens.

- :func:`sinusoidal_encoding` (Vaswani et al. 2017, Sec. 3.5):
  PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)) of any real positions
  (NG-SAN's "absolute" geometry baseline encodes box coordinates with it, :mod:`vlattn.layers.boxes`).
- :class:`SinusoidalPositions`: the fixed (not saved) table of integer positions 0..max-1 for word sequences.
- :class:`PositionTable`: a frozen, *saved* table of ``max_positions + 1`` rows whose row 0 is reserved for
  padding and whose position p (0 = the first input token, BOS) reads row p + 1 — the layout of the released
  M2 code's ``nn.Embedding`` position table (see :mod:`vlattn.models.m2`). It starts as the sinusoidal
  table of positions 0..max with row 0 zeroed; the released model-wide Xavier pass (``init: official``)
  overwrites it, and an imported checkpoint brings its own rows.
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
    if torch.empty(0).device.type == "meta":  # config validation builds models there: shape only, no data
        return torch.empty(length, d_model)
    # computed on the CPU inside any other device context (``arange`` on the meta device would import
    # torch._dynamo, seconds of start-up for every command)
    return sinusoidal_encoding(torch.arange(length, device=torch.device("cpu")), d_model)


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


class PositionTable(nn.Module):
    """Frozen (no gradient) but saved encodings: ``forward(length, start=0)`` returns rows
    start+1..start+length of the (max_positions + 1, d_model) buffer ``table`` (row 0: padding position)."""

    def __init__(self, d_model: int, max_positions: int) -> None:
        super().__init__()
        table = sinusoidal_positions(max_positions + 1, d_model)
        table[0] = 0.0
        self.register_buffer("table", table)

    def forward(self, length: int, start: int = 0) -> Tensor:
        """Encodings of positions start..start+length-1, (length, d_model)."""
        if start + length >= self.table.shape[0]:
            raise ValueError(f"position {start + length - 1} exceeds max_positions {self.table.shape[0] - 1}")
        return self.table[start + 1 : start + length + 1]
