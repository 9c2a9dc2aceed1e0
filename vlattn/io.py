"""Atomic file writing: write to a temporary file in the same directory, fsync, then rename.

Temporary names are ``.<name>.<pid>.<random>.tmp`` next to the target (directories being replaced are moved
aside as ``.<name>.<pid>.<random>.old``). The writer's process id in the name lets a later run tell a leftover
of a killed writer (:func:`stale_temporaries`) from one that is still being written. Files and directories
get the permissions the user's umask allows, as if created with ``open``/``mkdir``.

A directory replaced as a whole (a feature store, a checkpoint) is written into a temporary directory and swapped
in by :func:`replace_dir`. Directories vlattn writes as a whole carry a marker file, :data:`MARKER`, naming their
kind (:func:`write_marker`, :func:`marker_kind`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

_RANDOM = "[a-z0-9_]{8}"  # tempfile's random part
MARKER = ".vlattn.json"


def umask() -> int:
    """The process umask (read without changing it where the OS allows)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def temporary_prefix(path: Path) -> str:
    """The name prefix of this process's temporaries for ``path``."""
    return f".{path.name}.{os.getpid()}."


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists but belongs to another user
        return True
    return True


def _pattern(name: str) -> re.Pattern[str]:
    """vlattn's temporary names of the file ``name`` (any name if empty): groups target name and process id."""
    target = re.escape(name) if name else ".+"
    return re.compile(rf"^\.({target})\.(\d+)\.{_RANDOM}\.(?:tmp|old)$")


def _temporaries(directory: Path, name: str, include_own: bool) -> list[Path]:
    """vlattn's temporaries in ``directory`` (of the file called ``name``; any name if ``name`` is empty) whose
    writer is gone."""
    if not directory.is_dir():
        return []
    pattern, own = _pattern(name), os.getpid()
    return sorted(
        entry
        for entry in directory.iterdir()
        if (match := pattern.match(entry.name))
        and (not _alive(pid := int(match.group(2))) or (include_own and pid == own))
        and not entry.is_symlink()
    )


def temporary_target(entry: Path) -> Path:
    """The path a vlattn temporary ``entry`` (``.<name>.<pid>.<random>.tmp``) was written for."""
    match = _pattern("").match(entry.name)
    if match is None:
        raise ValueError(f"{entry} is not a vlattn temporary name")
    return entry.with_name(match.group(1))


def stale_temporaries(path: str | Path, *, include_own: bool = False) -> list[Path]:
    """Leftovers of writers of ``path`` that were killed: vlattn's temporary names whose process is gone.

    ``include_own``: this process has not written ``path`` yet, so temporaries named with its own process id
    are a previous process's that had the same id (a restarted container) and are stale too.
    """
    path = Path(path)
    return _temporaries(path.parent, path.name, include_own)


def stale_temporaries_in(directory: str | Path, *, include_own: bool = False) -> list[Path]:
    """:func:`stale_temporaries` of every file in ``directory``."""
    return _temporaries(Path(directory), "", include_own)


def remove_paths(paths: Iterable[Path]) -> list[Path]:
    """Delete files and directory trees (leftovers found by :func:`stale_temporaries`); returns them."""
    removed = list(paths)
    for entry in removed:
        if entry.is_dir():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    return removed


def remove_stale_temporaries(path: str | Path) -> list[Path]:
    """Delete :func:`stale_temporaries` of ``path``; returns what was removed."""
    return remove_paths(stale_temporaries(path))


def swap_partner(tmp: Path) -> Path:
    """The name under which :func:`replace_dir` keeps the replaced directory while it swaps ``tmp`` in."""
    return tmp.with_name(tmp.name[: -len(".tmp")] + ".old")


