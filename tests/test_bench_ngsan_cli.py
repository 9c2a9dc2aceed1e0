"""benchmarks/synth_ngsan.py through its command line: ``--beam-size`` (auto or a fixed K) is checked, and a run
evaluated at another decoding than the one asked is not tabulated as if it had been decoded that way."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "synth_ngsan.py"


def driver(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], cwd=REPO, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("value", ["0", "wide", "2.5"])
def test_a_bad_beam_size_is_a_usage_error(tmp_path: Path, value: str) -> None:
    done = driver("--data", tmp_path, "--runs", tmp_path, "--beam-size", value, "--finished-only", "--no-write")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"argument --beam-size: expected auto or a whole number >= 1, got '{value}'" in done.stderr


@pytest.mark.parametrize(("report", "asked"), [
    ({"beam_size": 3}, "auto"),  # a fixed beam 3 is not the beam chosen on validation
    ({"beam_size": 1, "beam_choice": {"beam_size": 1}}, "1"),  # chosen on validation, not asked as a fixed beam
    ({"beam_size": 2}, "3"),
])
def test_a_run_decoded_otherwise_is_not_tabulated(tmp_path: Path, report: dict, asked: str) -> None:
    data, runs = tmp_path / "data", tmp_path / "runs"
    data.mkdir()
    runs.mkdir()
    (data / "scenes.json").write_text(json.dumps({"info": {"next_to_gap": 0.1}, "images": []}))
    (runs / "san-s1.eval.json").write_text(json.dumps({**report, "scores": {"CIDEr": 0.5}}))
    done = driver("--data", data, "--runs", runs, "--models", "SAN", "--seeds", "1", "--beam-size", asked,
                  "--finished-only", "--no-write")
    assert done.returncode == 1 and done.stderr.strip() == f"no evaluated runs under {runs}"
