"""Smoke tests of the scale and GPU benchmarks at a tiny size, through their command lines
(benchmarks/bench_scale.py, benchmarks/bench_gpu.py): every section runs, reports what it measured, and the
generated workload is deleted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
FORMATS = ("memmap", "m2-hdf5", "npz-dir", "tsv", "lmdb")


def bench_scale(tmp_path: Path, *options: str) -> dict:
    out = tmp_path / "results.json"
    work = tmp_path / "work"
    work.mkdir()
    command = [sys.executable, str(BENCHMARKS / "bench_scale.py"), "--images", "40", "--regions", "6", "--dim", "32",
               "--work", str(work), "--json", str(out), *options]
    subprocess.run(command, check=True, capture_output=True, text=True, timeout=600)
    assert list(work.iterdir()) == []  # the workload, runs and caches are gone
    return json.loads(out.read_text())


def test_loader_memory_and_convert_sections(tmp_path: Path) -> None:
    pytest.importorskip("lmdb")
    results = bench_scale(tmp_path, "--sections", "loader,memory,convert", "--batches", "3", "--repeats", "1",
                          "--workers", "0,1", "--memory-batches", "2", "--convert-repeats", "2")
    assert results["split"] == [36, 2, 2]
    rows = {(r["format"], r["cache"], r["task"], r["workers"]): r["items_per_s"] for r in results["loader"]["rows"]}
    expected = {(f, c, t, w) for f in FORMATS for c in ("cold", "warm") for t in ("xe", "scst", "vqa") for w in (0, 1)}
    expected |= {(f, c, t, w) for f in ("memmap-items", "memmap-new-shm", "memmap-float32") for c in ("cold", "warm")
                 for t in ("xe", "scst", "vqa") for w in (0, 1)}
    expected |= {("anchor", c, "xe", w) for c in ("cold", "warm") for w in (0, 1)}
    assert set(rows) == expected and all(rate > 0 for rate in rows.values())
    for row in results["loader"]["rows"]:  # CPU per batch: of the main process, and of the workers when there are
        assert row["main_cpu_ms"] > 0
        assert (row["worker_cpu_ms"] is None) == (row["workers"] == 0)
    sizes = results["loader"]["bytes_per_image"]
    # float16 features and float32 boxes
    assert sizes["memmap"] == sizes["memmap-items"] == sizes["memmap-new-shm"] == sizes["memmap-float32"]
    assert sizes["memmap"] >= 6 * 32 * 2 + 6 * 16
    assert sizes["anchor"] == sizes["m2-hdf5"] >= 6 * 32 * 4 + 6 * 16  # float32 features and boxes
    assert set(results["loader"]["hand_over_ms"]) == {"float32_share", "float16_shared_write", "float16_slot_write",
                                                      "slot_read_new_mapping", "slot_read_kept_mapping", "widen"}
    assert all(ms > 0 for ms in results["loader"]["hand_over_ms"].values())
    disk = results["loader"]["disk"]
    assert set(disk) == {"sequential_mb_s", "random_qd1_mb_s", "random_qd1_images_s", "random_qd32_mb_s",
                         "random_qd32_images_s"} and all(value > 0 for value in disk.values())
    a100 = results["loader"]["a100"]
    assert a100["m2_xe_step_gflops"] > 0 and set(a100["pairs_per_s_at_peak"]) == {"fp32", "tf32", "bf16"}
    xe = {run["workers"]: run for run in results["memory"]["xe"]}
    assert set(xe[0]["peak_mb"]) == {"main"} and set(xe[1]["peak_mb"]) == {"main", "worker0"}
    assert xe[1]["items"] == 2 * 50 and xe[0]["pairs"] == 36 * 5
    assert results["memory"]["cider_df"]["references"] == 36 * 5
    convert = results["convert"]
    assert convert["tsv_mb"] >= 0 and all(row["disk_read_mb_s"] > 0 for row in convert["rows"])
    # two cold rounds alternating the settings (the block pipeline in the first only), then each setting warm
    assert [(run["run"], run["cache"]) for run in convert["runs"]] == [
        ("convert --jobs 1", "cold"), ("convert --jobs 2", "cold"), ("block pipeline, 2 processes", "cold"),
        ("convert --jobs 1", "cold"), ("convert --jobs 2", "cold"), ("convert --jobs 1", "warm"),
        ("convert --jobs 2", "warm")]
    assert [(row["run"], row["cache"], row["runs"]) for row in convert["rows"]] == [
        ("convert --jobs 1", "cold", 2), ("convert --jobs 1", "warm", 1), ("convert --jobs 2", "cold", 2),
        ("convert --jobs 2", "warm", 1), ("block pipeline, 2 processes", "cold", 1)]
    assert all(row["convert_s"] > 0 and row["peak_rss_mb"] > 0 for row in convert["rows"])
    # the disk's write rate before each cold run (the store is flushed before the command ends), none warm
    assert all((len(row["write_rates"]) == row["runs"]) == (row["cache"] == "cold") for row in convert["rows"])
    assert all(rate > 0 for row in convert["rows"] for rate in row["write_rates"]) and convert["store_mb"] > 0


@pytest.mark.slow
def test_startup_and_eval_sections(tmp_path: Path) -> None:
    results = bench_scale(tmp_path, "--sections", "startup,eval", "--preset", "m2-demo", "--beams", "1")
    startup = results["startup"]
    (row,) = startup["rows"]
    assert row["preset"] == "m2-demo" and row["first_step_s_no_cache"] > 0 and row["first_step_s_cached"] > 0
    assert {"load_caption_data", "fingerprint", "cider_df_build", "cider_df_cached"} <= set(startup["phases"])
    (row,) = results["eval"]["rows"]
    assert row["beam"] == 1 and row["images"] == 2 and 0 < row["metrics_share"] < 1


def bench_gpu(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCHMARKS / "bench_gpu.py"), *args], capture_output=True, text=True,
                          timeout=600)


def test_bench_gpu_runs_its_code_path_on_the_cpu() -> None:
    done = bench_gpu("--device", "cpu", "--tiny", "--presets", "m2-demo,updown-demo", "--steps", "1", "--warmup", "0",
                     "--compile-backend", "eager")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    measured = {(r["preset"], r["mode"], r["phase"]) for r in rows if "phase" in r}
    expected = {(p, m, ph) for p in ("m2-demo", "updown-demo") for m in ("fp32", "bf16", "compile")
                for ph in ("xe", "scst", "beam")}
    assert measured == expected - {("updown-demo", "compile", ph) for ph in ("xe", "scst", "beam")}
    assert [r["skipped"] for r in rows if "skipped" in r] == ["UpDownCaptioner has no backbone_layers()"]
    assert all(r["images_per_s"] > 0 and r["peak_mib"] is None for r in rows if "phase" in r)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA machine measures instead")
def test_bench_gpu_without_cuda_says_so_in_one_line() -> None:
    done = bench_gpu("--presets", "m2")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "bench_gpu: no CUDA device on this machine; nothing measured (--device cpu runs the code path)"]
