"""Run the ``vlattn`` command in a child process that stops at a chosen point, for tests that kill it (kill -9) or
send it real signals.

    python -m tests.training.subproc --ready FILE --hook HOOK [--rank R] -- train --config ... --out ...

:class:`Child` starts it from a test. When the child reaches the point named by ``HOOK`` it writes its PID into ``FILE`` and then:

- ``step:K``            waits forever inside training step K (the test kills it or takes the run's lock);
- ``signal:K``          waits inside step K until a SIGINT/SIGTERM has reached the trainer, then finishes the
                        step (so the run stops at the boundary after step K);
- ``signals:K``         as ``signal:K``, then writes ``FILE.2`` and waits for a second signal;
- ``checkpoint:N``      waits forever inside the N-th checkpoint write (the weights written, the rest not);
- ``swap:N``            waits forever between the two renames that swap the N-th checkpoint into place;
- ``store:N``           waits forever before the N-th swap of a complete feature store or synthetic set
                        (``data convert``, ``data synth``) into place;
- ``storeswap:N``       waits forever between the two renames of that N-th swap (the replaced directory
                        moved aside, the new one not yet in place);
- ``storewait:N``       waits before that N-th swap until the file ``FILE.go`` exists, then goes on
                        (:meth:`Child.go`).

``--rank R``: under torchrun only rank R stops (the other ranks run on).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from collections.abc import Sequence
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]
RECEIVED = {"signals": 0}


def ready(file: Path) -> None:
    tmp = file.with_name(file.name + ".part")
    tmp.write_text(str(os.getpid()))
    tmp.replace(file)


def wait_forever() -> None:
    while True:
        time.sleep(0.05)


def wait_for_file(file: Path) -> None:
    deadline = time.monotonic() + 300
    while not file.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{file} never appeared")
        time.sleep(0.01)


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


def on_call(owner: Any, name: str, number: int, action: Callable[[], None]) -> None:
    """Run ``action`` before the ``number``-th call of ``owner.name``."""
    real, calls = getattr(owner, name), {"n": 0}

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == number:
            action()
        return real(*args, **kwargs)

    setattr(owner, name, wrapped)


def between_renames(owner: Any, number: int, file: Path) -> None:
    """Stop the ``number``-th ``owner.replace_dir`` call between its two renames (the old directory moved aside,
    the new one not yet in place)."""
    import vlattn.io

    real_replace_dir, calls = vlattn.io.replace_dir, {"n": 0}

    def replace_dir(tmp: Path, path: Path, *args: Any) -> None:
        calls["n"] += 1
        if calls["n"] == number:
            on_call(vlattn.io, "rename_noreplace", 2, lambda: (ready(file), wait_forever()))
        real_replace_dir(tmp, path, *args)

    owner.replace_dir = replace_dir


def install(hook: str, file: Path) -> None:
    import vlattn.data.features.storage as storage
    import vlattn.training.checkpoint as checkpoint
    from vlattn.training.loop import Trainer

    kind, _, value = hook.partition(":")
    number = int(value)
    if kind in ("step", "signal", "signals"):
        count_signals()

        def at_step() -> None:
            ready(file)
            if kind == "step":
                wait_forever()
            wait_for_signals(1)
            if kind == "signals":
                ready(file.with_name(file.name + ".2"))
                wait_for_signals(2)

        on_call(Trainer, "_step", number, at_step)  # any task: the trainer's step, before it runs
    elif kind == "checkpoint":
        # ``checkpoint.save_config`` is called by checkpoint writes only (run directories import vlattn.config's)
        on_call(checkpoint, "save_config", number, lambda: (ready(file), wait_forever()))
    elif kind == "swap":
        between_renames(checkpoint, number, file)
    elif kind == "storeswap":
        between_renames(storage, number, file)
    elif kind == "store":
        on_call(storage, "replace_dir", number, lambda: (ready(file), wait_forever()))
    elif kind == "storewait":
        on_call(storage, "replace_dir", number, lambda: (ready(file), wait_for_file(file.with_name(file.name + ".go"))))
    else:
        raise SystemExit(f"unknown hook {hook!r}")


class Child:
    """``vlattn ARGS`` in a child process that stops at ``hook`` (see the module docstring). ``launcher``: the
    Python arguments before this module's name (e.g. torchrun's, ending in ``-m``); ``rank``: as ``--rank``."""

    def __init__(self, tmp_path: Path, hook: str, *args: str, launcher: Sequence[str] = ("-m",),
                 rank: int | None = None) -> None:
        self.ready = tmp_path / f"ready-{hook.replace(':', '-')}-{time.monotonic_ns()}"
        ranks = [] if rank is None else ["--rank", str(rank)]
        command = [sys.executable, *launcher, "tests.training.subproc", "--ready", str(self.ready), "--hook", hook,
                   *ranks, "--", *args]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True)

    def wait_ready(self, suffix: str = "") -> int:
        """Wait until the child reached its hook; returns the PID that wrote the ready file."""
        file = self.ready.with_name(self.ready.name + suffix)
        deadline = time.monotonic() + 300
        while not file.exists():
            if self.process.poll() is not None:
                raise AssertionError(f"child exited with {self.process.returncode} before its hook: "
                                     f"{self.process.stderr.read()}")
            assert time.monotonic() < deadline, "child never reached its hook"
            time.sleep(0.02)
        return int(file.read_text())

    def go(self) -> None:
        """Let a child stopped at a ``storewait`` hook go on."""
        self.ready.with_name(self.ready.name + ".go").write_text("go")

    def finish(self) -> tuple[int, str]:
        _, err = self.process.communicate(timeout=300)
        return self.process.returncode, err

    def kill(self) -> None:
        self.process.kill()  # SIGKILL: no handler, no cleanup
        self.process.communicate(timeout=60)


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
