"""Atomic writes: files and directories get the permissions the user's umask allows (not mkstemp's 0600)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

from vlattn.data.features import RegionFeatures, write_m2_hdf5, write_memmap, write_npz_dir
import vlattn.io
from vlattn.io import atomic_write_text, complete_dir, make_temporary_dir, replace_dir, umask


@pytest.fixture(params=[0o022, 0o027, 0o077])
def mask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_umask_is_read_without_changing_it(mask: int) -> None:
    assert umask() == mask
    assert umask() == mask


def test_atomic_write_text_uses_the_umask(tmp_path: Path, mask: int) -> None:
    atomic_write_text(tmp_path / "a" / "config.json", "{}")
    assert mode(tmp_path / "a" / "config.json") == 0o666 & ~mask
    (tmp_path / "plain.txt").write_text("{}")
    assert mode(tmp_path / "a" / "config.json") == mode(tmp_path / "plain.txt")


def test_feature_stores_use_the_umask(tmp_path: Path, mask: int) -> None:
    items = [(1, RegionFeatures(np.ones((2, 4), np.float32), np.zeros((2, 4), np.float32), 5, 5))]
    write_memmap(tmp_path / "mm", items)
    write_npz_dir(tmp_path / "npz", items)
    write_m2_hdf5(tmp_path / "f.h5", items)
    for directory in (tmp_path / "mm", tmp_path / "npz"):
        assert mode(directory) == 0o777 & ~mask
        assert {mode(file) for file in directory.iterdir()} == {0o666 & ~mask}
    assert mode(tmp_path / "f.h5") == 0o666 & ~mask


def test_replace_dir_puts_the_old_directory_back_when_the_second_rename_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "store"
    first = make_temporary_dir(path)
    (first / "a").write_text("old")
    complete_dir(first, "memmap")
    replace_dir(first, path)
    tmp = make_temporary_dir(path)
    (tmp / "a").write_text("new")
    complete_dir(tmp, "memmap")
    real, calls = vlattn.io.rename_noreplace, []

    def failing_second(src: Path, dst: Path) -> None:
        calls.append(dst)
        if len(calls) == 2:
            raise OSError("EXDEV")
        real(src, dst)

    monkeypatch.setattr(vlattn.io, "rename_noreplace", failing_second)
    with pytest.raises(OSError, match="EXDEV"):
        replace_dir(tmp, path, lambda p: None)
    monkeypatch.undo()
    assert (path / "a").read_text() == "old" and (tmp / "a").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["store", tmp.name])  # no .old left


def test_failed_writes_remove_only_their_own_temporaries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """atomic_path and save_checkpoint delete their own temporary when the write fails; the old file/checkpoint
    and a user's files beside them stay."""
    import vlattn.training.checkpoint as checkpoint
    from vlattn.validation import load_valid_config
    from vlattn.io import atomic_path
    from vlattn.models import build_captioner

    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "out.json").write_text("old")
    with pytest.raises(RuntimeError), atomic_path(tmp_path / "out.json") as tmp:
        tmp.write_text("half")
        raise RuntimeError("interrupted")
    cfg = load_valid_config("demo")
    model = build_captioner(cfg.model, 12)

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint, "save_config", broken)
    with pytest.raises(OSError, match="disk full"):
        checkpoint.save_checkpoint(tmp_path / "ckpt", model, cfg, {})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "out.json"]
    assert (tmp_path / "out.json").read_text() == "old" and (tmp_path / "notes.txt").read_text() == "mine"
