"""Run logging: ``metrics.jsonl`` always, TensorBoard when installed, one line per record."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any


class RunLog:
    """Append-only JSON-lines log of a run (plus TensorBoard scalars when ``tensorboard`` is installed).

    Each record is flushed at once so a killed run keeps everything it logged. ``enabled=False``
    (non-zero ranks) makes every call a no-op.
    """

    def __init__(self, run_dir: str | Path, *, enabled: bool = True) -> None:
        self.enabled = enabled
        self._writer = None
        self._file = None
        if not enabled:
            return
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        self._file = open(run_dir / "metrics.jsonl", "a", encoding="utf-8")
        try:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(str(run_dir / "tensorboard"))
        except ImportError:  # tensorboard is optional
            self._writer = None

    def write(self, kind: str, step: int, **values: Any) -> None:
        """Record ``values`` (numbers or strings) under ``kind`` ("train", "val", ...) at ``step``."""
        if not self.enabled or self._file is None:
            return
        record = {"kind": kind, "step": step, "time": round(time.time(), 3), **values}
        self._file.write(json.dumps(record, allow_nan=True) + "\n")
        self._file.flush()
        if self._writer is not None:
            for key, value in values.items():
                if isinstance(value, (int, float)) and math.isfinite(value):
                    self._writer.add_scalar(f"{kind}/{key}", value, step)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None
