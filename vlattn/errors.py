"""Project-wide exception types.

Every error caused by bad user input (a file, an id, a caption, a config key) is raised as a
:class:`VlattnError` subclass whose message names the file and the item, so the CLI can print one
clear line instead of a traceback from deep inside torch or h5py.
"""

from __future__ import annotations


class VlattnError(Exception):
    """Base class for errors about user input that the CLI reports as one line."""


class DataError(VlattnError):
    """Bad or missing data: a file, an image id, a feature array, a caption, an answer."""

    def __init__(self, message: str, *, path: object | None = None, item: object | None = None) -> None:
        parts = []
        if path is not None:
            parts.append(f"{path}")
        if item is not None:
            parts.append(f"item {item!r}")
        prefix = ": ".join(parts)
        super().__init__(f"{prefix}: {message}" if prefix else message)
        self.path = path
        self.item = item


def one_line(err: BaseException, limit: int = 300) -> str:
    """The message of ``err`` on one line, cut to ``limit`` characters (for quoting a library's error)."""
    text = " ".join(str(err).split())
    return text if len(text) <= limit else text[:limit] + "..."


class WriteError(VlattnError):
    """Writing a file or directory failed (disk full, a file-size limit, a read-only or forbidden place):
    ``<path>: cannot write: <reason>``. What was there before is kept."""

    def __init__(self, path: object, reason: BaseException | str) -> None:
        if isinstance(reason, OSError):
            reason = reason.strerror or str(reason)
        text = " ".join(str(reason).split()) or "write failed"
        super().__init__(f"{path}: cannot write: {text}")
        self.path = path
        self.reason = text


class ConfigError(VlattnError):
    """A config file or override that does not match the config dataclasses."""


class TrainingDiverged(VlattnError):
    """A training step gave a non-finite loss (NaN or infinity): the settings (learning rate, data) make the
    optimisation diverge; the step is not applied."""


class TrainingInterrupted(Exception):
    """Training stopped by SIGINT (Ctrl-C) or SIGTERM. After the first signal the run saves its ``last`` checkpoint
    at the next step boundary (``saved``); a second signal stops it at once (the previous checkpoint stays).
    ``exit_status`` is the shell's convention for a signal, 128 + its number (SIGINT 130, SIGTERM 143)."""

    def __init__(self, signum: int, *, saved: bool, step: int | None = None, epoch: int | None = None,
                 run_dir: object | None = None) -> None:
        super().__init__()
        self.signum, self.saved, self.step, self.epoch, self.run_dir = signum, saved, step, epoch, run_dir

    @property
    def exit_status(self) -> int:
        return 128 + self.signum

    def __str__(self) -> str:
        import signal

        name = signal.Signals(self.signum).name
        if self.run_dir is None:
            where, resume = "", "resume the run to continue"
        else:
            where, resume = f" in {self.run_dir}/checkpoints/last", f"continue with: vlattn train --out {self.run_dir} --resume"
        if self.saved:
            return f"stopped by {name} at step {self.step} (epoch {(self.epoch or 0) + 1}): checkpoint saved{where}; {resume}"
        return f"stopped at once by a second {name}, without saving: the last complete checkpoint stays; {resume}"
