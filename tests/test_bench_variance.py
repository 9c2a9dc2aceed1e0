"""benchmarks/bench_variance.py: the job commands and environments, resuming (finished jobs are not run again) and
the table's statistics against hand-computed values."""

from __future__ import annotations

import json

import pytest


@pytest.fixture(scope="module")
def bench(import_benchmark):
    return import_benchmark("bench_variance")


def test_kernel_environment(bench, monkeypatch) -> None:
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx512")
    assert "ATEN_CPU_CAPABILITY" not in bench.kernel_env("best")
    assert bench.kernel_env("avx2")["ATEN_CPU_CAPABILITY"] == "avx2"


def test_commands(bench, tmp_path) -> None:
    xe = bench.command(bench.Job("xe:m2-demo", "avx2", 7), tmp_path, ["train.epochs=2"])
    assert xe[1:3] == ["-m", "vlattn.demo"] and "--no-scst" in xe
    assert xe[xe.index("--config") + 1] == "m2-demo"
    assert xe[-4:] == ["--set", "train.seed=7", "--set", "train.epochs=2"]
    assert xe[xe.index("--out") + 1] == str(tmp_path / "runs" / "xe-m2-demo-avx2-s7")
    demo = bench.command(bench.Job("demo", "best", 1), tmp_path, [])
    assert demo[1:3] == ["-m", "vlattn.demo"] and "--no-scst" not in demo
    assert demo[demo.index("--config") + 1] == "demo"
    vqa = bench.command(bench.Job("demo-vqa", "best", 1), tmp_path, [])
    assert vqa[1:3] == ["-m", "vlattn.demo_vqa"] and vqa[vqa.index("--config") + 1] == "vqa-demo"
    catt = bench.command(bench.Job("vqa:vqa-catt-demo", "best", 1), tmp_path, [])
    assert catt[1:3] == ["-m", "vlattn.demo_vqa"] and catt[catt.index("--config") + 1] == "vqa-catt-demo"
    assert "--no-scst" not in vqa + catt


@pytest.mark.parametrize("text", ["demo", "demo-vqa", "xe:lw-demo", "vqa:vqa-lw-demo"])
def test_preset_names(bench, text) -> None:
    assert bench.preset_name(text) == text


@pytest.mark.parametrize("text", ["demo-xe", "xe:", "scst:demo", "vqa"])
def test_bad_preset_names(bench, text) -> None:
    with pytest.raises(bench.argparse.ArgumentTypeError, match=text):
        bench.preset_name(text)


def test_a_job_runs_and_leaves_its_result(bench, tmp_path, monkeypatch) -> None:
    job = bench.Job("vqa:vqa-lw-demo", "avx2", 5)
    calls = []

    def fake_run(cmd, env, **kwargs):
        calls.append((cmd, env.get("ATEN_CPU_CAPABILITY")))
        eval_dir = bench.run_dir(tmp_path, job) / "eval"
        eval_dir.mkdir(parents=True)
        report = {"overall": 88.5, "perAnswerType": {"yes/no": 90.0, "number": 80.0}}
        (eval_dir / "test_metrics.json").write_text(json.dumps(report))
        return bench.subprocess.CompletedProcess(cmd, 1)  # 1: the demo missed its floor, still a result

    monkeypatch.setattr(bench.subprocess, "run", fake_run)
    result = bench.run_job(job, tmp_path, [], "AVX2")
    assert len(calls) == 1 and calls[0][1] == "avx2" and "vqa-lw-demo" in calls[0][0]
    assert result["figures"] == {"overall": 88.5, "type yes/no": 90.0, "type number": 80.0}
    assert json.loads((tmp_path / "results" / "vqa-vqa-lw-demo-avx2-s5.json").read_text()) == result
    assert bench.run_job(job, tmp_path, [], "AVX2") == result and len(calls) == 1  # not run again


def test_demo_xe_stage_taken_from_the_demo_job(bench, tmp_path, monkeypatch) -> None:
    demo = {"job": "demo-best-s3", "capability": "AVX512", "seconds": 300.0, "overrides": ["eval.batch_size=8"],
            "figures": {"XE CIDEr-D": 0.9, "XE beam": 1, "SCST CIDEr-D": 1.2, "SCST beam": 3}}
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "demo-best-s3.json").write_text(json.dumps(demo))
    monkeypatch.setattr(bench.subprocess, "run", lambda *a, **k: pytest.fail("the demo's XE stage was run again"))
    result = bench.run_job(bench.Job("xe:demo", "best", 3), tmp_path, ["eval.batch_size=8"], "AVX512")
    assert result["figures"] == {"XE CIDEr-D": 0.9, "XE beam": 1} and result["seconds"] is None
    assert result["job"] == "xe-demo-best-s3"
    # not another seed, kernel, preset or settings
    assert bench.finished(bench.Job("xe:demo", "best", 4), tmp_path, ["eval.batch_size=8"]) is None
    assert bench.finished(bench.Job("xe:demo", "avx2", 3), tmp_path, ["eval.batch_size=8"]) is None
    assert bench.finished(bench.Job("xe:m2-demo", "best", 3), tmp_path, ["eval.batch_size=8"]) is None
    assert bench.finished(bench.Job("xe:demo", "best", 3), tmp_path, []) is None


