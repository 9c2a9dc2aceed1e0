"""Atomic file and directory writing that replaces or deletes only what vlattn provably wrote.

Every temporary is a directory ``.<name>.<pid>.<id>.tmp`` next to its target, created with a marker file
(:data:`MARKER`) naming its ``id`` (16 random hex digits, also in the name) and the kind ``temporary``. A leftover
is vlattn's only when its name and its marker carry the same ``id`` (:func:`stale_temporaries`): a user's folder
with a look-alike name is never touched. The process id in the name tells a leftover of a killed writer from
one still being written.

- A file (:func:`atomic_path`) is written inside such a directory and renamed over its target; the directory is
  then removed.
- A directory written as a whole (a checkpoint, a feature store, a data set) *is* the temporary: once complete
  its marker is rewritten with its final kind (:func:`complete_dir`), keeping the ``id``, and it is swapped in by
  :func:`replace_dir`. The directory it replaces is checked at that moment (a callback that raises unless vlattn
  wrote it) and moved aside as ``.<name>.<pid>.<its id>.old``, so it too is provably vlattn's until deleted.
  Without a callback, the target must not exist: the rename refuses to replace anything (``renameat2`` with
  ``RENAME_NOREPLACE``), so a folder created while the writer ran is kept.
- A crash between the two renames of a swap leaves the target missing and a complete ``.tmp`` beside it;
  :func:`finish_interrupted_swap` renames it into place.

Files and directories get the permissions the user's umask allows, as if created with ``open``/``mkdir``.
Write failures (disk full, a file-size limit, a read-only directory) are raised as one-line
:class:`~vlattn.errors.WriteError` naming the target.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import errno
import hashlib
import json
import os
import re
import secrets
import shutil
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from vlattn.errors import DataError, WriteError

MARKER = ".vlattn.json"
TEMPORARY = "temporary"  # marker kind of a directory still being written
WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO})
Check = Callable[[Path], None]  # raises unless vlattn may replace the path


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


def new_id() -> str:
    """A random id for a marker (16 hex digits)."""
    return secrets.token_hex(8)


def is_write_error(err: BaseException) -> bool:
    """An OS error of writing: no space, a file-size limit, a quota, a read-only or forbidden place."""
    return isinstance(err, OSError) and err.errno in WRITE_ERRNOS


@contextlib.contextmanager
def writing(path: str | Path) -> Iterator[None]:
    """Report a failed write inside the block as a one-line :class:`WriteError` naming ``path``."""
    try:
        yield
    except OSError as err:
        if is_write_error(err):
            raise WriteError(path, err) from None
        raise


# --- markers --------------------------------------------------------------------------------------------


def read_marker(root: Path) -> dict[str, Any] | None:
    """The vlattn marker of directory ``root`` (``written_by``, ``kind``, ``entries``, ...), or None when it has no
    valid one. A marker reached through a symbolic link is not vlattn's."""
    try:
        if (root / MARKER).is_symlink():
            return None
        data = json.loads((root / MARKER).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("written_by") != "vlattn" or not isinstance(data.get("kind"), str):
        return None
    entries = data.setdefault("entries", [])
    if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
        return None
    return data


def _marker_text(kind: str, entries: Iterable[str], **extra: Any) -> str:
    return json.dumps({"written_by": "vlattn", "kind": kind, "entries": sorted(entries), **extra})


def write_marker(root: Path, kind: str, entries: Iterable[str] = (), **extra: Any) -> None:
    """Mark directory ``root`` as a ``kind`` written by vlattn holding ``entries`` (atomically); ``extra`` keys
    (e.g. an ``id``) go into the marker too."""
    atomic_write_text(root / MARKER, _marker_text(kind, entries, **extra))


def tree_entries(root: Path) -> list[str]:
    """Every file and directory below ``root`` (the marker aside) as ``/``-separated relative paths."""
    found = []
    for folder, dirs, files in os.walk(root):
        base = Path(folder).relative_to(root)
        found += [(base / name).as_posix() for name in dirs + files if not (folder == str(root) and name == MARKER)]
    return found


def foreign_entries(root: Path, entries: Iterable[str]) -> list[str]:
    """What ``root`` holds beyond ``entries`` (its marker's list, :func:`tree_entries`): files and folders vlattn
    did not write, and symbolic links (vlattn writes none)."""
    known = set(entries)
    foreign = []
    for folder, dirs, files in os.walk(root):
        base = Path(folder).relative_to(root)
        for name in dirs + files:
            relative = (base / name).as_posix()
            if relative == MARKER or (relative in known and not (Path(folder) / name).is_symlink()):
                continue
            foreign.append(relative)
    return sorted(foreign)


# --- temporaries ----------------------------------------------------------------------------------------


def _pattern(name: str) -> re.Pattern[str]:
    """vlattn's temporary names for the target ``name`` (any if empty): groups target, process id, id, suffix."""
    target = re.escape(name) if name else ".+"
    return re.compile(rf"^\.({target})\.(\d+)\.([0-9a-f]{{16}})\.(tmp|old)$")


def make_temporary_dir(path: Path) -> Path:
    """A new temporary directory ``.<name>.<pid>.<id>.tmp`` next to ``path``, marked ``temporary`` with its id."""
    ident = new_id()
    tmp = path.parent / f".{path.name}.{os.getpid()}.{ident}.tmp"
    with writing(path):
        os.mkdir(tmp)  # mode 0o777 under the umask, as mkdir(1)
        try:
            fd = os.open(tmp / MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
            try:
                text = _marker_text(TEMPORARY, (), id=ident).encode()
                if os.write(fd, text) != len(text):
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            finally:
                os.close(fd)
        except BaseException:
            with contextlib.suppress(OSError):
                (tmp / MARKER).unlink()
            tmp.rmdir()  # created just above, empty again
            raise
    return tmp


def temporary_id(tmp: Path) -> str:
    """The id in the name of a vlattn temporary."""
    match = _pattern("").match(tmp.name)
    if match is None:
        raise ValueError(f"{tmp} is not a vlattn temporary name")
    return match.group(3)


def complete_dir(tmp: Path, kind: str, entries: Iterable[str] | None = None, **extra: Any) -> None:
    """Mark the temporary directory ``tmp`` complete: its marker gets the final ``kind`` and ``entries``
    (default: everything in it, :func:`tree_entries`), keeping the id of its name."""
    listed = tree_entries(tmp) if entries is None else entries
    write_marker(tmp, kind, listed, id=temporary_id(tmp), **extra)


def _owned(entry: Path, match: re.Match[str]) -> dict[str, Any] | None:
    """The marker of ``entry`` if it proves the entry is a temporary vlattn wrote (same id as its name)."""
    if entry.is_symlink() or not entry.is_dir():
        return None
    marker = read_marker(entry)
    return marker if marker is not None and marker.get("id") == match.group(3) else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists but belongs to another user
        return True
    return True


def _stale(directory: Path, name: str, include_own: bool) -> list[tuple[Path, dict[str, Any] | None]]:
    """vlattn's temporaries in ``directory`` (for target ``name``; any if empty) whose writer is gone, each with
    its marker (None: an empty directory, killed before it wrote its marker)."""
    if not directory.is_dir() or directory.is_symlink():
        return []
    pattern, own, found = _pattern(name), os.getpid(), []
    for entry in sorted(directory.iterdir()):
        match = pattern.match(entry.name)
        if match is None or (_alive(pid := int(match.group(2))) and not (include_own and pid == own)):
            continue
        marker = _owned(entry, match)
        if marker is not None:
            found.append((entry, marker))
        elif not entry.is_symlink() and entry.is_dir() and not any(entry.iterdir()):
            found.append((entry, None))
    return found


def stale_temporaries(path: str | Path, *, include_own: bool = False) -> list[Path]:
    """Leftovers of killed writers of ``path``: temporaries proven vlattn's whose process is gone.

    ``include_own``: this process has not written ``path`` yet, so temporaries named with its own process id
    are a previous process's that had the same id (a restarted container) and are stale too.
    """
    path = Path(path)
    return [entry for entry, _ in _stale(path.parent, path.name, include_own)]


def stale_temporaries_in(directory: str | Path, *, include_own: bool = False) -> list[Path]:
    """:func:`stale_temporaries` of every name in ``directory``."""
    return [entry for entry, _ in _stale(Path(directory), "", include_own)]


def temporary_target(entry: Path) -> Path:
    """The path a vlattn temporary ``entry`` was written for."""
    match = _pattern("").match(entry.name)
    if match is None:
        raise ValueError(f"{entry} is not a vlattn temporary name")
    return entry.with_name(match.group(1))


def remove_owned(directory: Path) -> None:
    """Delete a directory vlattn wrote (a temporary or one it replaced). Its marker goes last, so a removal
    cut short leaves a directory still provably vlattn's."""
    for entry in directory.iterdir():
        if entry.name == MARKER:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    with contextlib.suppress(FileNotFoundError):
        (directory / MARKER).unlink()
    directory.rmdir()


def remove_stale_temporaries(path: str | Path, *, include_own: bool = False) -> list[Path]:
    """Delete :func:`stale_temporaries` of ``path``; returns what was removed."""
    removed = stale_temporaries(path, include_own=include_own)
    for entry in removed:
        remove_owned(entry)
    return removed


def remove_stale_temporaries_in(directory: str | Path, *, include_own: bool = False) -> list[Path]:
    """Delete :func:`stale_temporaries_in` ``directory``; returns what was removed."""
    removed = stale_temporaries_in(directory, include_own=include_own)
    for entry in removed:
        remove_owned(entry)
    return removed


# --- renames --------------------------------------------------------------------------------------------

_RENAME_NOREPLACE = 1
_AT_FDCWD = -100
try:
    _renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
except (AttributeError, OSError):  # not Linux / an old C library
    _renameat2 = None


def rename_noreplace(src: Path, dst: Path) -> None:
    """Rename ``src`` to ``dst``, failing with :class:`FileExistsError` if ``dst`` exists (even an empty
    directory), atomically where the OS offers it."""
    if _renameat2 is not None:
        if _renameat2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), _RENAME_NOREPLACE) == 0:
            return
        code = ctypes.get_errno()
        if code not in (errno.EINVAL, errno.ENOSYS):  # else: the file system cannot; fall back below
            raise OSError(code, os.strerror(code), str(src), None, str(dst))
    if os.path.lexists(dst):
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(dst))
    os.rename(src, dst)