def replace_dir(tmp: Path, path: Path) -> None:
    """Make the complete directory ``tmp`` (from :func:`make_temporary_dir`) ``path``: an existing ``path`` is moved
    aside as :func:`swap_partner` of ``tmp``, ``tmp`` renamed to ``path``, then the old one deleted.

    A crash leaves ``path`` either old or new: if it hits between the two renames, ``path`` is missing and both
    ``tmp`` and its partner are there — a ``.old`` exists only once ``tmp`` is complete, so ``tmp`` can be
    renamed into place (:func:`recover_swap`, :func:`finish_interrupted_swap`). An error raised by the second
    rename itself puts the old directory back before it propagates.
    """
    old = swap_partner(tmp)
    if path.exists():
        os.replace(path, old)
    try:
        os.replace(tmp, path)
    except BaseException:
        if old.exists() and not path.exists():
            os.replace(old, path)  # the second rename failed in this process: put the replaced directory back
        raise
    if old.exists():
        shutil.rmtree(old)


def recover_swap(path: Path, leftovers: list[Path]) -> Path | None:
    """Finish a :func:`replace_dir` of ``path`` that a crash interrupted between its two renames: if ``path`` is
    missing and ``leftovers`` (stale temporaries of ``path``) hold a ``.tmp`` together with its ``.old`` partner,
    the ``.tmp`` is complete and becomes ``path``. Returns the ``.tmp`` used, or None."""
    if path.exists():
        return None
    names = {entry.name for entry in leftovers}
    for entry in leftovers:
        if entry.name.endswith(".tmp") and swap_partner(entry).name in names:
            os.replace(entry, path)
            return entry
    return None


def finish_interrupted_swap(path: str | Path) -> Path | None:
    """If a :func:`replace_dir` of ``path`` was killed between its renames (``path`` missing, the dead writer's
    complete ``.tmp`` and its ``.old`` partner beside it), rename the ``.tmp`` into place; the ``.old`` stays for
    the next writer's :func:`remove_stale_temporaries`. Called by every reader and writer of directory stores
    and data sets, so the new directory is never lost. Returns the ``.tmp`` used, or None."""
    return recover_swap(Path(path), stale_temporaries(path))


def finish_files(directory: Path) -> None:
    """Give every file directly in ``directory`` the permissions the umask allows (writers such as safetensors
    create 0600 files) and flush it to disk, before the directory is swapped into place."""
    mode = 0o666 & ~umask()
    for entry in directory.iterdir():
        if entry.is_file():
            os.chmod(entry, mode)
            with open(entry, "rb") as handle:
                os.fsync(handle.fileno())


def write_marker(root: Path, kind: str, entries: Iterable[str] = ()) -> None:
    """Mark directory ``root`` as a ``kind`` written by vlattn holding ``entries`` (atomically)."""
    atomic_write_text(root / MARKER, json.dumps({"written_by": "vlattn", "kind": kind, "entries": sorted(entries)}))


def marker_kind(root: Path) -> tuple[str, frozenset[str]] | None:
    """``(kind, entries)`` of the vlattn marker in directory ``root``, or None when it has no valid marker."""
    try:
        data = json.loads((root / MARKER).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(data, dict) or data.get("written_by") != "vlattn" or not isinstance(data.get("kind"), str):
        return None
    entries = data.get("entries")
    if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
        return None
    return data["kind"], frozenset(entries)


def make_temporary_dir(path: Path, suffix: str = ".tmp") -> Path:
    """An empty temporary directory next to ``path`` with the permissions of ``mkdir`` under the umask."""
    tmp = Path(tempfile.mkdtemp(prefix=temporary_prefix(path), suffix=suffix, dir=path.parent))
    os.chmod(tmp, 0o777 & ~umask())
    return tmp


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success it replaces ``path`` in one rename.

    If the body raises, the temporary file is removed and ``path`` keeps its old content.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=temporary_prefix(path), suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        os.chmod(tmp_path, 0o666 & ~umask())
        yield tmp_path
        with open(tmp_path, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def atomic_write_text(path: str | Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically (UTF-8)."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def state_sha256(state: Mapping[str, Any]) -> str:
    """SHA-256 of a model's state (name -> tensor): names, dtypes, shapes and values in name order, so the same
    weights hash alike whatever file format they were saved in."""
    digest = hashlib.sha256()
    for name in sorted(state):
        array = state[name].detach().cpu().contiguous().numpy()
        digest.update(f"{name}|{array.dtype.str}|{array.shape}|".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()
