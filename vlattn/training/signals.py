"""SIGINT (Ctrl-C) and SIGTERM during training: stop at the next step boundary with a resumable checkpoint.

While :class:`StopSignals` is active (in the main thread), the first SIGINT or SIGTERM only records the signal;
the trainer looks at :attr:`StopSignals.signum` after every step (all ranks agree on it), saves its ``last``
checkpoint and raises :class:`~vlattn.errors.TrainingInterrupted`. A second signal raises it at once, wherever
the process is: a checkpoint being written is abandoned (checkpoints are swapped in whole, so the previous one
stays). DataLoader workers ignore both signals (:func:`ignore_stop_signals`) and are shut down by the main
process, so a Ctrl-C that reaches the whole process group does not kill them under the trainer.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType
from typing import Any

from vlattn.errors import TrainingInterrupted

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopSignals:
    """Context manager turning SIGINT/SIGTERM into a stop request (:attr:`signum`, 0 while none)."""

    def __init__(self) -> None:
        self.signum = 0
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():  # handlers can only be set there
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum:
            raise TrainingInterrupted(signum, saved=False)
        self.signum = signum


def ignore_stop_signals(worker_id: int) -> None:
    """DataLoader ``worker_init_fn``: leave SIGINT/SIGTERM to the main process."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