def destination_appeared(path: Path) -> DataError:
    """The error for a destination that appeared while vlattn was writing it (nothing is replaced)."""
    return DataError("appeared while vlattn was writing it (another program or a second vlattn); left as it is, "
                     "nothing written there", path=path)


def replace_dir(tmp: Path, path: Path, replaceable: Check | None = None) -> None:
    """Make the complete directory ``tmp`` (:func:`make_temporary_dir`, :func:`complete_dir`) ``path``.

    An existing ``path`` is replaced only if ``replaceable`` is given and accepts it at this moment (it raises
    otherwise); it is renamed aside as ``.<name>.<pid>.<its marker id>.old`` (checked to be the directory
    that was accepted), ``tmp`` renamed into place without replacing anything, then the old one deleted.
    Without ``replaceable`` an existing ``path`` is an error (:func:`destination_appeared`). A crash between
    the renames leaves ``path`` missing and ``tmp`` complete beside it (:func:`finish_interrupted_swap`); an
    error of the second rename puts the old directory back before it propagates.
    """
    old = None
    if os.path.lexists(path):
        if replaceable is None:
            raise destination_appeared(path)
        replaceable(path)
        accepted, marker = path.lstat(), read_marker(path)
        ident = marker.get("id") if marker is not None else None
        if not isinstance(ident, str) or not re.fullmatch("[0-9a-f]{16}", ident):
            raise DataError("refusing to replace: its marker has no id", path=path)
        old = path.with_name(f".{path.name}.{os.getpid()}.{ident}.old")
        rename_noreplace(path, old)
        if not os.path.samestat(old.lstat(), accepted):  # replaced by someone else between check and rename
            rename_noreplace(old, path)
            raise destination_appeared(path)
    try:
        rename_noreplace(tmp, path)
    except BaseException as err:
        if old is not None and not os.path.lexists(path):
            rename_noreplace(old, path)  # put the replaced directory back
        if isinstance(err, FileExistsError):
            raise destination_appeared(path) from None
        raise
    if old is not None:
        remove_owned(old)


