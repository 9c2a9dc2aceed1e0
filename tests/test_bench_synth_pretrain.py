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
    assert [r.name for r in reports] == ["lxmert-catt-pretrain-s3.eval.json", "lxmert-catt-pretrained-s3.eval.json",
                                         "lxmert-catt-scratch-s3.eval.json"]
    control = json.loads(reports[0].read_text())
    assert control["split"] == "val" and 0 <= control["words_other_image_accuracy"] <= 100
    stamps = [r.stat().st_mtime_ns for r in reports]
    again = subprocess.run(command, check=True, capture_output=True, text=True, timeout=600).stdout
    assert [line for line in again.splitlines() if line.startswith("| ")] == table
    assert [r.stat().st_mtime_ns for r in reports] == stamps  # the finished runs were skipped


def write_runs(runs: Path, key: str, scratch: list[float], pretrained: list[float]) -> None:
    """Finished runs of one variant as the script leaves them: the evaluations, the pretraining run's on val."""
    for seed, (a, b) in enumerate(zip(scratch, pretrained), start=1):
        for start, overall in (("scratch", a), ("pretrained", b)):
            report = {"overall": overall, "perAnswerType": {"yes/no": overall, "number": overall / 2, "other": overall - 20}}
            (runs / f"{key}-{start}-s{seed}.eval.json").write_text(json.dumps(report))
        val = {"split": "val", **{f"{task}_accuracy": 10.0 * seed + offset for offset, task in enumerate(
            ("words", "words_other_image", "matching", "objects", "attributes", "answers"))}}
        (runs / f"{key}-pretrain-s{seed}.eval.json").write_text(json.dumps(val))


def test_collected_table_statistics(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    write_runs(runs, "lxmert", [50.0, 52.0, 54.0], [54.0, 57.0, 60.0])  # paired differences 4, 5, 6
    write_runs(runs, "lw-lxmert", [60.0, 61.0, 62.0], [56.0, 56.0, 56.0])  # -4, -5, -6
    write_runs(runs, "lxmert-catt", [50.0, 50.0, 50.0], [48.0, 51.0, 54.0])  # -2, 1, 4
    command = [sys.executable, str(SCRIPT), "--runs", str(runs), "--variants", "lxmert", "lxmert-catt", "lw-lxmert",
               "--collect-only", "--no-write"]
    output = subprocess.run(command, check=True, capture_output=True, text=True, timeout=120).stdout
    # t(0.975, 2 df) = 4.303: half-width 4.303 x sd / sqrt(3)
    assert "| LXMERT | scratch | 3 | 52.00 ± 4.97 | 52.00 ± 4.97 | 26.00 ± 2.48 | 32.00 ± 4.97 |" in output
    assert "| LXMERT | pretrained | 3 | 57.00 ± 7.45 |" in output
    assert "| LXMERT | pretrained − scratch (paired) | 3 | 5.00 ± 2.48 |" in output
    assert "| LW-LXMERT 1x (G-MHA + G-FFN, k=2) | pretrained − scratch (paired) | 3 | -5.00 ± 2.48 |" in output
    assert f"| {NAME} | pretrained − scratch (paired) | 3 | 1.00 ± 7.45 |" in output
    assert (f"LXMERT: helps / {NAME}: no significant difference / LW-LXMERT 1x (G-MHA + G-FFN, k=2): hurts"
            in output)
    assert ("LXMERT: words 20.0, words with another image 21.0, matching 22.0, objects 23.0, attributes 24.0, answers 25.0"
            in output)
