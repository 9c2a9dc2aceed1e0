"""A hostile user's run directories: vlattn replaces or deletes only what it provably wrote (a marker with the run's
random id), never writes through a link it did not create, leaves no stray lock file, and resumes only on the
run's own data set and with a raised ``train.max_steps``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from vlattn.config import config_to_dict
from vlattn.training.checkpoint import load_checkpoint
from tests.test_bad_input import one_line
from tests.training.conftest import make_tiny_data, tiny_config

QUICK = ("train.epochs=1", "train.max_steps=2", "train.checkpoint_every=1")


@pytest.fixture(scope="module")
def config_file(tiny_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cfg") / "tiny.yaml"
    path.write_text(yaml.safe_dump(config_to_dict(tiny_config(tiny_data, *QUICK))))
    return path


def train(config: Path, run: Path, *extra: str) -> list[str]:
    return ["--threads", "1", "train", "--config", str(config), "--out", str(run), "--device", "cpu", *extra]


def resume(run: Path, *extra: str) -> list[str]:
    return ["--threads", "1", "train", "--out", str(run), "--resume", "--device", "cpu", *extra]


def tree(path: Path) -> dict[str, bytes | None]:
    """Every entry below ``path`` (directories as None) with the bytes of files."""
    return {str(p.relative_to(path)): None if p.is_dir() else p.read_bytes() for p in sorted(path.rglob("*"))}


def refused(code: int, err: str, message: str) -> None:
    assert code == 2 and one_line(err) and message in err, err


# --- 1. train --out recovery in a directory it then refuses --------------------------------------------------


@pytest.mark.parametrize("resuming", [False, True])
@pytest.mark.parametrize("name", ["best.old", "last.old", "best.tmp"])
def test_a_refused_out_keeps_the_users_checkpoint_folders(
    name: str, resuming: bool, config_file: Path, tmp_path: Path, vlattn_cli
) -> None:
    proj = tmp_path / "proj"
    (proj / "checkpoints" / name).mkdir(parents=True)
    (proj / "checkpoints" / name / "model.safetensors").write_text("x")
    (proj / "checkpoints" / name / "config.json").write_text("{}")
    (proj / "thesis.tex").write_text("t")
    before = tree(proj)
    code, _, err = vlattn_cli(*(resume(proj) if resuming else train(config_file, proj)))
    refused(code, err, "nothing to resume" if resuming else "not a vlattn run directory and not empty")
    assert tree(proj) == before  # nothing removed, renamed or added (no lock file either)


# --- 2. --resume and a user's backup named like a leftover ---------------------------------------------------


def test_resume_keeps_a_users_backup_of_a_checkpoint(config_file: Path, tmp_path: Path, vlattn_cli) -> None:
    run = tmp_path / "run"
    code, _, err = vlattn_cli(*train(config_file, run))
    assert code == 0, err
    backup = run / "checkpoints" / "best.old"
    shutil.copytree(run / "checkpoints" / "best", backup)
    (backup / "notes.txt").write_text("the good one")
    hidden = run / "checkpoints" / f".last.{2 ** 22 + 1}.0123456789abcdef.tmp"  # vlattn's name, no marker of its own
    hidden.mkdir()
    (hidden / "mine.txt").write_text("mine")
    before = {**tree(backup), **{f"h/{k}": v for k, v in tree(hidden).items()}}
    code, _, err = vlattn_cli(*resume(run, "--set", "train.max_steps=3"))
    assert code == 0, err
    assert {**tree(backup), **{f"h/{k}": v for k, v in tree(hidden).items()}} == before
    assert load_checkpoint(run / "checkpoints" / "last", with_state=True).train_state["loop"]["step"] == 3


def test_a_users_folder_in_place_of_a_checkpoint_is_left_with_an_error(
    config_file: Path, tmp_path: Path, vlattn_cli
) -> None:
    """``checkpoints/last`` replaced by the user's own folder (not a checkpoint of this run): the next checkpoint
    write is refused at the moment of replacement and the folder stays."""
    run = tmp_path / "run"
    assert vlattn_cli(*train(config_file, run))[0] == 0
    last = run / "checkpoints" / "last"
    shutil.copytree(last, tmp_path / "copy")
    (last / "notes.txt").write_text("mine")  # the checkpoint now holds a file vlattn did not write
    before = tree(last)
    code, _, err = vlattn_cli(*resume(run, "--set", "train.max_steps=3"))
    refused(code, err, "holds files vlattn did not write: notes.txt")
    assert tree(last) == before


# --- 3. a user's .lock, and stray lock files ------------------------------------------------------------


def test_a_users_lock_file_is_never_written(config_file: Path, tmp_path: Path, vlattn_cli) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / ".lock").write_text("my notes about locks\n")
    code, _, err = vlattn_cli(*train(config_file, shared))
    refused(code, err, "not a lock file written by vlattn")
    assert tree(shared) == {".lock": b"my notes about locks\n"}


@pytest.mark.parametrize("kind", ["user directory", "data directory", "temporary directory"])
def test_refused_commands_leave_no_lock_file(kind: str, config_file: Path, tiny_data: Path, tmp_path: Path,
                                              vlattn_cli) -> None:
    out = {"user directory": tmp_path / "home", "data directory": tmp_path / "data",
           "temporary directory": tmp_path / "tmp"}[kind]
    if kind == "data directory":
        make_tiny_data(out)
    else:
        out.mkdir()
        (out / ("thesis.tex" if kind == "user directory" else "socket-1234")).write_text("x")
    before = tree(out)
    for args in (train(config_file, out), resume(out)):
        code, _, err = vlattn_cli(*args)
        assert code == 2 and one_line(err), err
        assert tree(out) == before


def test_a_refused_resume_of_a_run_leaves_no_lock_file(config_file: Path, tmp_path: Path, vlattn_cli) -> None:
    run = tmp_path / "run"
    assert vlattn_cli(*train(config_file, run))[0] == 0
    assert not (run / ".lock").exists()  # a finished run holds no lock file
    before = tree(run)
    code, _, err = vlattn_cli(*resume(run, "--set", "model.d_model=64"))
    refused(code, err, "cannot resume with model.d_model=64")
    assert tree(run) == before


# --- 4. a symbolic link at RUN/.lock ---------------------------------------------------------------------


@pytest.mark.parametrize("existing_run", [False, True])
def test_a_linked_lock_is_not_followed(existing_run: bool, config_file: Path, tmp_path: Path, vlattn_cli) -> None:
    victim = tmp_path / "victim"
    victim.write_text("IMPORTANT\n")
    shared = tmp_path / "shared"
    if existing_run:
        assert vlattn_cli(*train(config_file, shared))[0] == 0
    else:
        shared.mkdir()
    (shared / ".lock").symlink_to(victim)
    code, _, err = vlattn_cli(*(resume(shared, "--set", "train.max_steps=3") if existing_run else
                                train(config_file, shared)))
    refused(code, err, ".lock: is a symbolic link; vlattn does not write through links it did not create")
    assert victim.read_text() == "IMPORTANT\n" and (shared / ".lock").is_symlink()


# --- resume semantics ------------------------------------------------------------------------------------


def test_resume_on_another_data_set_is_refused_and_on_the_moved_one_accepted(
    config_file: Path, tiny_data: Path, tmp_path: Path, vlattn_cli
) -> None:
    run = tmp_path / "run"
    assert vlattn_cli(*train(config_file, run))[0] == 0
    other = make_tiny_data(tmp_path / "other", seed=1)  # the same files' names and sizes, other features
    before = tree(run)
    code, _, err = vlattn_cli(*resume(run, "--set", f"data.root={other}", "--set", "train.max_steps=3"))
    refused(code, err, f"cannot resume: data.root={other} holds another data set than the run was trained on "
                       "(features differ)")
    assert tree(run) == before
    moved = tmp_path / "moved"
    shutil.copytree(tiny_data, moved)
    code, _, err = vlattn_cli(*resume(run, "--set", f"data.root={moved}", "--set", "train.max_steps=3"))
    assert code == 0, err
    starts = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    assert {"key": "data.root", "before": str(tiny_data), "after": str(moved), "source": "--set"} in starts[-1]["settings"]


def test_resume_with_a_higher_max_steps_trains_on(config_file: Path, tmp_path: Path, vlattn_cli,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    """A run stopped by ``train.max_steps=2`` inside its only epoch goes on to step 5 when resumed with
    ``max_steps=5``; resumed with the limit it already reached, it says why nothing is trained."""
    run = tmp_path / "run"
    assert vlattn_cli(*train(config_file, run))[0] == 0
    state = load_checkpoint(run / "checkpoints" / "last", with_state=True).train_state["loop"]
    assert (state["step"], state["epoch"]) == (2, 0)
    code, _, err = vlattn_cli(*resume(run, "--set", "train.max_steps=5"))
    assert code == 0, err
    assert load_checkpoint(run / "checkpoints" / "last", with_state=True).train_state["loop"]["step"] == 5
    caplog.clear()
    code, _, err = vlattn_cli(*resume(run))
    assert code == 0, err
    assert "nothing to train: step 5 has reached train.max_steps=5" in caplog.text


# --- eval outputs -----------------------------------------------------------------------------------------


def test_eval_writes_only_into_its_own_output_directory(tiny_run: Path, tmp_path: Path, vlattn_cli) -> None:
    """``RUN/eval`` created by vlattn is reused; a user's folder there stays, after the metrics are printed."""
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    shutil.rmtree(run / "eval", ignore_errors=True)
    args = ["--threads", "1", "eval", "--checkpoint", str(run), "--device", "cpu", "--beam-size", "1"]
    for _ in range(2):  # created, then its own files replaced
        code, out, err = vlattn_cli(*args)
        assert code == 0 and "CIDEr" in out, err
    shutil.rmtree(run / "eval")
    (run / "eval").mkdir()
    (run / "eval" / "test_metrics.json").write_text("my own table")
    code, out, err = vlattn_cli(*args)
    refused(code, err, "eval: not an output directory of vlattn eval")
    assert "CIDEr" in out and tree(run / "eval") == {"test_metrics.json": b"my own table"}
