"""``--overwrite`` replaces only what vlattn wrote; never a user's directory, a parent of the source, a store
holding foreign files; leftovers of killed writers are cleaned, other hidden files are not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from vlattn.data.features import MemmapStore, NpzDirStore, RegionFeatures, write_m2_hdf5, write_memmap
from vlattn.data.features.storage import MARKER, atomic_dir
from vlattn.data.synth import generate
from vlattn.errors import WriteError

TINY = {"images": 12, "feature_dim": 8, "extractor_epochs": 1, "val_size": 2, "test_size": 2}


def regions(seed: int, count: int = 3) -> list[tuple[int, RegionFeatures]]:
    rng = np.random.default_rng(seed)
    boxes = np.array([[0, 0, 4, 4], [1, 1, 5, 6]], dtype=np.float32)
    return [(i, RegionFeatures(rng.standard_normal((2, 4)).astype(np.float32), boxes, 10, 10)) for i in range(count)]


def user_dir(path: Path) -> dict[str, bytes]:
    """A directory of the user's own files; returns their contents for checking later."""
    (path / "notes").mkdir(parents=True)
    files = {"thesis.tex": b"\\chapter{Results}", "notes/todo.txt": b"buy GPUs", "data.csv": b"1,2,3\n"}
    for name, content in files.items():
        (path / name).write_bytes(content)
    return files


def intact(path: Path, files: dict[str, bytes]) -> bool:
    return all((path / name).read_bytes() == content for name, content in files.items())


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """A memmap store written by vlattn, the source of the conversions below."""
    write_memmap(tmp_path / "feats", regions(0))
    return tmp_path / "feats"


def convert(source: Path, dest: Path, fmt: str = "npz-dir") -> list[str]:
    return ["data", "convert", "--from", str(source), "--to", str(dest), "--format", fmt, "--overwrite"]


def test_convert_refuses_a_users_directory(tmp_path: Path, source: Path, vlattn_cli) -> None:
    files = user_dir(tmp_path / "mine")
    code, _, err = vlattn_cli(*convert(source, tmp_path / "mine"))
    assert code == 2 and err.count("\n") == 1 and "refusing to overwrite" in err and "mine" in err
    assert intact(tmp_path / "mine", files)


def test_convert_refuses_a_parent_of_the_source(tmp_path: Path, vlattn_cli) -> None:
    files = user_dir(tmp_path / "project")
    write_memmap(tmp_path / "project" / "feats", regions(0))
    code, _, err = vlattn_cli(*convert(tmp_path / "project" / "feats", tmp_path / "project", "memmap"))
    assert code == 2 and "contains the source" in err and err.count("\n") == 1
    assert intact(tmp_path / "project", files) and len(MemmapStore(tmp_path / "project" / "feats")) == 3


def test_convert_refuses_a_destination_inside_the_source(tmp_path: Path, source: Path, vlattn_cli) -> None:
    before = sorted(p.name for p in source.iterdir())
    code, _, err = vlattn_cli(*convert(source, source / "copy"))
    assert code == 2 and "inside the source" in err
    assert sorted(p.name for p in source.iterdir()) == before


def test_convert_replaces_its_own_store_and_refuses_one_with_foreign_files(
    tmp_path: Path, source: Path, vlattn_cli
) -> None:
    dest = tmp_path / "old"
    write_memmap(dest, regions(1, count=5))
    assert vlattn_cli(*convert(source, dest, "memmap"))[0] == 0
    assert len(MemmapStore(dest)) == 3 and (dest / MARKER).is_file()
    (dest / "results.txt").write_text("my numbers")
    code, _, err = vlattn_cli(*convert(source, dest, "npz-dir"))
    assert code == 2 and "did not write: results.txt" in err
    assert (dest / "results.txt").read_text() == "my numbers" and len(MemmapStore(dest)) == 3


def test_convert_refuses_a_synthetic_set_and_a_forged_marker(tmp_path: Path, source: Path, vlattn_cli) -> None:
    synth = generate(tmp_path / "synth", **TINY)
    code, _, err = vlattn_cli(*convert(source, synth))
    assert code == 2 and "synthetic-set, not a feature store" in err and (synth / "dataset.json").is_file()
    files = user_dir(tmp_path / "forged")
    (tmp_path / "forged" / MARKER).write_text('{"kind": "memmap"}')
    assert vlattn_cli(*convert(source, tmp_path / "forged"))[0] == 2
    assert intact(tmp_path / "forged", files)


