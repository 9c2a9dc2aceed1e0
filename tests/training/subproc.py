"""Run the ``vlattn`` command in a child process that stops at a chosen point, for tests that kill it (kill -9) or
send it real signals.

    python -m tests.training.subproc --ready FILE --hook HOOK [--rank R] -- train --config ... --out ...

When the child reaches the point named by ``HOOK`` it writes its PID into ``FILE`` and then:

- ``step:K``            waits forever inside training step K (the test kills it or takes the run's lock);
- ``signal:K``          waits inside step K until a SIGINT/SIGTERM has reached the trainer, then finishes the
                        step (so the run stops at the boundary after step K);
- ``signals:K``         as ``signal:K``, then writes ``FILE.2`` and waits for a second signal;
- ``checkpoint:N``      waits forever inside the N-th checkpoint write (model and config written, the rest not);
- ``swap:N``            waits forever between the two renames that swap the N-th checkpoint into place.

``--rank R``: under torchrun only rank R stops (the other ranks run on).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable

RECEIVED = {"signals": 0}


def ready(file: Path) -> None:
    tmp = file.with_name(file.name + ".part")
    tmp.write_text(str(os.getpid()))
    tmp.replace(file)


def wait_forever() -> None:
    while True:
        time.sleep(0.05)


def wait_for_signals(count: int) -> None:
    deadline = time.monotonic() + 300
    while RECEIVED["signals"] < count:
        if time.monotonic() > deadline:
            raise RuntimeError("no signal arrived")
        time.sleep(0.01)


def count_signals() -> None:
    """Chain a counter in front of every SIGINT/SIGTERM handler the trainer installs."""
    real = signal.signal

    def chained(sig: int, handler: Any) -> Any:
        if callable(handler) and sig in (signal.SIGINT, signal.SIGTERM):
            def counting(signum: int, frame: Any) -> None:
                RECEIVED["signals"] += 1
                handler(signum, frame)

            return real(sig, counting)
        return real(sig, handler)

    signal.signal = chained  # type: ignore[assignment]


def on_call(owner: Any, name: str, number: int, action: Callable[[], None], *, after: bool = False) -> None:
    """Run ``action`` at the ``number``-th call of ``owner.name`` (before the call, or after it with ``after``)."""
    real, calls = getattr(owner, name), {"n": 0}

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == number and not after:
            action()
        result = real(*args, **kwargs)
        if calls["n"] == number and after:
            action()
        return result

    setattr(owner, name, wrapped)


def install(hook: str, file: Path) -> None:
    import vlattn.io
    import vlattn.training.checkpoint as checkpoint
    from vlattn.tasks import captioning

    kind, _, value = hook.partition(":")
    number = int(value)
    if kind in ("step", "signal", "signals"):
        count_signals()
        real = captioning.xe_objective

        def objective(**kwargs: Any) -> Any:
            inner, calls = real(**kwargs), {"n": 0}

            def step(model: Any, batch: Any) -> Any:
                calls["n"] += 1
                if calls["n"] == number:
                    ready(file)
                    if kind == "step":
                        wait_forever()
                    wait_for_signals(1)
                    if kind == "signals":
                        ready(file.with_name(file.name + ".2"))
                        wait_for_signals(2)
                return inner(model, batch)

            return step

        captioning.xe_objective = objective
    elif kind == "checkpoint":
        on_call(checkpoint, "save_vocabularies", number, lambda: (ready(file), wait_forever()))
    elif kind == "swap":
        real_replace_dir = vlattn.io.replace_dir
        calls = {"n": 0}

        def replace_dir(tmp: Path, path: Path) -> None:
            calls["n"] += 1
            if calls["n"] == number:
                on_call(vlattn.io.os, "replace", 2, lambda: (ready(file), wait_forever()))
            real_replace_dir(tmp, path)

        checkpoint.replace_dir = replace_dir
    else:
        raise SystemExit(f"unknown hook {hook!r}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ready", type=Path, required=True)
    parser.add_argument("--hook", required=True)
    parser.add_argument("--rank", type=int, default=None)
    args, command = parser.parse_known_args()
    if command[:1] == ["--"]:
        command = command[1:]
    if args.rank is None or int(os.environ.get("RANK", "0")) == args.rank:
        install(args.hook, args.ready)
    from vlattn.cli import main as vlattn_main

    sys.argv = ["vlattn", *command]
    vlattn_main()


if __name__ == "__main__":
    main()
