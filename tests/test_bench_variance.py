"""benchmarks/bench_variance.py through its command line: the jobs it plans (``--dry-run``: commands, kernel
environments, finished jobs and the demo's XE stage reused), the table and targets it reports (``--report-only`` on
result files written here, against hand-computed statistics) and one real job on a tiny synthetic set."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from vlattn.data.synth import generate

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "bench_variance.py"


def bench(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], cwd=REPO, capture_output=True, text=True,
                          timeout=600)


def plan(work: Path, *args: str) -> dict[str, list[str] | None]:
    """``--dry-run``'s jobs in order: the command line of each job to run (its environment first), None if
    finished."""
    done = bench("--dry-run", "--work", work, *args)
    assert done.returncode == 0, done.stderr
    jobs: dict[str, list[str] | None] = {}
    for line in done.stdout.splitlines():
        name, _, rest = line.removeprefix("[variance] ").partition(": ")
        assert rest == "finished" or rest.startswith("run "), line
        jobs[name] = None if rest == "finished" else shlex.split(rest.removeprefix("run "))
    return jobs


def write_result(work: Path, name: str, figures: dict, overrides: list[str] | None = None) -> None:
    results = work / "results"
    results.mkdir(parents=True, exist_ok=True)
    result = {"job": name, "capability": "X", "seconds": 1.0, "overrides": overrides or [], "figures": figures}
    (results / f"{name}.json").write_text(json.dumps(result))


def test_planned_commands_and_kernel_environments(tmp_path: Path) -> None:
    jobs = plan(tmp_path, "--presets", "xe:m2-demo", "demo", "demo-vqa", "vqa:vqa-catt-demo", "--seeds", "7", "8",
                "--kernels", "avx2", "best", "--set", "train.epochs=2")
    # seed by seed, then preset, then kernel: a benchmark stopped early has the same seeds of every preset
    presets = ["xe-m2-demo", "demo", "demo-vqa", "vqa-vqa-catt-demo"]
    assert list(jobs) == [f"{p}-{k}-s{s}" for s in (7, 8) for p in presets for k in ("avx2", "best")]
    xe = jobs["xe-m2-demo-avx2-s7"]
    assert xe[0] == "ATEN_CPU_CAPABILITY=avx2" and xe[2:4] == ["-m", "vlattn.demo"] and "--no-scst" in xe
    assert xe[xe.index("--config") + 1] == "m2-demo"
    assert xe[xe.index("--data") + 1] == str(tmp_path / "data")
    assert xe[xe.index("--out") + 1] == str(tmp_path / "runs" / "xe-m2-demo-avx2-s7")
    assert xe[-4:] == ["--set", "train.seed=7", "--set", "train.epochs=2"]
    demo = jobs["demo-best-s8"]
    assert demo[0] == sys.executable  # best: no ATEN_CPU_CAPABILITY
    assert demo[1:3] == ["-m", "vlattn.demo"] and "--no-scst" not in demo and demo[demo.index("--config") + 1] == "demo"
    vqa, catt = jobs["demo-vqa-best-s7"], jobs["vqa-vqa-catt-demo-avx2-s8"]
    assert vqa[1:3] == ["-m", "vlattn.demo_vqa"] and vqa[vqa.index("--config") + 1] == "vqa-demo"
    assert catt[2:4] == ["-m", "vlattn.demo_vqa"] and catt[catt.index("--config") + 1] == "vqa-catt-demo"
    assert "--no-scst" not in vqa + catt


@pytest.mark.parametrize("text", ["demo-xe", "xe:", "scst:demo", "vqa"])
def test_bad_preset_names_are_usage_errors(tmp_path: Path, text: str) -> None:
    done = bench("--dry-run", "--work", tmp_path, "--presets", text)
    assert done.returncode == 2 and done.stdout == ""
    assert f"{text!r}: not demo, demo-vqa, xe:CONFIG or vqa:CONFIG" in done.stderr


def test_finished_jobs_are_not_planned_again(tmp_path: Path) -> None:
    write_result(tmp_path, "vqa-vqa-lw-demo-avx2-s5", {"overall": 88.5})
    jobs = plan(tmp_path, "--presets", "vqa:vqa-lw-demo", "--seeds", "5", "6", "--kernels", "avx2")
    assert jobs == {"vqa-vqa-lw-demo-avx2-s5": None, "vqa-vqa-lw-demo-avx2-s6": jobs["vqa-vqa-lw-demo-avx2-s6"]}
    assert jobs["vqa-vqa-lw-demo-avx2-s6"] is not None


def test_demo_xe_stage_is_taken_from_the_demo_job(tmp_path: Path) -> None:
    """An ``xe:demo`` job is the XE stage of the ``demo`` job of its seed, kernel and settings: not run again."""
    write_result(tmp_path, "demo-best-s3", {"XE CIDEr-D": 0.9, "XE beam": 1, "SCST CIDEr-D": 1.2, "SCST beam": 3},
                 ["eval.batch_size=8"])
    args = ["--presets", "xe:demo", "xe:m2-demo", "--seeds", "3", "4", "--kernels", "best", "avx2"]
    jobs = plan(tmp_path, *args, "--set", "eval.batch_size=8")
    assert [name for name, cmd in jobs.items() if cmd is None] == ["xe-demo-best-s3"]
    # other settings: the demo job's XE stage is not that job's
    assert all(cmd is not None for cmd in plan(tmp_path, *args).values())
    report = bench("--report-only", "--work", tmp_path, "--presets", "xe:demo", "--seeds", "3", "--kernels", "best",
                   "--set", "eval.batch_size=8", "--floors", floors(tmp_path, {"constant caption CIDEr-D": 0.3}))
    assert report.returncode == 0, report.stderr
    assert "| xe:demo | XE CIDEr-D | best (" in report.stdout and "SCST" not in report.stdout.split("Floors")[0]
    assert "| xe:demo | beam sizes used | all | XE beam 1 |" in report.stdout


def floors(work: Path, values: dict[str, float]) -> Path:
    path = work / "floors.json"
    path.write_text(json.dumps(values))
    return path


def rows(stdout: str) -> list[list[str]]:
    """The table's cells, the capability in parentheses dropped (it depends on the host's CPU)."""
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in stdout.splitlines() if line.startswith("| ")]
    return [[c.split(" (")[0] for c in row] for row in cells[1:]]


def test_table_statistics_over_seeds_and_kernels(tmp_path: Path) -> None:
    write_result(tmp_path, "xe-m2-demo-avx2-s1", {"XE CIDEr-D": 1.0, "XE beam": 1})
    write_result(tmp_path, "xe-m2-demo-avx2-s2", {"XE CIDEr-D": 3.0, "XE beam": 3})
    write_result(tmp_path, "xe-m2-demo-best-s1", {"XE CIDEr-D": 2.0, "XE beam": 1})
    done = bench("--report-only", "--work", tmp_path, "--presets", "xe:m2-demo", "--seeds", "1", "2",
                 "--kernels", "avx2", "best", "--floors", floors(tmp_path, {"constant caption CIDEr-D": 0.5}))
    assert done.returncode == 1, done.stderr  # xe-m2-demo-best-s2 has not run: reported, but not complete
    # avx2: mean 2, sd sqrt(((1-2)^2 + (3-2)^2) / 1) = 1.414214; best: one run, no sd; all three: mean 2, sd 1
    assert rows(done.stdout) == [
        ["xe:m2-demo", "XE CIDEr-D", "avx2", "2.0000", "1.4142", "1.0000", "3.0000", "2"],
        ["xe:m2-demo", "XE CIDEr-D", "best", "2.0000", "nan", "2.0000", "2.0000", "1"],
        ["xe:m2-demo", "XE CIDEr-D", "all", "2.0000", "1.0000", "1.0000", "3.0000", "3"],
        ["xe:m2-demo", "beam sizes used", "all", "XE beam 1, XE beam 3", "", "", "", ""],
    ]
    assert "Floors: constant caption CIDEr-D 0.5000." in done.stdout


def test_one_kernel_has_no_all_rows(tmp_path: Path) -> None:
    write_result(tmp_path, "vqa-vqa-demo-best-s1", {"overall": 80.0})
    write_result(tmp_path, "vqa-vqa-demo-best-s2", {"overall": 86.0})
    done = bench("--report-only", "--work", tmp_path, "--presets", "vqa:vqa-demo", "--seeds", "1", "2",
                 "--kernels", "best", "--floors", floors(tmp_path, {"majority overall": 50.0}))
    assert done.returncode == 0, done.stderr
    # mean 83, sd sqrt((9 + 9) / 1) = 4.242641
    assert rows(done.stdout) == [["vqa:vqa-demo", "overall", "best", "83.0000", "4.2426", "80.0000", "86.0000", "2"]]


def test_targets_against_the_floors(tmp_path: Path) -> None:
    write_result(tmp_path, "demo-avx2-s1", {"XE CIDEr-D": 0.80, "SCST CIDEr-D": 1.30})
    write_result(tmp_path, "demo-best-s1", {"XE CIDEr-D": 0.70, "SCST CIDEr-D": 1.40})
    write_result(tmp_path, "demo-vqa-avx2-s1", {"overall": 80.0, "type yes/no": 76.0, "type other": 90.0})
    write_result(tmp_path, "demo-vqa-best-s1", {"overall": 70.0, "type yes/no": 74.0, "type other": 95.0})
    values = {"constant caption CIDEr-D": 0.4, "majority overall": 50.0, "majority type yes/no": 75.0,
              "majority type other": 17.0}
    done = bench("--report-only", "--work", tmp_path, "--presets", "demo", "demo-vqa", "--seeds", "1",
                 "--kernels", "avx2", "best", "--floors", floors(tmp_path, values))
    assert done.returncode == 0, done.stderr
    targets = [line.removeprefix("- ") for line in done.stdout.split("Targets over all runs:\n")[1].splitlines()
               if line.startswith("- ")]
    # XE: sd of (0.8, 0.7) = 0.070711 > 0.05; min 0.7 = 1.75x < 2x; SCST min 1.3 = 3.25x >= 3x; VQA min 70 = +20
    assert targets == [
        "demo XE: sd 0.0707 (<= 0.05: NOT met); min 0.7000 = 1.75x the constant caption (>= 2x: NOT met)",
        "demo SCST: min 1.3000 = 3.25x the constant caption (>= 3x: met)",
        "demo-vqa overall: min 70.00 = majority +20.00 points (>= +25: NOT met)",
        "demo-vqa type yes/no: min 74.00 vs majority 75.00 (NOT met)",
        "demo-vqa type other: min 90.00 vs majority 17.00 (met)",
    ]


def test_nothing_finished_is_reported_as_such(tmp_path: Path) -> None:
    done = bench("--report-only", "--work", tmp_path, "--presets", "demo", "--seeds", "1", "--kernels", "best")
    assert done.returncode == 1 and done.stdout.strip() == "[variance] no finished jobs"


def test_a_real_job_runs_once_and_is_reported(tmp_path: Path) -> None:
    """One VQA job on a tiny synthetic set on torch's ``default`` kernel path: it leaves its result (the figures of
    the demo's own test report, the capability torch took), the floors come from its data, and a second run of the
    command reuses the result."""
    generate(tmp_path / "data", images=40, seed=2, feature_dim=32, val_size=8, test_size=8, extractor_epochs=1)
    args = ["--work", tmp_path, "--presets", "vqa:vqa-demo", "--seeds", "5", "--kernels", "default",
            "--set", "train.epochs=1", "--set", "model.feature_dim=32"]
    first = bench(*args)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "[variance] vqa-vqa-demo-default-s5: " in first.stdout
    result = json.loads((tmp_path / "results" / "vqa-vqa-demo-default-s5.json").read_text())
    report = json.loads((tmp_path / "runs" / "vqa-vqa-demo-default-s5" / "eval" / "test_metrics.json").read_text())
    assert result["capability"] == "DEFAULT" and result["overrides"] == ["train.epochs=1", "model.feature_dim=32"]
    assert result["figures"] == {"overall": report["overall"],
                                 **{f"type {k}": v for k, v in report["perAnswerType"].items()}}
    assert "majority overall" in first.stdout.split("Floors: ")[1]
    log = tmp_path / "logs" / "vqa-vqa-demo-default-s5.log"
    size = log.stat().st_size
    again = bench(*args)
    assert again.returncode == 0 and log.stat().st_size == size  # not run again
    assert rows(again.stdout) == rows(first.stdout)