def recover_swap(path: Path, leftovers: Iterable[Path]) -> Path | None:
    """Finish a :func:`replace_dir` of ``path`` that a crash interrupted between its renames: if ``path`` is
    missing and ``leftovers`` (stale temporaries of ``path``) hold a complete ``.tmp`` (its marker's kind is
    final) together with an ``.old`` of the same writer (the swap had begun), the ``.tmp`` becomes ``path``.
    Returns the ``.tmp`` used, or None."""
    if os.path.lexists(path):
        return None
    pattern, entries = _pattern(path.name), list(leftovers)
    swapping = {m.group(2) for e in entries if (m := pattern.match(e.name)) and m.group(4) == "old"}
    for entry in entries:
        match = pattern.match(entry.name)
        marker = read_marker(entry)
        if match and match.group(4) == "tmp" and match.group(2) in swapping and marker and marker["kind"] != TEMPORARY:
            rename_noreplace(entry, path)
            return entry
    return None


def finish_interrupted_swap(path: str | Path) -> Path | None:
    """If a :func:`replace_dir` of ``path`` was killed between its renames, rename its complete ``.tmp`` into
    place (the ``.old`` stays for the next writer's :func:`remove_stale_temporaries`). Called by readers and
    writers of directory stores and data sets, so the new directory is never lost. Returns the ``.tmp`` used."""
    try:
        return recover_swap(Path(path), stale_temporaries(path))
    except OSError:  # a read-only place or a concurrent reader that finished it first: read what is there
        return None


