"""Atomic file writing: write to a temporary file in the same directory, fsync, then rename.

Temporary names are ``.<name>.<pid>.<random>.tmp`` next to the target (directories being replaced are moved
aside as ``.<name>.<pid>.<random>.old``). The writer's process id in the name lets a later run tell a leftover
of a killed writer (:func:`stale_temporaries`) from one that is still being written. Files and directories
get the permissions the user's umask allows, as if created with ``open``/``mkdir``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

_RANDOM = "[a-z0-9_]{8}"  # tempfile's random part


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


def stale_temporaries(path: str | Path) -> list[Path]:
    """Leftovers of writers of ``path`` that were killed: vlattn's temporary names whose process is gone."""
    path = Path(path)
    if not path.parent.is_dir():
        return []
    pattern = re.compile(rf"^\.{re.escape(path.name)}\.(\d+)\.{_RANDOM}\.(?:tmp|old)$")
    return sorted(
        entry
        for entry in path.parent.iterdir()
        if (match := pattern.match(entry.name)) and not _alive(int(match.group(1))) and not entry.is_symlink()
    )


def remove_stale_temporaries(path: str | Path) -> list[Path]:
    """Delete :func:`stale_temporaries` of ``path``; returns what was removed."""
    removed = stale_temporaries(path)
    for entry in removed:
        if entry.is_dir():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    return removed


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
