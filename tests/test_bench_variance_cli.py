"""benchmarks/bench_variance.py through its command line: presets with a label and overrides of their own
(``LABEL=KIND:CONFIG@KEY=VALUE...``: the commands planned, the job names, bad forms refused) and ``--baseline``'s
paired differences (against hand-computed values)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "bench_variance.py"
LW3X = "lw3x=xe:lw-demo@model.encoder_self_attention.options.expansion=3@model.feed_forward.options.groups=4"


def bench(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], cwd=REPO, capture_output=True, text=True,
                          timeout=300)


def write_result(work: Path, name: str, figures: dict, preset: str | None = None) -> None:
    results = work / "results"
    results.mkdir(parents=True, exist_ok=True)
    result = {"job": name, "capability": "X", "seconds": 1.0, "overrides": [], "figures": figures}
    if preset is not None:
        result["preset"] = preset
    (results / f"{name}.json").write_text(json.dumps(result))


def test_a_labelled_preset_runs_its_config_with_its_own_overrides_last(tmp_path: Path) -> None:
    done = bench("--dry-run", "--work", tmp_path, "--presets", "xe:lw-demo", LW3X, "vqa2=vqa:vqa-catt-demo",
                 "--seeds", "5", "--kernels", "best", "--set", "train.epochs=2")
    assert done.returncode == 0, done.stderr
    jobs = {}
    for line in done.stdout.splitlines():
        name, _, rest = line.removeprefix("[variance] ").partition(": run ")
        jobs[name] = shlex.split(rest)
    assert list(jobs) == ["xe-lw-demo-best-s5", "lw3x-best-s5", "vqa2-best-s5"]
    lw3x = jobs["lw3x-best-s5"]
    assert lw3x[1:3] == ["-m", "vlattn.demo"] and "--no-scst" in lw3x
    assert lw3x[lw3x.index("--config") + 1] == "lw-demo"
    assert lw3x[lw3x.index("--out") + 1] == str(tmp_path / "runs" / "lw3x-best-s5")
    # the global --set items first, the preset's own after them (they win where both set a key)
    assert lw3x[lw3x.index("--set"):] == [
        "--set", "train.seed=5", "--set", "train.epochs=2",
        "--set", "model.encoder_self_attention.options.expansion=3", "--set", "model.feed_forward.options.groups=4"]
    plain = jobs["xe-lw-demo-best-s5"]
    assert plain[plain.index("--set"):] == ["--set", "train.seed=5", "--set", "train.epochs=2"]
    vqa = jobs["vqa2-best-s5"]
    assert vqa[1:3] == ["-m", "vlattn.demo_vqa"] and vqa[vqa.index("--config") + 1] == "vqa-catt-demo"


@pytest.mark.parametrize(("text", "message"), [
    ("xe:lw-demo@train.epochs=2", "a preset with overrides needs a label (LABEL=xe:lw-demo@train.epochs=2)"),
    ("d=demo", "labels and overrides are for xe:CONFIG and vqa:CONFIG presets"),
    ("demo@train.epochs=2", "labels and overrides are for xe:CONFIG and vqa:CONFIG presets"),
    ("a/b=xe:lw-demo", "the label 'a/b' is not letters, digits"),
    ("lw=xe:lw-demo@epochs", "override 'epochs' is not KEY=VALUE"),
    ("lw=scst:lw-demo", "not demo, demo-vqa, xe:CONFIG or vqa:CONFIG"),
])
def test_bad_labelled_presets_are_usage_errors(tmp_path: Path, text: str, message: str) -> None:
    done = bench("--dry-run", "--work", tmp_path, "--presets", text)
    assert done.returncode == 2 and done.stdout == "" and message in done.stderr


def test_a_result_of_another_preset_under_the_same_label_is_refused(tmp_path: Path) -> None:
    write_result(tmp_path, "lw3x-best-s1", {"XE CIDEr-D": 0.5, "XE beam": 1}, preset="lw3x=xe:lw-demo@a.b=2")
    done = bench("--dry-run", "--work", tmp_path, "--presets", "lw3x=xe:lw-demo@a.b=3", "--seeds", "1",
                 "--kernels", "best")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert str(tmp_path / "results" / "lw3x-best-s1.json") in done.stderr and "lw3x=xe:lw-demo@a.b=2" in done.stderr
    same = bench("--dry-run", "--work", tmp_path, "--presets", "lw3x=xe:lw-demo@a.b=2", "--seeds", "1",
                 "--kernels", "best")
    assert same.returncode == 0 and same.stdout.strip() == "[variance] lw3x-best-s1: finished"


def rows(stdout: str, first: str) -> list[list[str]]:
    """The cells of the table whose header starts with ``| first |``, the host's capability dropped."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first} |"))
    body = []
    for line in lines[start + 2:]:
        if not line.startswith("| "):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        body.append([c.split(" (")[0] if c.startswith("best") else c for c in cells])
    return body


