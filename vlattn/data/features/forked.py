"""Forked worker processes for CPU-bound parsing, ended without killing any of them.

``multiprocessing.Pool``'s teardown (its context manager, ``terminate()``) kills the workers that are still busy when
the work stops early, as it does when a line of a TSV fails. A worker killed while it sends a result to the main
process holds the result queue's lock for ever, and the teardown's own threads then wait for that lock: a conversion
that should end with a one-line error hangs instead (about one run in twenty of a failing 2-process conversion).
:class:`~concurrent.futures.ProcessPoolExecutor` ends differently: the tasks already handed to a worker finish (one
block or chunk each), the others are cancelled, and the workers leave on their own.
"""

from __future__ import annotations

import contextlib
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Callable, Iterator


@contextlib.contextmanager
def forked_workers(jobs: int, initializer: Callable[..., None], initargs: tuple[Any, ...]) -> Iterator[ProcessPoolExecutor]:
    """``jobs`` processes forked from this one (``initargs`` are inherited, not pickled), each set up by
    ``initializer``; on leaving, whether by an error or not, the tasks not started are cancelled and the workers
    joined after their running tasks."""
    executor = ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork"), initializer=initializer,
                                   initargs=initargs)
    try:
        yield executor
    finally:
        executor.shutdown(wait=True, cancel_futures=True)