def test_a_finished_job_is_not_run_again(bench, tmp_path, monkeypatch) -> None:
    job = bench.Job("demo", "best", 3)
    done = {"job": job.name, "figures": {"XE CIDEr-D": 0.5}, "seconds": 1.0}
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / f"{job.name}.json").write_text(json.dumps(done))
    monkeypatch.setattr(bench.subprocess, "run", lambda *a, **k: pytest.fail("a finished job was run again"))
    assert bench.run_job(job, tmp_path, [], "AVX512") == done


def test_table_statistics(bench) -> None:
    results = {
        bench.Job("xe:demo", "avx2", 1): {"figures": {"XE CIDEr-D": 1.0, "XE beam": 1}},
        bench.Job("xe:demo", "avx2", 2): {"figures": {"XE CIDEr-D": 3.0, "XE beam": 3}},
        bench.Job("xe:demo", "best", 1): {"figures": {"XE CIDEr-D": 2.0, "XE beam": 1}},
    }
    rows = bench.table(results, ["avx2", "best"], {"avx2": "AVX2", "best": "AVX512"})
    # avx2: mean 2, sd sqrt(((1-2)^2 + (3-2)^2) / 1) = 1.414214; all three: mean 2, sd 1
    assert "| xe:demo | XE CIDEr-D | avx2 (AVX2) | 2.0000 | 1.4142 | 1.0000 | 3.0000 | 2 |" in rows
    assert "| xe:demo | XE CIDEr-D | best (AVX512) | 2.0000 | nan | 2.0000 | 2.0000 | 1 |" in rows
    assert "| xe:demo | XE CIDEr-D | all | 2.0000 | 1.0000 | 1.0000 | 3.0000 | 3 |" in rows
    assert any("XE beam 1, XE beam 3" in row for row in rows)


def test_table_of_one_kernel_has_no_all_rows(bench) -> None:
    results = {bench.Job("vqa:vqa-demo", "best", s): {"figures": {"overall": v}} for s, v in [(1, 80.0), (2, 86.0)]}
    rows = bench.table(results, ["best"], {"best": "AVX512"})
    # mean 83, sd sqrt((9 + 9) / 1) = 4.242641
    assert rows[2:] == ["| vqa:vqa-demo | overall | best (AVX512) | 83.0000 | 4.2426 | 80.0000 | 86.0000 | 2 |"]


def test_targets(bench) -> None:
    results = {
        bench.Job("demo", "avx2", 1): {"figures": {"XE CIDEr-D": 0.80, "SCST CIDEr-D": 1.30}},
        bench.Job("demo", "best", 1): {"figures": {"XE CIDEr-D": 0.70, "SCST CIDEr-D": 1.40}},
        bench.Job("demo-vqa", "avx2", 1): {"figures": {"overall": 80.0, "type yes/no": 76.0, "type other": 90.0}},
        bench.Job("demo-vqa", "best", 1): {"figures": {"overall": 70.0, "type yes/no": 74.0, "type other": 95.0}},
    }
    floor = {"constant caption CIDEr-D": 0.4, "majority overall": 50.0, "majority type yes/no": 75.0,
             "majority type other": 17.0}
    lines = bench.requirements(results, floor)
    # XE: sd of (0.8, 0.7) = 0.070711 > 0.05; min 0.7 = 1.75x < 2x; SCST min 1.3 = 3.25x >= 3x
    assert lines[0] == ("demo XE: sd 0.0707 (<= 0.05: NOT met); min 0.7000 = 1.75x the constant caption "
                        "(>= 2x: NOT met)")
    assert lines[1] == "demo SCST: min 1.3000 = 3.25x the constant caption (>= 3x: met)"
    assert lines[2] == "demo-vqa overall: min 70.00 = majority +20.00 points (>= +25: NOT met)"
    assert lines[3:] == ["demo-vqa type yes/no: min 74.00 vs majority 75.00 (NOT met)",
                         "demo-vqa type other: min 90.00 vs majority 17.00 (met)"]
