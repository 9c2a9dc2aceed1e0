"""Run directories: one writer at a time, recovery after a crash, and the configuration of a resumed run.

Files of a run directory besides those :mod:`vlattn.training.stage` lists::

    RUN_DIR/.vlattn.json    marker: a run directory written by vlattn (``kind: run``) and the run's random ``id``;
                            its checkpoints carry the same id as their ``owner``
    RUN_DIR/.lock           lock file, there while a ``vlattn train`` runs: it holds an OS lock on it
                            (``flock``; rank 0 under torchrun) and its first line reads ``vlattn run lock``, the
                            second the PID. The OS releases the lock when the process ends, however it ends
                            (kill -9 included); the file is removed when the command ends. A ``.lock`` vlattn did
                            not write (another first line, a symbolic link) is left untouched with an error
    RUN_DIR/history.jsonl   one record per ``vlattn train`` that started in the run: fresh or resumed, the
                            checkpoint resumed from, every setting that differs from that checkpoint's config
                            and where the change came from, what recovery found

Rules:

- One ``vlattn train`` per run directory: a second one exits 2 naming the PID that holds the lock. Forked
  children (DataLoader workers) close their copy of the lock, so it dies with the training process.
- A fresh start needs a new or empty directory, or a run directory without a complete checkpoint (a run whose
  first checkpoint write was killed): its leftovers are cleaned and the run starts again. A directory with a
  complete checkpoint needs ``--resume``; a non-empty directory that is not a run is refused before anything
  is created or changed in it.
- Once the directory is known to be a run (or empty) and locked, recovery finishes a checkpoint swap that a crash
  cut between its two renames and deletes the temporaries of killed writers, only those proven vlattn's by their
  marker (:func:`vlattn.training.checkpoint.recover_checkpoint`).
- ``--resume`` continues from ``checkpoints/last`` (``best`` if a crash left only that; both are written at the
  end of an epoch, ``best`` first). With no complete checkpoint at all it starts the run over, saying so.
- A resumed run keeps its configuration (:func:`resume_config`): the run's ``config.yaml``, changed only by
  ``--set`` (task, model and data are fixed; ``data.root``, ``data.num_workers`` and ``data.region_cache_mb`` may
  change, but ``data.root`` must hold the same data set: every checkpoint records its hashes and a resume on
  other data is refused). A ``--config`` given on resume is checked against the run (task, model and data must agree) and its other values are
  ignored, each reported. Every setting that differs from the resumed checkpoint's config is reported.
- A command that fails leaves the run's files as they were: ``config.yaml``, the vocabularies, the marker and
  ``metrics.jsonl`` are (re)written only once every check has passed (:meth:`RunDirectory.commit`), each
  atomically; a directory created by a command that fails before that is removed again.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import stat
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
from vlattn.io import (
    MARKER,
    atomic_write_text,
    make_temporary_dir,
    new_id,
    read_marker,
    remove_owned,
    remove_stale_temporaries_in,
    stale_temporaries_in,
    temporary_target,
    write_marker,
    writing,
)
from vlattn.training.checkpoint import (
    NamedVocabulary,
    is_complete,
    load_checkpoint,
    recover_checkpoint,
    save_vocabularies,
    vocabulary_file,
    vocabulary_hash,
)

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


LOCK_SIGNATURE = b"vlattn run lock\n"
_LOCK_SIZE = len(LOCK_SIGNATURE) + 21  # the signature, then the PID padded with spaces and a newline


def _holder(fd: int) -> str:
    """The PID written into a lock file ('unknown' while its holder has not written it yet)."""
    text = os.pread(fd, _LOCK_SIZE, 0)[len(LOCK_SIGNATURE):].decode("ascii", "replace").strip()
    return text if text.isdigit() else "unknown"


def _lock_text(pid: int | None) -> bytes:
    return LOCK_SIGNATURE + (str(pid) if pid else "").ljust(_LOCK_SIZE - len(LOCK_SIGNATURE) - 1).encode() + b"\n"


def _create_lock(lock: Path) -> None:
    """Create ``lock`` holding vlattn's signature from its first moment (written beside it, then hard-linked into
    place, which never replaces an existing file)."""
    tmp = make_temporary_dir(lock)
    try:
        (tmp / lock.name).write_bytes(_lock_text(None))
        with contextlib.suppress(FileExistsError):
            os.link(tmp / lock.name, lock)
    finally:
        remove_owned(tmp)


def _open_lock(lock: Path) -> int:
    """Open vlattn's lock file ``lock`` (created if missing); a link or a file vlattn did not write is refused."""
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_NOFOLLOW)
        except FileNotFoundError:
            _create_lock(lock)
            continue
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise VlattnError(f"{lock}: is a symbolic link; vlattn does not write through links it did not "
                                  "create: remove it or choose another --out") from None
            raise
        if stat.S_ISREG(os.fstat(fd).st_mode) and os.pread(fd, len(LOCK_SIGNATURE), 0) == LOCK_SIGNATURE:
            return fd
        os.close(fd)
        raise VlattnError(f"{lock}: not a lock file written by vlattn; vlattn leaves it as it is: remove it or "
                          "choose another --out")