def test_convert_to_hdf5_replaces_only_its_own_file(tmp_path: Path, source: Path, vlattn_cli) -> None:
    theirs = tmp_path / "coco_detections.hdf5"
    with h5py.File(theirs, "w") as handle:
        handle.create_dataset("1_features", data=np.ones((2, 4), dtype=np.float32))
    before = theirs.read_bytes()
    code, _, err = vlattn_cli(*convert(source, theirs, "m2-hdf5"))
    assert code == 2 and "refusing to overwrite" in err and theirs.read_bytes() == before
    ours = tmp_path / "ours.h5"
    write_m2_hdf5(ours, regions(1, count=5))
    assert vlattn_cli(*convert(source, ours, "m2-hdf5"))[0] == 0
    with h5py.File(ours, "r") as handle:
        assert sum(key.endswith("_features") for key in handle) == 3


def test_convert_refuses_a_symbolic_link(tmp_path: Path, source: Path, vlattn_cli) -> None:
    files = user_dir(tmp_path / "target")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    code, _, err = vlattn_cli(*convert(source, tmp_path / "link"))
    assert code == 2 and "symbolic link" in err and intact(tmp_path / "target", files)


def test_synth_refuses_a_users_directory_and_replaces_its_own(tmp_path: Path, vlattn_cli) -> None:
    files = user_dir(tmp_path / "home")
    args = ["data", "synth", "--images", "12", "--val", "2", "--test", "2", "--feature-dim", "8", "--epochs", "1",
            "--overwrite", "--out"]
    code, _, err = vlattn_cli(*args, str(tmp_path / "home"))
    assert code == 2 and "refusing to overwrite" in err and "synthetic data set" in err
    assert intact(tmp_path / "home", files)
    out = generate(tmp_path / "synth", seed=5, **TINY)
    before = (out / "scenes.json").read_bytes()
    assert vlattn_cli(*args, str(out))[0] == 0
    assert (out / "scenes.json").read_bytes() != before


def dead_pid() -> int:
    """The id of a process that has exited."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def leftover(directory: Path, target: str, pid: int, ident: str, suffix: str = "tmp", *, marker_id: str | None = None,
             kind: str = "temporary") -> Path:
    """A directory named as vlattn's temporary of ``target`` with a marker of ``marker_id`` (None: no marker)."""
    path = directory / f".{target}.{pid}.{ident}.{suffix}"
    path.mkdir()
    (path / "features.f16").write_bytes(b"partial")
    if marker_id is not None:
        (path / MARKER).write_text(json.dumps({"written_by": "vlattn", "kind": kind, "id": marker_id, "entries": []}))
    return path


def test_leftovers_of_killed_writers_are_cleaned_and_nothing_else(tmp_path: Path, source: Path) -> None:
    """Removed: temporaries whose marker carries the id of their name, of a dead process. Kept: the same names
    without a marker or with another id (a user's folder or a copy), a live process's, other hidden names."""
    from vlattn.data.features import convert_store

    dead, alive = dead_pid(), os.getpid()
    ids = [f"{n:016x}" for n in range(8)]
    stale = [leftover(tmp_path, "out", dead, ids[0], marker_id=ids[0]),
             leftover(tmp_path, "out", dead, ids[1], "old", marker_id=ids[1], kind="memmap"),
             leftover(tmp_path, "out.h5", dead, ids[2], marker_id=ids[2])]
    kept = [leftover(tmp_path, "out", dead, ids[3]), leftover(tmp_path, "out", dead, ids[4], marker_id=ids[5]),
            leftover(tmp_path, "out", alive, ids[6], marker_id=ids[6])]
    hidden = [tmp_path / ".out.notes.tmp", tmp_path / f".other.{dead}.qrst7890.tmp", tmp_path / ".out.tmp",
              tmp_path / f".out.{dead}.{ids[7]}.tmp.txt"]
    for file in hidden:
        file.write_text("keep me")
    convert_store(source, tmp_path / "out", "npz-dir")
    convert_store(source, tmp_path / "out.h5", "m2-hdf5")
    assert not any(path.exists() for path in stale)
    assert all((path / "features.f16").read_bytes() == b"partial" for path in kept)
    assert all(file.read_text() == "keep me" for file in hidden)


@pytest.mark.parametrize("command", ["synth", "convert"])
def test_a_writer_killed_before_its_swap_leaves_a_leftover_the_next_run_removes(
    command: str, tmp_path: Path, source: Path, vlattn_cli
) -> None:
    """A real ``vlattn data synth``/``convert`` killed (SIGKILL) at its first store swap (``convert``: its complete
    store; ``synth``: the feature store inside the set it is writing): the hidden ``.tmp`` stays behind; the next
    run of the command removes it and writes the destination."""
    from tests.training.subproc import Child

    out = tmp_path / "out"
    args = {"synth": ["data", "synth", "--out", str(out), "--images", "12", "--val", "2", "--test", "2",
                      "--feature-dim", "8", "--epochs", "1"],
            "convert": ["data", "convert", "--from", str(source), "--to", str(out), "--format", "memmap"]}[command]
    child = Child(tmp_path, "store:1", *args)
    pid = child.wait_ready()
    child.kill()
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".out.")]
    assert not out.exists() and len(leftovers) == 1 and leftovers[0].startswith(f".out.{pid}.")
    assert leftovers[0].endswith(".tmp") and (tmp_path / leftovers[0]).is_dir()
    code, _, err = vlattn_cli(*args)
    assert code == 0, err
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".out.")]
    assert (out / MARKER).is_file()


