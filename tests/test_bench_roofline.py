"""The roofline benchmark (benchmarks/bench_roofline.py) through its command line at its reduced size (``--quick``):
oneDNN's packed vocabulary projection is counted as the GEMM it replaces, and the best-kernel bound (each product
by a weight at the faster of aten's GEMM and oneDNN's linear) is never above the plain one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vlattn.layers.packed import ONEDNN_LINEAR

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not ONEDNN_LINEAR, reason="torch built without oneDNN's linear")


def roofline(out: Path, *options: str) -> dict[tuple[str, str], dict]:
    """The ``--json`` rows of a reduced beam-search run, by (run, model)."""
    command = [sys.executable, "benchmarks/bench_roofline.py", "--quick", "--runs", "beam search", "--json", str(out),
               *options]
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True, text=True, timeout=900)
    return {(row["run"], row["model"]): row for row in json.loads(out.read_text())["rows"]}


def test_packed_projection_counts_as_its_gemm_and_best_kernel_bound_is_lower(tmp_path: Path) -> None:
    plain = roofline(tmp_path / "plain.json")
    packed = roofline(tmp_path / "packed.json", "--packed-output")
    assert set(plain) == set(packed) == {("beam search", "Transformer"), ("beam search", "M2")}
    for key, row in plain.items():
        # the same seeded models and searches: every FLOP counted alike whichever kernel runs the projection
        assert (packed[key]["flops"], packed[key]["sdpa_flops"]) == (row["flops"], row["sdpa_flops"]) and row["flops"] > 0
        for figures in (row, packed[key]):
            assert figures["best_rate"] >= figures["gemm_rate"] > 0
            assert figures["best_bound"] <= figures["bound"] and figures["best_ratio"] >= figures["ratio"] > 0
