"""Suite-wide settings: one torch thread (tiny models gain nothing from more, and several OpenMP threads
on a busy 2-core machine spin against each other), and the size of the `slow` end-to-end checks."""

from __future__ import annotations

import os

import torch

torch.set_num_threads(1)

# `make test` runs the `slow` checks at a reduced size; set VLATTN_SLOW_SCALE=1 for the full size.
SLOW_SCALE = float(os.environ.get("VLATTN_SLOW_SCALE", "0.25"))
