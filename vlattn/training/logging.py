"""Run logging: ``metrics.jsonl`` always, TensorBoard when installed, one line per record."""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import time
from pathlib import Path
from typing import Any

from vlattn.errors import WriteError
from vlattn.io import atomic_write_text, writing

LOG_FILE = "metrics.jsonl"


def read_records(path: Path) -> list[dict[str, Any]]:
    """The complete records of a ``metrics.jsonl`` in order, up to the first line that is not one (a line a kill
    cut short)."""
    records: list[dict[str, Any]] = []
    if not path.is_file():
        return records
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            break
        if not isinstance(record, dict):
            break
        records.append(record)
    return records


class RunLog:
    """Append-only JSON-lines log of a run (plus TensorBoard scalars when ``tensorboard`` is installed).

    Opening the log keeps the first ``keep`` records of an existing ``metrics.jsonl`` and drops the rest
    (rewritten atomically): a fresh run keeps none, a resumed run the records written before the checkpoint it
    resumes from (:attr:`records` is saved in every checkpoint), so each record appears once. ``purge_step``
    hides TensorBoard events from that step on (those of the attempt being replaced). Each record is flushed at
    once so a killed run keeps everything it logged. ``enabled=False`` (non-zero ranks) makes every call a no-op.
    """

    def __init__(self, run_dir: str | Path, *, enabled: bool = True, keep: int = 0, purge_step: int = 0) -> None:
        self.enabled = enabled
        self.records = 0
        self._writer = None
        self._file = None
        if not enabled:
            return
        run_dir = Path(run_dir)
        self._path = run_dir / LOG_FILE
        kept = read_records(self._path)[:keep]
        atomic_write_text(self._path, "".join(json.dumps(r, allow_nan=True) + "\n" for r in kept))
        self.records = len(kept)
        with writing(self._path):
            self._file = open(self._path, "ab", buffering=0)  # the file just written by this process (no link)
        try:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(str(run_dir / "tensorboard"), purge_step=purge_step)
        except ImportError:  # tensorboard is optional
            self._writer = None

    def write(self, kind: str, step: int, **values: Any) -> None:
        """Record ``values`` (numbers, strings or JSON-able containers) under ``kind`` ("train", "val", ...) at
        ``step``."""
        if not self.enabled or self._file is None:
            return
        record = {"kind": kind, "step": step, "time": round(time.time(), 3), **values}
        data, end = (json.dumps(record, allow_nan=True) + "\n").encode("utf-8"), self._file.tell()
        try:
            if self._file.write(data) != len(data):
                raise OSError(errno.ENOSPC, "the record was written only in part")
        except OSError as err:  # disk full: cut the partial record, so the log stays whole lines
            with contextlib.suppress(OSError):
                os.ftruncate(self._file.fileno(), end)
            raise WriteError(self._path, err) from None
        self.records += 1
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
