"""Early stopping (``train.patience`` / ``train.scst_patience``): a stage ends after that many validated epochs
without a better selection metric, as the released M2 train.py does with 5; the count survives a resume."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from vlattn.training.logging import RunLog
from vlattn.training.loop import LoopOptions, Trainer
from vlattn.training.optim import build_optimizer
from vlattn.training.schedules import Constant

SCORES = [1.0, 2.0, 2.0, 1.5, 3.0, 2.5, 2.9, 2.0, 4.0]  # improvements at epochs 0, 1, 4, 8


def scripted(patience: int, saved: dict, scores: list[float] = SCORES) -> Trainer:
    """A trainer whose validation returns ``scores`` epoch by epoch."""
    model = nn.Linear(2, 1)
    epochs = iter(scores)
    return Trainer(
        model=model, optimizer=build_optimizer(model, (0.9, 0.98), 0.0), schedule=Constant(1e-3),
        objective=lambda m, b: (m(b["x"]).sum(), {}), dataset=[torch.ones(2)] * 4,
        collate=lambda rows: {"x": torch.stack(rows)}, validate=lambda m: {"CIDEr": next(epochs)},
        write_checkpoint=lambda name, state: saved.update({name: state}),
        options=LoopOptions(stage="xe", epochs=len(scores), batch_size=2, seed=0, selection_metric="CIDEr",
                            patience=patience),
    )


def epochs_run(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_patience_ends_the_stage_after_epochs_without_improvement(tmp_path: Path) -> None:
    for patience, expected_epochs in ((0, 9), (1, 3), (2, 4), (3, 8), (4, 9)):
        run_dir = tmp_path / f"p{patience}"
        saved: dict = {}
        trainer = scripted(patience, saved)
        last = trainer.fit(RunLog(run_dir))
        records = epochs_run(run_dir)
        assert [r["CIDEr"] for r in records if r["kind"] == "val"] == SCORES[:expected_epochs], patience
        assert last["CIDEr"] == SCORES[expected_epochs - 1]
        stops = [r for r in records if r["kind"] == "stop"]
        assert len(stops) == (1 if expected_epochs < len(SCORES) else 0), patience
        assert trainer.state.best_score == max(SCORES[:expected_epochs])
    # patience 3: epochs 5, 6, 7 did not beat 3.0 (epoch 4), so epoch 8 (4.0) is never run
    assert "no better CIDEr for 3 epochs" in epochs_run(tmp_path / "p3")[-1]["reason"]


def test_the_count_survives_a_resume(tmp_path: Path) -> None:
    saved: dict = {}
    first = scripted(3, saved, SCORES[:6])  # stops being run after epoch 5: 2 stale epochs
    first.fit(RunLog(tmp_path / "a"))
    assert saved["last"]["loop"]["stale_epochs"] == 1  # epoch 5 (2.5) after the best 3.0
    resumed = scripted(3, {}, SCORES[6:])
    resumed.options.epochs = len(SCORES)
    resumed.restore(saved["last"])
    resumed.fit(RunLog(tmp_path / "b"))
    assert [r["CIDEr"] for r in epochs_run(tmp_path / "b") if r["kind"] == "val"] == [2.9, 2.0]
    legacy = dict(saved["last"], loop={k: v for k, v in saved["last"]["loop"].items() if k != "stale_epochs"})
    older = scripted(3, {}, SCORES[6:])
    older.restore(legacy)  # checkpoints written before patience existed restart the count
    assert older.state.stale_epochs == 0