@contextlib.contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """Hold the OS lock of ``run_dir`` (an existing directory), or raise naming the process that holds it. The
    lock file is removed again when the block ends."""
    lock = run_dir / LOCK_FILE
    with writing(lock):
        while True:
            fd = _open_lock(lock)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(fd)
                os.close(fd)
                raise VlattnError(f"{run_dir}: run directory is in use by process {holder} (another vlattn "
                                  "train); wait for it to end or choose another --out") from None
            try:
                current = os.path.samestat(os.fstat(fd), os.stat(lock, follow_symlinks=False))
            except FileNotFoundError:
                current = False
            if current:  # not a lock file that its previous holder removed while we opened it
                break
            os.close(fd)
        os.pwrite(fd, _lock_text(os.getpid()), 0)
    _held_locks.add(fd)
    try:
        yield
    finally:
        _held_locks.discard(fd)
        with contextlib.suppress(OSError):
            if os.path.samestat(os.fstat(fd), os.stat(lock, follow_symlinks=False)):
                lock.unlink()  # the file this process locked (checked above): vlattn's own
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
        """Marked as a run directory by vlattn (a marker of kind ``run`` with the run's id)."""
        return self.run_id is not None

    @property
    def run_id(self) -> str | None:
        """The random id in the run's marker, or None when the directory is not a marked run."""
        marker = None if self.path.is_symlink() else read_marker(self.path)
        if marker is None or marker["kind"] != RUN_KIND or not isinstance(marker.get("id"), str):
            return None
        return marker["id"]

    def check_claimable(self, resume: bool) -> None:
        """Refuse, before anything is created or changed in it, a directory that is neither a run nor empty (a
        fresh start) or not a run (``resume``)."""
        if self.is_run():
            return
        if resume:
            raise VlattnError(f"{self.path}: nothing to resume: not a vlattn run directory")
        if not os.path.lexists(self.path):
            return
        if self.path.is_symlink() or not self.path.is_dir():
            raise VlattnError(f"{self.path}: not a directory; choose a new or empty --out")
        foreign = sorted(e.name for e in self.path.iterdir() if e.name != LOCK_FILE)
        if foreign:
            raise VlattnError(f"{self.path}: not a vlattn run directory and not empty (it holds "
                              f"{', '.join(foreign[:5])}); choose a new or empty --out")

    def latest(self) -> Path | None:
        """The complete checkpoint a resumed run continues from (``last``, else ``best``), or None."""
        return next((self.checkpoints / n for n in RESUMABLE if is_complete(self.checkpoints / n)), None)

    def saved_config(self) -> Config | None:
        """The run's ``config.yaml``, or None when it has none."""
        return load_config(self.path / CONFIG_FILE) if (self.path / CONFIG_FILE).is_file() else None

    def recover(self) -> list[str]:
        """Finish interrupted checkpoint swaps and delete temporaries of killed writers (under the lock, in a
        directory known to be a run or empty; only temporaries proven vlattn's)."""
        notes = []
        names = set(RESUMABLE) | {temporary_target(e).name for e in stale_temporaries_in(self.checkpoints, include_own=True)}
        for name in sorted(names):
            note = recover_checkpoint(self.checkpoints / name)
            if note is not None:
                notes.append(note)
        for directory in (self.path, self.checkpoints):
            removed = remove_stale_temporaries_in(directory, include_own=True)
            if removed:
                notes.append(f"{directory}: removed {len(removed)} leftover temporary file(s) of a killed writer")
        return notes

    def begin(self, given: Config | None, overrides: Sequence[str], *, resume: bool) -> Start:
        """Under the lock (rank 0): check the directory is the run's, recover, then decide where the run starts
        and with which config."""
        self.check_claimable(resume)
        notes = self.recover()
        latest = self.latest()
        if not resume:
            if latest is not None:
                raise VlattnError(f"{self.path}: run directory already has checkpoints; pass --resume to continue it "
                                  "or choose another --out")
            if any(e.name not in (LOCK_FILE, MARKER) for e in self.path.iterdir()):
                notes.append(f"{self.path}: no complete checkpoint: starting the run afresh over an earlier attempt")
            return Start(self._required(given), None, notes=notes)
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
        with writing(self.path):
            self.path.mkdir(parents=True, exist_ok=True)
        try:
            with run_lock(self.path):
                yield self
        except BaseException:
            if created and not self.committed:
                with contextlib.suppress(OSError):
                    for directory in created:
                        directory.rmdir()  # created by this call; rmdir removes only an empty directory
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

    def commit(self, config: Config, vocabularies: Mapping[str, NamedVocabulary], start: Start, step: int,
               stage: str) -> None:
        """Every check passed: mark the directory (keeping the run's id), write ``config.yaml`` and the
        vocabularies, record the start."""
        if self.run_id is None:
            write_marker(self.path, RUN_KIND, id=new_id())
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
