"""Cross-entropy training end to end on tiny data: checkpoints, best/last, and crash-resume equality."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors.torch import load_file

import vlattn.training.checkpoint as checkpoint_module
from vlattn.errors import VlattnError
from vlattn import tasks
from vlattn.training.checkpoint import load_checkpoint
from tests.training.conftest import Crash, crash_at_step, tiny_config


def _weights(run: Path, name: str = "last") -> dict:
    return load_file(str(run / "checkpoints" / name / "model.safetensors"))


def test_xe_run_writes_checkpoints_and_logs(tiny_data: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    metrics = tasks.train(tiny_config(tiny_data), run, device="cpu")
    assert "CIDEr" in metrics and "Bleu_4" in metrics
    for name in ("last", "best"):
        files = {p.name for p in (run / "checkpoints" / name).iterdir()}
        assert {"model.safetensors", "config.json", "vocab-words.json", "train_state.pt"} <= files
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    # 24 train images x 3 captions = 72 pairs, batch 8 -> 9 steps per epoch, logged every step
    assert [r["step"] for r in train] == list(range(1, 19))
    assert sum(r["kind"] == "val" for r in records) == 2
    state = load_checkpoint(run / "checkpoints" / "last", with_state=True).train_state
    assert state["loop"]["epoch"] == 2 and state["loop"]["step"] == len(train)
    # A second run into the same directory without --resume is refused, not overwritten.
    with pytest.raises(VlattnError, match="--resume"):
        tasks.train(tiny_config(tiny_data), run, device="cpu")


def test_resume_after_crash_reaches_identical_weights(tiny_data: Path, tmp_path: Path) -> None:
    cfg = tiny_config(tiny_data, "train.checkpoint_every=3", "train.epochs=3")
    tasks.train(cfg, tmp_path / "straight", device="cpu")

    # Kill the second run at step 8 (mid-epoch 2, after the step-6 checkpoint): steps 7-8 are lost.
    with crash_at_step(8), pytest.raises(Crash):
        tasks.train(cfg, tmp_path / "crashed", device="cpu")
    assert load_checkpoint(tmp_path / "crashed" / "checkpoints" / "last", with_state=True).train_state["loop"]["step"] == 6

    tasks.train(cfg, tmp_path / "crashed", resume=True, device="cpu")
    for name in ("last", "best"):
        straight, resumed = _weights(tmp_path / "straight", name), _weights(tmp_path / "crashed", name)
        assert straight.keys() == resumed.keys()
        for key in straight:
            assert (straight[key] == resumed[key]).all(), (name, key)


def test_crash_during_checkpoint_write_keeps_previous(tiny_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "run"
    tasks.train(tiny_config(tiny_data, "train.epochs=1"), run, device="cpu")
    before = _weights(run)

    def broken_save(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint_module, "save_model", broken_save)
    with pytest.raises(OSError):
        tasks.train(None, run, overrides=["train.epochs=2"], resume=True, device="cpu")
    after = _weights(run)
    assert all((before[k] == after[k]).all() for k in before)
    assert load_checkpoint(run / "checkpoints" / "last", with_state=True).train_state["loop"]["epoch"] == 1