@pytest.mark.parametrize("command", ["synth", "convert"])
def test_a_writer_killed_between_its_swap_renames_loses_nothing(
    command: str, tmp_path: Path, source: Path, vlattn_cli
) -> None:
    """``--overwrite`` killed (SIGKILL) after moving the old directory aside and before renaming the new one into
    place: the destination is missing and the dead writer's complete ``.tmp`` and ``.old`` are beside it. The next
    reader (``open_store`` / the captioning data loader) finishes the swap: the new directory is in place; the next
    writer removes the ``.old``."""
    from tests.training.subproc import Child
    from vlattn.config import DataConfig
    from vlattn.data.features import open_store
    from vlattn.tasks.captioning import load_caption_data

    out = tmp_path / "out"
    args = {"synth": ["data", "synth", "--out", str(out), "--images", "12", "--val", "2", "--test", "2",
                      "--feature-dim", "8", "--epochs", "1"],
            "convert": ["data", "convert", "--from", str(source), "--to", str(out), "--format", "npz-dir"]}[command]
    if command == "synth":
        generate(out, **TINY)
    else:
        write_memmap(out, regions(1))  # a different store, replaced below
    # synth: swap 1 is the feature store inside the new set (nothing to move aside), swap 2 the set itself
    child = Child(tmp_path, f"storeswap:{2 if command == 'synth' else 1}", *args, "--overwrite")
    pid = child.wait_ready()
    child.kill()
    leftovers = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".out."))
    assert not out.exists() and sorted(name[-4:] for name in leftovers) == [".old", ".tmp"]
    assert all(name.startswith(f".out.{pid}.") for name in leftovers)
    if command == "synth":
        data = load_caption_data(DataConfig(root=str(out)))
        assert len(data.entries["test"]) == 2 and (out / MARKER).is_file()
    else:
        store = open_store(out)
        assert isinstance(store, NpzDirStore) and store.ids() == [0, 1, 2]
        assert np.allclose(store.get(0).features, regions(0)[0][1].features, atol=1e-3)  # the new store's, not regions(1)
    old = [name for name in leftovers if name.endswith(".old")]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out.")] == old
    code, _, err = vlattn_cli(*args, "--overwrite")
    assert code == 0, err
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".out.")]


SYNTH = ["--images", "12", "--val", "2", "--test", "2", "--feature-dim", "8", "--epochs", "1"]


def tree(path: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(path)): None if p.is_dir() else p.read_bytes() for p in sorted(path.rglob("*"))}


@pytest.mark.parametrize("planted", ["vqa/my_labels.json", "images/notes/todo.txt", "features/README",
                                     "images/synth_000001.png"])
def test_synth_overwrite_refuses_a_set_with_a_users_file_in_a_subfolder(
    planted: str, tmp_path: Path, vlattn_cli
) -> None:
    """Every file and folder of the set is listed in its marker: a user's file at any depth (or one of the set's
    files replaced by a link to the user's) makes ``--overwrite`` refuse, and everything stays."""
    from tests.test_bad_input import one_line

    out = tmp_path / "s"
    generate(out, **TINY)
    target = out / planted
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():  # one of the set's own files, now a link to the user's
        (tmp_path / "mine.png").write_bytes(b"mine")
        target.unlink()
        target.symlink_to(tmp_path / "mine.png")
    else:
        target.write_text("{}")
    before = tree(out)
    code, _, err = vlattn_cli("data", "synth", "--out", str(out), *SYNTH, "--overwrite")
    named = "images/notes, images/notes/todo.txt" if planted.startswith("images/notes") else planted
    assert code == 2 and one_line(err) and f"it holds files vlattn did not write: {named};" in err, err
    assert tree(out) == before


