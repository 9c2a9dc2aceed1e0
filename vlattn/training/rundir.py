"""Run directories: one writer at a time, recovery after a crash, and the configuration of a resumed run.

Files of a run directory besides those :mod:`vlattn.training.stage` lists::

    RUN_DIR/.vlattn.json    marker: a run directory written by vlattn (``kind: run``)
    RUN_DIR/.lock           lock file: the training process (rank 0 under torchrun) holds an OS lock on it
                            (``flock``) and has written its PID into it; the OS releases the lock when the
                            process ends, however it ends (kill -9 included)
    RUN_DIR/history.jsonl   one record per ``vlattn train`` that started in the run: fresh or resumed, the
                            checkpoint resumed from, every setting that differs from that checkpoint's config
                            and where the change came from, what recovery found

Rules:

- One ``vlattn train`` per run directory: a second one exits 2 naming the PID that holds the lock. Forked
  children (DataLoader workers) close their copy of the lock, so it dies with the training process.
- A fresh start needs a new or empty directory, or a run directory without a complete checkpoint (a run whose
  first checkpoint write was killed): its leftovers are cleaned and the run starts again. A directory with a
  complete checkpoint needs ``--resume``; a non-empty directory that is not a run is refused.
- Before anything else, recovery finishes a checkpoint swap that a crash cut between its two renames and deletes
  the temporaries of killed writers (:func:`vlattn.training.checkpoint.recover_checkpoint`).
- ``--resume`` continues from ``checkpoints/last`` (``best`` if a crash left only that; both are written at the
  end of an epoch, ``best`` first). With no complete checkpoint at all it starts the run over, saying so.
- A resumed run keeps its configuration (:func:`resume_config`): the run's ``config.yaml``, changed only by
  ``--set`` (task, model and data are fixed; ``data.root``, ``data.num_workers`` and ``data.region_cache_mb`` may
  change). A ``--config`` given on resume is checked against the run (task, model and data must agree) and its other values are
  ignored, each reported. Every setting that differs from the resumed checkpoint's config is reported.
- A command that fails leaves the run's files as they were: ``config.yaml``, the vocabularies, the marker and
  ``metrics.jsonl`` are (re)written only once every check has passed (:meth:`RunDirectory.commit`), each
  atomically; a directory created by a command that fails before that is removed again.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from vlattn.config import (
    Config,
    apply_overrides,
    config_from_dict,
    config_to_dict,
    load_config,
    override_key,
    save_config,
)
from vlattn.errors import ConfigError, DataError, VlattnError
from vlattn.io import MARKER, atomic_write_text, marker_kind, remove_paths, stale_temporaries_in, temporary_target, write_marker
from vlattn.training.checkpoint import (
    NamedVocabulary,
    is_complete,
    load_checkpoint,
    recover_checkpoint,
    save_vocabularies,
    vocabulary_file,
    vocabulary_hash,
)
from vlattn.training.logging import read_records

LOG = logging.getLogger("vlattn.training")
LOCK_FILE = ".lock"
RUN_KIND = "run"
CONFIG_FILE = "config.yaml"
HISTORY_FILE = "history.jsonl"
CHECKPOINTS = "checkpoints"
RESUMABLE = ("last", "best")  # checkpoints a run resumes from, in order of preference
FIXED_ON_RESUME = ("task", "model", "data")  # config sections a resumed run keeps ...
# ... except where the data is and how it is read
MOVABLE_ON_RESUME = ("data.root", "data.num_workers", "data.region_cache_mb")

_held_locks: set[int] = set()


def _close_inherited_locks() -> None:
    """In a forked child: close the copies of the locks the parent holds (the lock must end with the parent)."""
    for fd in _held_locks:
        with contextlib.suppress(OSError):
            os.close(fd)
    _held_locks.clear()


os.register_at_fork(after_in_child=_close_inherited_locks)


def _holder(fd: int) -> str:
    """The PID written into a lock file ('unknown' while its holder has not written it yet)."""
    text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    return text if text.isdigit() else "unknown"


@contextlib.contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """Hold the OS lock of ``run_dir`` (an existing directory), or raise naming the process that holds it."""
    lock = run_dir / LOCK_FILE
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise VlattnError(f"{run_dir}: run directory is in use by process {holder} (another vlattn train); "
                              "wait for it to end or choose another --out") from None
        try:
            current = os.path.samestat(os.fstat(fd), os.stat(lock))
        except FileNotFoundError:
            current = False
        if current:  # not a lock file that a failed command removed while we waited for it
            break
        os.close(fd)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    _held_locks.add(fd)
    try:
        yield
    finally:
        _held_locks.discard(fd)
        os.close(fd)


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{dotted key: leaf value}`` of nested dicts (lists are leaves)."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, path + "."))
        else:
            flat[path] = value
    return flat


def _fixed(key: str) -> bool:
    return key.split(".")[0] in FIXED_ON_RESUME and key not in MOVABLE_ON_RESUME


@dataclass(frozen=True)
class Setting:
    """A setting of a resumed run that differs from the checkpoint it resumes: ``before`` (the checkpoint's),
    ``after`` (the run's now) and ``source``: ``--set``, ``config.yaml`` (the run's config differs from the
    checkpoint's: changed by an earlier resume that stopped before its next checkpoint, or edited) or
    ``--config (ignored)`` (a value of the given ``--config`` that the run does not take; ``after`` is the
    ignored value, ``before`` the one kept)."""

    key: str
    before: Any
    after: Any
    source: str

    def __str__(self) -> str:
        if self.source.endswith("(ignored)"):
            return f"{self.key}={self.after!r} of --config ignored: the run keeps {self.before!r} (use --set to change it)"
        return f"{self.key}: {self.before!r} -> {self.after!r} ({self.source})"


def resume_config(
    trained: Config, saved: Config, given: Config | None, overrides: Sequence[str]
) -> tuple[Config, list[Setting]]:
    """The configuration of a resumed run and the settings in which it differs from the checkpoint's.

    ``trained``: the config of the checkpoint resumed (its weights and training state were made with it);
    ``saved``: the run's ``config.yaml``; ``given``: the ``--config`` of the command (with ``overrides``
    applied), or None; ``overrides``: the ``--set`` items, applied to ``saved``. Task, model and data (but
    ``data.root``, ``data.num_workers``, ``data.region_cache_mb``) must stay those of ``trained``: a ``ConfigError``
    otherwise.
    """
    try:
        effective = config_from_dict(apply_overrides(config_to_dict(saved), list(overrides)))
    except ConfigError as err:
        raise ConfigError(f"--set: {err}") from None
    set_keys = [override_key(item) for item in overrides]
    before, after = _flatten(config_to_dict(trained)), _flatten(config_to_dict(effective))
    settings = []
    for key in sorted(set(before) | set(after)):
        if before.get(key) == after.get(key):
            continue
        source = "--set" if any(key == k or key.startswith(k + ".") for k in set_keys) else CONFIG_FILE
        if _fixed(key):
            raise ConfigError(f"cannot resume with {key}={after.get(key)!r} ({source}): the run was trained with "
                              f"{before.get(key)!r}; task, model and data are fixed for a run (start a new run with "
                              "--init to reuse its weights)")
        settings.append(Setting(key, before.get(key), after.get(key), source))
    if given is not None:
        offered = _flatten(config_to_dict(given))
        for key in sorted(set(offered) | set(after)):
            if offered.get(key) == after.get(key):
                continue
            if _fixed(key):
                raise ConfigError(f"cannot resume: --config has {key}={offered.get(key)!r} but the run was trained "
                                  f"with {after.get(key)!r}; task, model and data are fixed for a run (leave out "
                                  "--config to continue the run as configured)")
            settings.append(Setting(key, after.get(key), offered.get(key), "--config (ignored)"))
    return effective, settings


@dataclass
class Start:
    """Where a run starts, as rank 0 found it under the lock: the config, the checkpoint resumed (None: from the
    beginning), the settings that differ from that checkpoint's config, and notes (recovery, starting over)."""

    config: Config
    resume_from: Path | None
    settings: list[Setting] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class RunDirectory:
    """A run directory (see the module docstring); ``path`` need not exist yet."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.committed = False

    @property
    def checkpoints(self) -> Path:
        return self.path / CHECKPOINTS

    def is_run(self) -> bool:
        """Marked as a run directory (or one written before the marker: ``config.yaml`` and ``checkpoints/``)."""
        marked = marker_kind(self.path)
        if marked is not None:
            return marked[0] == RUN_KIND
        return (self.path / CONFIG_FILE).is_file() and self.checkpoints.is_dir()

    def latest(self) -> Path | None:
        """The complete checkpoint a resumed run continues from (``last``, else ``best``), or None."""
        return next((self.checkpoints / n for n in RESUMABLE if is_complete(self.checkpoints / n)), None)

    def saved_config(self) -> Config | None:
        """The run's ``config.yaml``, or None when it has none."""
        return load_config(self.path / CONFIG_FILE) if (self.path / CONFIG_FILE).is_file() else None

    def recover(self) -> list[str]:
        """Finish interrupted checkpoint swaps and delete temporaries of killed writers (under the lock)."""
        notes = []
        names = set(RESUMABLE) | {temporary_target(e).name for e in stale_temporaries_in(self.checkpoints, include_own=True)}
        for name in sorted(names):
            note = recover_checkpoint(self.checkpoints / name)
            if note is not None:
                notes.append(note)
        for directory in (self.path, self.checkpoints):
            removed = remove_paths(stale_temporaries_in(directory, include_own=True))
            if removed:
                notes.append(f"{directory}: removed {len(removed)} leftover temporary file(s) of a killed writer")
        return notes

    def begin(self, given: Config | None, overrides: Sequence[str], *, resume: bool) -> Start:
        """Under the lock (rank 0): recover, then decide where the run starts and with which config."""
        notes = self.recover()
        latest = self.latest()
        if not resume:
            if latest is not None:
                raise VlattnError(f"{self.path}: run directory already has checkpoints; pass --resume to continue it "
                                  "or choose another --out")
            foreign = sorted(e.name for e in self.path.iterdir() if e.name not in (LOCK_FILE, MARKER))
            if foreign and not self.is_run():
                raise VlattnError(f"{self.path}: not a vlattn run directory and not empty (it holds "
                                  f"{', '.join(foreign[:5])}); choose a new or empty --out")
            if foreign:
                notes.append(f"{self.path}: no complete checkpoint: starting the run afresh over an earlier attempt")
            return Start(self._required(given), None, notes=notes)
        if not self.is_run() and latest is None:
            raise VlattnError(f"{self.path}: nothing to resume: not a vlattn run directory")
        saved = self.saved_config()
        if latest is None:
            notes.append(f"{self.path}: no complete checkpoint (its first checkpoint write was interrupted): "
                         "starting the run over from the beginning")
            base = saved if saved is not None else self._required(given)
            config, settings = resume_config(base, base, given, overrides)
            return Start(config, None, settings, notes)
        trained = load_checkpoint(latest).config
        config, settings = resume_config(trained, saved if saved is not None else trained, given, overrides)
        return Start(config, latest, settings, notes)

    @contextlib.contextmanager
    def locked(self) -> Iterator[RunDirectory]:
        """Hold the run's lock (rank 0), creating the directory if need be. If the body fails before
        :meth:`commit`, a directory this call created is removed again."""
        created = [p for p in (self.path, *self.path.parents) if not p.exists()]
        self.path.mkdir(parents=True, exist_ok=True)
        try:
            with run_lock(self.path):
                yield self
        except BaseException:
            if created and not self.committed:
                with contextlib.suppress(OSError):
                    (self.path / LOCK_FILE).unlink()
                    for directory in created:
                        directory.rmdir()
            raise

    def _required(self, given: Config | None) -> Config:
        if given is None:
            raise ConfigError(f"{self.path}: no config.yaml to start the run from; pass --config")
        return given

    def check_vocabularies(self, hashes: Mapping[str, str], vocabularies: Mapping[str, NamedVocabulary]) -> None:
        """The run's own ``vocab-<name>.json`` copies must match the weights resumed (``hashes``)."""
        for name, vocab in vocabularies.items():
            file = self.path / vocabulary_file(name)
            if not file.is_file() or name not in hashes:
                continue
            actual = vocabulary_hash(type(vocab).load(file))
            if actual != hashes[name]:
                raise DataError(f"vocabulary does not match the weights of the checkpoint resumed (sha256 "
                                f"{actual[:12]}..., the weights were trained with {hashes[name][:12]}...); restore "
                                f"it from {CHECKPOINTS}/last/{vocabulary_file(name)}", path=file)

    def log_records(self, step: int) -> int:
        """How many leading records of ``metrics.jsonl`` were written at or before ``step`` (for checkpoints that
        did not count their records)."""
        records = read_records(self.path / "metrics.jsonl")
        return next((i for i, record in enumerate(records) if record.get("step", 0) > step), len(records))

    def commit(self, config: Config, vocabularies: Mapping[str, NamedVocabulary], start: Start, step: int,
               stage: str) -> None:
        """Every check passed: mark the directory, write ``config.yaml`` and the vocabularies, record the start."""
        write_marker(self.path, RUN_KIND)
        save_config(config, self.path / CONFIG_FILE)
        save_vocabularies(self.path, vocabularies)
        record = {
            "time": round(time.time(), 3), "stage": stage, "step": step, "pid": os.getpid(),
            "resumed_from": None if start.resume_from is None else str(start.resume_from.relative_to(self.path)),
            "settings": [asdict(s) for s in start.settings], "notes": start.notes,
        }
        history = self.path / HISTORY_FILE
        previous = history.read_text(encoding="utf-8") if history.is_file() else ""
        atomic_write_text(history, previous + json.dumps(record, default=repr) + "\n")
        self.committed = True


def report(start: Start) -> None:
    """Say on stderr (logger ``vlattn.training``) where the run starts and every setting that changed."""
    for note in start.notes:
        LOG.warning("%s", note)
    if start.resume_from is not None:
        LOG.warning("resuming from %s", start.resume_from)
    for setting in start.settings:
        LOG.warning("resume: %s", setting)
