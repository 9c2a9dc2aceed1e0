"""Run directories under real crashes: one writer (an OS lock), kill -9 during checkpoint writes, SIGINT/SIGTERM,
records after a resume, and failed commands that leave the run's files as they were.

The crashing runs are child processes (tests/training/subproc.py) stopped at an exact point, then killed or
signalled for real; the same run without interruption is the reference (bit-identical weights expected).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml
from safetensors.torch import load_file

from vlattn import tasks
from vlattn.config import config_to_dict
from vlattn.training.checkpoint import load_checkpoint
from vlattn.training.rundir import run_lock
from tests.conftest import THREADS
from tests.test_bad_input import one_line
from tests.training.conftest import Crash, make_tiny_vqa_data, tiny_config, tiny_vqa_config
from tests.training.subproc import ROOT, Child

SETTINGS = ("train.epochs=2", "train.checkpoint_every=4")  # 9 steps per epoch: checkpoints at 4, 8, 9 (+best), ...


@pytest.fixture(scope="module")
def config_file(tiny_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cfg") / "tiny.yaml"
    path.write_text(yaml.safe_dump(config_to_dict(tiny_config(tiny_data, *SETTINGS))))
    return path


@pytest.fixture(scope="module")
def straight(tiny_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reference: the same run without interruption."""
    run = tmp_path_factory.mktemp("straight") / "run"
    tasks.train(tiny_config(tiny_data, *SETTINGS), run, device="cpu")
    return run


def weights(run: Path, name: str = "last") -> dict:
    return load_file(str(run / "checkpoints" / name / "model.safetensors"))


def assert_same_weights(run: Path, reference: Path) -> None:
    for name in ("last", "best"):
        ours, theirs = weights(run, name), weights(reference, name)
        assert ours.keys() == theirs.keys()
        assert all((ours[k] == theirs[k]).all() for k in ours), name


def records(run: Path, file: str = "metrics.jsonl") -> list[dict]:
    return [json.loads(line) for line in (run / file).read_text().splitlines()]


def assert_each_record_once(run: Path) -> None:
    counts = Counter((r["kind"], r["step"]) for r in records(run))
    assert max(counts.values()) == 1, [key for key, n in counts.items() if n > 1]


def train_args(config: Path, run: Path, *extra: str) -> list[str]:
    """This process's torch threads (tests/conftest.py), as the in-process reference runs: the same float sums, the
    same weights."""
    return ["--threads", str(THREADS), "train", "--config", str(config), "--out", str(run), "--device", "cpu", *extra]


def snapshot(run: Path) -> dict[str, bytes]:
    """Every file of a run directory (the lock file aside) and its bytes."""
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file() and p.name != ".lock"}


# --- one writer per run directory ------------------------------------------------------------------------


def test_a_second_train_on_a_running_run_exits_2_naming_the_holder(
    config_file: Path, straight: Path, tmp_path: Path, vlattn_cli
) -> None:
    run = tmp_path / "run"
    child = Child(tmp_path, "step:6", *train_args(config_file, run))  # holds the run at step 6 (checkpoint at 4)
    holder = child.wait_ready()
    try:
        before = snapshot(run)
        for extra in ([], ["--resume"]):
            code, _, err = vlattn_cli(*train_args(config_file, run, *extra))
            assert code == 2 and one_line(err), err
            assert f"run directory is in use by process {holder} (another vlattn train)" in err
        assert snapshot(run) == before  # the refused commands changed nothing
    finally:
        child.kill()
    # kill -9 released the lock: the run resumes from its step-4 checkpoint
    assert load_checkpoint(run / "checkpoints" / "last", with_state=True).train_state["loop"]["step"] == 4
    code, _, err = vlattn_cli("train", "--out", str(run), "--resume", "--device", "cpu")
    assert code == 0, err
    assert_same_weights(run, straight)
    assert_each_record_once(run)