def test_paired_differences_to_the_baseline(tmp_path: Path) -> None:
    base = {1: (0.80, 1), 2: (0.90, 1), 3: (0.70, 2)}
    m2 = {1: (0.85, 1), 2: (0.88, 2), 3: (0.79, 1)}
    for seed in (1, 2, 3):
        write_result(tmp_path, f"xe-demo-best-s{seed}", {"XE CIDEr-D": base[seed][0], "XE beam": base[seed][1]})
        write_result(tmp_path, f"m2-best-s{seed}", {"XE CIDEr-D": m2[seed][0], "XE beam": m2[seed][1]})
    write_result(tmp_path, "lw-best-s2", {"XE CIDEr-D": 1.0, "XE beam": 3})  # seeds 1 and 3 not finished
    floors = tmp_path / "floors.json"
    floors.write_text(json.dumps({"constant caption CIDEr-D": 0.3}))
    done = bench("--report-only", "--work", tmp_path, "--presets", "xe:demo", "m2=xe:m2-demo", "lw=xe:lw-demo",
                 "--seeds", "1", "2", "3", "--kernels", "best", "--baseline", "xe:demo", "--floors", floors)
    assert done.returncode == 1, done.stderr  # two lw jobs missing: reported, not complete
    # m2 - demo per seed: +0.05, -0.02, +0.09; mean 0.04; sd sqrt((0.01^2 + 0.06^2 + 0.05^2) / 2) = 0.055678
    assert rows(done.stdout, "difference") == [
        ["m2 - xe:demo", "XE CIDEr-D", "best", "+0.0500, -0.0200, +0.0900 (seeds 1, 2, 3)", "+0.0400", "0.0557",
         "-0.0200", "3"],
        ["lw - xe:demo", "XE CIDEr-D", "best", "+0.1000 (seeds 2)", "+0.1000", "nan", "+0.1000", "1"],
    ]
    # m2: mean 0.84, sd sqrt((0.01^2 + 0.04^2 + 0.05^2) / 2) = 0.045826; the beams per seed below, not in the table
    assert rows(done.stdout, "preset") == [
        ["xe:demo", "XE CIDEr-D", "best", "0.8000", "0.1000", "0.7000", "0.9000", "3"],
        ["m2", "XE CIDEr-D", "best", "0.8400", "0.0458", "0.7900", "0.8800", "3"],
        ["lw", "XE CIDEr-D", "best", "1.0000", "nan", "1.0000", "1.0000", "1"],
    ]
    assert ("Beam sizes chosen on validation: xe:demo XE beam on best: 1 (seeds 1, 2), 2 (seed 3); "
            "m2 XE beam on best: 1 (seeds 1, 3), 2 (seed 2); lw XE beam on best: 3 (seed 2).") in done.stdout


def test_the_baseline_must_be_one_of_the_presets(tmp_path: Path) -> None:
    done = bench("--report-only", "--work", tmp_path, "--presets", "xe:m2-demo", "--baseline", "xe:demo")
    assert done.returncode == 2 and "--baseline xe:demo: not one of --presets" in done.stderr
