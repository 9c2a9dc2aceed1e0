"""Training with DataLoader workers (batches handed over in reused shared memory) takes the steps training in
the main process takes: the same losses, the same weights."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file

from vlattn import tasks
from tests.training.conftest import tiny_config


def losses(run: Path) -> list[float]:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in records if r["kind"] == "train"]


def test_workers_train_as_the_main_process_does(tiny_data: Path, tmp_path: Path) -> None:
    for workers in (0, 2):
        tasks.train(tiny_config(tiny_data, "train.epochs=2", f"data.num_workers={workers}"), tmp_path / str(workers),
                    device="cpu")
    assert losses(tmp_path / "2") == losses(tmp_path / "0") and len(losses(tmp_path / "0")) > 4
    weights = [load_file(tmp_path / str(w) / "checkpoints" / "last" / "model.safetensors") for w in (0, 2)]
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][key], weights[1][key]) for key in weights[0])
