"""benchmarks/synth_pretrain.py through its command line at a tiny size, for the LXMERT+CATT variant: the pretraining
run and the scratch fine-tuning run fit their dictionaries by k-means, the fine-tuning run started from the
pretrained one loads them instead, the table has the variant's three rows, and finished runs are not run again."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from vlattn.data.synth import generate

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "synth_pretrain.py"
TINY = ["model.feature_dim=8", "model.d_model=16", "model.num_heads=2", "model.d_ff=32", "model.encoder_layers=1",
        "model.decoder_layers=1", "model.max_positions=32", "train.batch_size=16", "train.log_every=1",
        "data.max_regions=8", "eval.batch_size=32", "model.options.image_dictionary.size=6",
        "model.options.word_dictionary.size=5"]
NAME = "LXMERT+CATT (dictionaries of 100, k-means)"


def prepared_modules(run: Path) -> str:
    """What a run's prepare step initialised from the data ("" for a run started from --init)."""
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return "; ".join(r["modules"] for r in records if r["kind"] == "prepare")


def test_lxmert_catt_pretrains_fine_tunes_and_tabulates(tmp_path: Path) -> None:
    data = generate(tmp_path / "synth", images=40, seed=6, feature_dim=8, extractor_epochs=1, val_size=10,
                    test_size=4)
    runs = tmp_path / "runs"
    command = [sys.executable, str(SCRIPT), "--data", str(data), "--runs", str(runs), "--seeds", "3", "--variants",
               "lxmert-catt", "--epochs", "1", "--pretrain-epochs", "1", "--no-write",
               *(word for item in TINY for word in ("--set", item))]
    output = subprocess.run(command, check=True, capture_output=True, text=True, timeout=600).stdout
    table = [line for line in output.splitlines() if line.startswith("| ")]
    for run in ("pretrain", "scratch"):
        prepared = prepared_modules(runs / f"lxmert-catt-{run}-s3")
        assert "encoder.image_dictionary" in prepared and "encoder.word_dictionary" in prepared
    assert prepared_modules(runs / "lxmert-catt-pretrained-s3") == ""
    for run in ("pretrain", "pretrained", "scratch"):
        assert "kind: lxmert_catt" in (runs / f"lxmert-catt-{run}-s3" / "config.yaml").read_text()
    for start in ("scratch", "pretrained", "pretrained − scratch (paired)"):
        assert sum(line.startswith(f"| {NAME} | {start} | 1 | ") for line in table) == 1
    assert "--variants lxmert-catt --epochs 1 --pretrain-epochs 1" in output
    reports = sorted(runs.glob("*.eval.json"))
    assert [r.name for r in reports] == ["lxmert-catt-pretrained-s3.eval.json", "lxmert-catt-scratch-s3.eval.json"]
    stamps = [r.stat().st_mtime_ns for r in reports]
    again = subprocess.run(command, check=True, capture_output=True, text=True, timeout=600).stdout
    assert [line for line in again.splitlines() if line.startswith("| ")] == table
    assert [r.stat().st_mtime_ns for r in reports] == stamps  # the finished runs were skipped