def finish_files(directory: Path) -> None:
    """Give every file directly in ``directory`` the permissions the umask allows (writers such as safetensors
    create 0600 files) and flush it to disk, before the directory is swapped into place."""
    mode = 0o666 & ~umask()
    for entry in directory.iterdir():
        if entry.is_file():
            os.chmod(entry, mode)
            with open(entry, "rb") as handle:
                os.fsync(handle.fileno())


# --- files ----------------------------------------------------------------------------------------------


@contextlib.contextmanager
def atomic_path(path: str | Path, *, replace: bool | Check = True) -> Iterator[Path]:
    """Yield a temporary path for ``path`` (inside a marked temporary directory beside it); on success it
    becomes ``path`` in one rename.

    ``replace``: True replaces an existing ``path`` (a file in a directory vlattn owns, e.g. a run's); False
    never replaces anything (an existing ``path`` is a :class:`~vlattn.errors.DataError`, however it appeared);
    a callable is asked at the moment of replacement (it raises unless vlattn may replace ``path``). If the body
    raises, the temporary is removed and ``path`` keeps its old content.
    """
    path = Path(path)
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
    tmp_dir = make_temporary_dir(path)
    tmp = tmp_dir / f"new-{path.name}"  # the same suffix (some writers choose the format by it), not the marker's name
    try:
        with writing(path):
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # mode under the umask, as open()
            os.close(fd)
            yield tmp
            with open(tmp, "rb+") as handle:
                os.fsync(handle.fileno())
            if replace is True:
                os.replace(tmp, path)
            else:
                if replace is not False and os.path.lexists(path):
                    replace(path)
                    os.replace(tmp, path)
                else:
                    try:
                        rename_noreplace(tmp, path)
                    except FileExistsError:
                        raise DataError("exists; vlattn does not replace it (choose a new file name)",
                                        path=path) from None
    finally:
        with contextlib.suppress(OSError):
            remove_owned(tmp_dir)


def atomic_write_text(path: str | Path, text: str, *, replace: bool | Check = True) -> None:
    """Replace ``path`` with ``text`` atomically (UTF-8); ``replace`` as for :func:`atomic_path`."""
    with atomic_path(path, replace=replace) as tmp:
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


def content_hash(content: Any) -> str:
    """SHA-256 of ``content`` as canonical JSON (dataclasses and paths by their text): what a data set holds,
    independent of where it lies and how its files are formatted."""
    text = json.dumps(content, sort_keys=True, default=lambda o: dataclasses.astuple(o) if dataclasses.is_dataclass(o) else str(o))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