@pytest.mark.parametrize("who", ["user", "user, --overwrite", "second writer"])
@pytest.mark.parametrize("command", ["synth", "convert"])
def test_a_destination_that_appears_while_writing_is_kept(
    command: str, who: str, tmp_path: Path, source: Path, vlattn_cli
) -> None:
    """The destination is checked again at the moment of the swap: a folder the user created while ``data
    synth``/``convert`` ran (also with ``--overwrite``: it has no marker), or the output of a second writer that
    finished first, stays; the late writer exits 2 naming it and leaves no temporary behind."""
    from tests.test_bad_input import one_line
    from tests.training.subproc import Child

    out = tmp_path / "out"
    args = {"synth": ["data", "synth", "--out", str(out), *SYNTH],
            "convert": ["data", "convert", "--from", str(source), "--to", str(out), "--format", "memmap"]}[command]
    hook = f"storewait:{2 if command == 'synth' else 1}"  # synth: swap 1 is the feature store inside the set
    late = Child(tmp_path, hook, *args, *(["--overwrite"] if who == "user, --overwrite" else []))
    late.wait_ready()
    if who == "second writer":
        code, _, err = vlattn_cli(*args)
        assert code == 0, err
    else:
        out.mkdir()
        (out / "thesis.tex").write_text("t")
    before = tree(out)
    late.go()
    code, err = late.finish()
    expected = "refusing to overwrite: it has no .vlattn.json marker" if who == "user, --overwrite" else \
        "appeared while vlattn was writing it"
    assert code == 2 and one_line(err) and expected in err, err
    assert tree(out) == before
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".out.")]


@pytest.mark.parametrize("relative", [True, False])
def test_a_failed_write_inside_the_temporary_directory_names_the_final_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, relative: bool
) -> None:
    """The temporary directory is removed before the user reads the error: it names the file under the destination
    (a write error about another place is passed on as it is)."""
    monkeypatch.chdir(tmp_path)
    out = Path("store") if relative else tmp_path / "store"
    with pytest.raises(WriteError) as failed:
        with atomic_dir(out, kind="memmap") as tmp:
            raise WriteError(tmp / "sub" / "x.bin", OSError(28, "No space left on device"))
    assert str(failed.value) == f"{out / 'sub' / 'x.bin'}: cannot write: No space left on device"
    assert sorted(os.listdir(tmp_path)) == []  # nothing left behind
    with pytest.raises(WriteError, match=r"^elsewhere\.json: cannot write: read-only$"):
        with atomic_dir(out, kind="memmap"):
            raise WriteError("elsewhere.json", "read-only")


def write_caches(out: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What training writes into a data root: the parsed Karpathy file and SCST's document frequencies."""
    from vlattn.data import karpathy_cache
    from vlattn.metrics import CiderDocumentFrequency

    monkeypatch.setattr(karpathy_cache, "MIN_BYTES", 0)  # cache this small split file too
    karpathy_cache.read_split_file(out / "dataset.json", karpathy_cache.cache_file(out, "dataset.json"))
    CiderDocumentFrequency.cached(out / "cache" / "cider_df_image.npz", [["a red cube"], ["a blue ball"]])
    assert len(list((out / "cache").iterdir())) == 2


def test_synth_overwrite_replaces_a_set_with_the_caches_vlattn_wrote_into_it(
    tmp_path: Path, vlattn_cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = generate(tmp_path / "s", **TINY)
    write_caches(out, monkeypatch)
    before = (out / "scenes.json").read_bytes()
    code, _, err = vlattn_cli("data", "synth", "--out", str(out), *SYNTH, "--seed", "3", "--overwrite")
    assert code == 0, err
    assert (out / "scenes.json").read_bytes() != before and not (out / "cache").exists()


@pytest.mark.parametrize("planted", ["a user's file", "a damaged cache", "a link to a cache", "a linked folder"])
def test_synth_overwrite_refuses_a_cache_folder_holding_what_vlattn_cannot_prove_it_wrote(
    planted: str, tmp_path: Path, vlattn_cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = generate(tmp_path / "s", **TINY)
    write_caches(out, monkeypatch)
    cider = out / "cache" / "cider_df_image.npz"
    if planted == "a user's file":
        (out / "cache" / "notes.txt").write_text("mine")
    elif planted == "a damaged cache":
        cider.write_bytes(cider.read_bytes()[:100])
    elif planted == "a link to a cache":
        (tmp_path / "elsewhere.npz").write_bytes(cider.read_bytes())
        cider.unlink()
        cider.symlink_to(tmp_path / "elsewhere.npz")
    else:
        (out / "cache").rename(tmp_path / "users_cache")
        (out / "cache").symlink_to(tmp_path / "users_cache")
    before, outside = tree(out), tree(tmp_path / "users_cache") if planted == "a linked folder" else None
    code, _, err = vlattn_cli("data", "synth", "--out", str(out), *SYNTH, "--overwrite")
    assert code == 2 and "it holds files vlattn did not write: cache" in err, err
    assert tree(out) == before
    if outside is not None:
        assert tree(tmp_path / "users_cache") == outside