def test_the_lock_is_the_os_lock_of_the_holding_process(tmp_path: Path, vlattn_cli, config_file: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    with run_lock(run):
        code, _, err = vlattn_cli(*train_args(config_file, run))
        assert sorted(p.name for p in run.iterdir()) == [".lock"]  # nothing else was written
    assert code == 2 and f"in use by process {os.getpid()}" in err
    assert not any(run.iterdir())  # the lock file goes with its holder


def test_forked_children_do_not_keep_the_lock(tmp_path: Path) -> None:
    """DataLoader workers are forked from the training process; its lock must die with it, not with them."""
    script = f"""
import os, sys, time
from pathlib import Path
from vlattn.training.rundir import run_lock
with run_lock(Path({str(tmp_path)!r})):
    child = os.fork()
    if child == 0:
        time.sleep(120)
        os._exit(0)
    print(child, flush=True)
    time.sleep(120)
"""
    holder = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    child = int(holder.stdout.readline())
    try:
        holder.kill()
        holder.wait(timeout=60)
        os.kill(child, 0)  # the forked child still lives ...
        with run_lock(tmp_path):  # ... and does not hold the lock
            pass
    finally:
        os.kill(child, signal.SIGKILL)


# --- kill -9 during checkpoint writes --------------------------------------------------------------------


def kill_during_first_checkpoint(config_file: Path, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    child = Child(tmp_path, "checkpoint:1", *train_args(config_file, run))
    child.wait_ready()
    child.kill()
    leftovers = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert len(leftovers) == 1 and leftovers[0].startswith(".last.") and leftovers[0].endswith(".tmp"), leftovers
    return run


def test_kill_during_the_first_checkpoint_write_then_resume_starts_over(
    config_file: Path, straight: Path, tmp_path: Path, vlattn_cli, caplog: pytest.LogCaptureFixture
) -> None:
    run = kill_during_first_checkpoint(config_file, tmp_path)
    code, _, err = vlattn_cli("train", "--out", str(run), "--resume", "--device", "cpu")
    assert code == 0, err
    assert "no complete checkpoint (its first checkpoint write was interrupted): starting the run over" in caplog.text
    assert_same_weights(run, straight)
    assert_each_record_once(run)
    assert not [p for p in (run / "checkpoints").iterdir() if p.name.startswith(".")]
    starts = records(run, "history.jsonl")
    assert [s["resumed_from"] for s in starts] == [None, None] and "starting the run over" in starts[1]["notes"][-1]


def test_kill_during_the_first_checkpoint_write_does_not_block_a_fresh_start(
    config_file: Path, straight: Path, tmp_path: Path, vlattn_cli
) -> None:
    run = kill_during_first_checkpoint(config_file, tmp_path)
    code, _, err = vlattn_cli(*train_args(config_file, run))
    assert code == 0, err
    assert_same_weights(run, straight)
    assert_each_record_once(run)


def test_kill_between_the_renames_of_a_checkpoint_swap(config_file: Path, straight: Path, tmp_path: Path, vlattn_cli) -> None:
    run = tmp_path / "run"
    child = Child(tmp_path, "swap:2", *train_args(config_file, run))  # the step-8 checkpoint replacing step 4's
    child.wait_ready()
    child.kill()
    names = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert "last" not in names and sorted(n.rsplit(".", 1)[1] for n in names) == ["old", "tmp"], names
    code, _, err = vlattn_cli("train", "--out", str(run), "--resume", "--device", "cpu")
    assert code == 0, err
    start = records(run, "history.jsonl")[-1]
    assert start["resumed_from"] == "checkpoints/last" and "completed a checkpoint swap" in start["notes"][0]
    assert start["step"] == 8  # the new checkpoint was complete: nothing is trained twice
    assert_same_weights(run, straight)
    assert_each_record_once(run)


# --- SIGINT / SIGTERM ------------------------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_saves_a_resumable_checkpoint_at_the_next_step(
    sig: signal.Signals, config_file: Path, straight: Path, tmp_path: Path, vlattn_cli
) -> None:
    run = tmp_path / "run"
    child = Child(tmp_path, "signal:6", *train_args(config_file, run))
    pid = child.wait_ready()
    os.kill(pid, sig)
    code, err = child.finish()
    assert code == 128 + sig, err
    last = err.rstrip("\n").split("\n")[-1]
    assert last == (f"vlattn: stopped by {sig.name} at step 6 (epoch 1): checkpoint saved in {run}/checkpoints/last; "
                    f"continue with: vlattn train --out {run} --resume"), err
    assert "Traceback" not in err
    assert load_checkpoint(run / "checkpoints" / "last", with_state=True).train_state["loop"]["step"] == 6
    code, _, err = vlattn_cli("train", "--out", str(run), "--resume", "--device", "cpu")
    assert code == 0, err
    assert_same_weights(run, straight)
    assert_each_record_once(run)


def test_a_second_signal_stops_at_once_without_saving(config_file: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    child = Child(tmp_path, "signals:6", *train_args(config_file, run))
    pid = child.wait_ready()
    os.kill(pid, signal.SIGINT)
    child.wait_ready(".2")
    os.kill(pid, signal.SIGINT)
    code, err = child.finish()
    assert code == 130 and "Traceback" not in err, err
    assert err.rstrip("\n").split("\n")[-1].startswith("vlattn: stopped at once by a second SIGINT, without saving")
    assert load_checkpoint(run / "checkpoints" / "last", with_state=True).train_state["loop"]["step"] == 4


# --- metrics.jsonl after a resume ------------------------------------------------------------------------


def test_records_after_the_checkpoint_resumed_are_dropped(
    tiny_data: Path, straight: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checkpoint at step 9 (the last of epoch 1), then validation logged, then a crash while ``best`` is written:
    the resumed run validates epoch 1 again, and its record appears once."""
    import vlattn.training.stage as stage_module

    real, calls = stage_module.save_checkpoint, {"n": 0}

    def crash_on_second(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise Crash("killed while writing best")
        return real(*args, **kwargs)

    run = tmp_path / "run"
    cfg = tiny_config(tiny_data, "train.epochs=2", "train.checkpoint_every=9")
    with monkeypatch.context() as patch, pytest.raises(Crash):
        patch.setattr(stage_module, "save_checkpoint", crash_on_second)
        tasks.train(cfg, run, device="cpu")
    assert [(r["kind"], r["step"]) for r in records(run)][-2:] == [("train", 9), ("val", 9)]
    assert not (run / "checkpoints" / "best").exists()
    tasks.train(None, run, resume=True, device="cpu")
    assert_each_record_once(run)
    assert [r["step"] for r in records(run) if r["kind"] == "train"] == list(range(1, 19))
    assert [r["step"] for r in records(run) if r["kind"] == "val"] == [9, 18]
    assert_same_weights(run, straight)  # ``best`` included: written by the resumed run


# --- VQA runs --------------------------------------------------------------------------------------------


def test_a_vqa_run_killed_mid_epoch_resumes_to_the_weights_of_an_uninterrupted_one(
    tmp_path: Path, vlattn_cli, caplog: pytest.LogCaptureFixture
) -> None:
    """The run directory rules are the trainer's, not a task's: a tiny MCAN (72 questions, 9 steps an epoch) is
    killed at step 6, a second train is refused meanwhile, and ``--resume`` (from the step-4 checkpoint, with
    the run's own config) ends bit-identical to the same run without interruption."""
    root = make_tiny_vqa_data(tmp_path / "data")
    cfg = tiny_vqa_config(root, *SETTINGS)
    config = tmp_path / "vqa.yaml"
    config.write_text(yaml.safe_dump(config_to_dict(cfg)))
    straight_run, run = tmp_path / "straight", tmp_path / "run"
    tasks.train(cfg, straight_run, device="cpu")
    child = Child(tmp_path, "step:6", *train_args(config, run))
    holder = child.wait_ready()
    code, _, err = vlattn_cli(*train_args(config, run, "--resume"))
    assert code == 2 and f"in use by process {holder}" in err, err
    child.kill()
    code, _, err = vlattn_cli("train", "--out", str(run), "--resume", "--device", "cpu")
    assert code == 0, err
    assert f"resuming from {run}/checkpoints/last" in caplog.text
    assert records(run, "history.jsonl")[-1]["step"] == 4
    assert_same_weights(run, straight_run)
    assert_each_record_once(run)
    assert [r["step"] for r in records(run) if r["kind"] == "data"] == [0, 4]  # one data summary per start


# --- permissions -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("mask", [0o022, 0o027])
def test_run_files_get_the_permissions_of_the_umask(mask: int, tiny_data: Path, tmp_path: Path) -> None:
    """Checkpoints, config, logs: as ``open``/``mkdir`` would create them (not mkstemp's 0600/0700); the lock file is gone."""
    old = os.umask(mask)
    try:
        tasks.train(tiny_config(tiny_data, "train.epochs=1", "train.max_steps=2"), tmp_path / "run", device="cpu")
    finally:
        os.umask(old)
    entries = [tmp_path / "run", *(tmp_path / "run").rglob("*")]
    assert {oct(p.stat().st_mode & 0o777) for p in entries if p.is_dir()} == {oct(0o777 & ~mask)}
    files = {str(p.relative_to(tmp_path)): oct(p.stat().st_mode & 0o777) for p in entries if p.is_file()}
    assert {"run/config.yaml", "run/checkpoints/last/model.safetensors"} <= files.keys() and "run/.lock" not in files
    assert set(files.values()) == {oct(0o666 & ~mask)}, files
