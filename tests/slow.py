"""Sizes of the ``slow`` checks: ``make test`` runs them reduced, ``VLATTN_SLOW_SCALE=1`` at full size.

``VLATTN_SLOW_SCALE`` (default 0.25) multiplies the size of every test marked ``slow`` (corpus sizes, epochs);
0 skips those tests (see tests/conftest.py).
"""

from __future__ import annotations

import os


def _scale() -> float:
    raw = os.environ.get("VLATTN_SLOW_SCALE", "0.25")
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"VLATTN_SLOW_SCALE must be a number >= 0, got {raw!r}") from None
    if value < 0:
        raise ValueError(f"VLATTN_SLOW_SCALE must be a number >= 0, got {raw!r}")
    return value


SLOW_SCALE = _scale()


def scaled(full: int, minimum: int = 1) -> int:
    """The size of a ``slow`` check whose full size is ``full``: ``full * VLATTN_SLOW_SCALE``, at least ``minimum``."""
    return max(minimum, round(full * SLOW_SCALE))
