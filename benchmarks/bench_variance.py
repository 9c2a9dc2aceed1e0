"""Seed and CPU-kernel variance of the demo presets: each preset trained and tested over several seeds on several of
torch's CPU kernel paths (``ATEN_CPU_CAPABILITY``), reported as mean, sd and min beside the floors the demos must
clear (the best constant caption; the majority answer of each question type).

Each job (preset, kernel, seed) is a separate process: torch reads ``ATEN_CPU_CAPABILITY`` once, at import. Jobs
run one after the other; a finished job leaves ``WORK/results/<job>.json`` and is skipped when the command is run
again, so an interrupted benchmark resumes where it stopped (an interrupted job continues its own run directory).

Presets (each as its ``make`` target runs it, one torch thread):

- ``demo``: ``python -m vlattn.demo`` (XE then SCST; test CIDEr-D of both);
- ``demo-vqa``: ``python -m vlattn.demo_vqa`` (official VQA accuracy overall and per answer type);
- ``xe:CONFIG``: ``python -m vlattn.demo --no-scst --config CONFIG`` (XE only: ``xe:demo`` is the demo's XE stage,
  ``xe:m2-demo`` the synthetic M2 comparison's model, ...); an ``xe:demo`` job takes its figures from the finished
  ``demo`` job of its seed, kernel and settings when there is one (that job's XE stage is the same run);
- ``vqa:CONFIG``: ``python -m vlattn.demo_vqa --config CONFIG`` (``vqa:vqa-catt-demo``, ...);
- ``LABEL=KIND:CONFIG@KEY=VALUE@KEY=VALUE...``: a ``KIND:CONFIG`` preset with overrides of its own (given after the
  ``--set`` items), named LABEL in the table and its job names (``lw3x=xe:lw-demo@model.encoder_self_attention
  .options.expansion=3@...``); a label without overrides renames the preset.

Kernels: ``best`` (the variable unset: the host's best path), or a value of ``ATEN_CPU_CAPABILITY`` (``avx2``,
``avx512``, ``default``, ...); the path torch actually took is recorded per job.

Usage: ``python benchmarks/bench_variance.py [--presets demo demo-vqa] [--seeds 1234 1 2 3 4]
[--kernels avx2 best] [--work runs/bench-variance] [--set KEY=VALUE ...] [--dry-run | --report-only]
[--floors FILE] [--baseline PRESET] [--write [SECTION]]``. ``--set`` items go to every job's demo (a probe of other
settings; use another ``--work``). ``--dry-run`` lists each job as finished or with the command it would run;
``--report-only`` reports the finished jobs. The floors are computed from ``WORK/data`` (and a VQA job's run
configuration) unless ``--floors`` gives them as a JSON object (e.g. ``{"constant caption CIDEr-D": 0.3651}``).
``--baseline PRESET`` adds each other preset's paired differences to PRESET (same seed and kernel) per figure.
``--write`` puts the table into RESULTS.md, under "## Demo variance over seeds and CPU kernels" or the section named.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from results import write_section

REPO = Path(__file__).resolve().parent.parent
SECTION = "Demo variance over seeds and CPU kernels"


FIXED = {"demo": ("vlattn.demo", "demo"), "demo-vqa": ("vlattn.demo_vqa", "vqa-demo")}
KINDS = {"xe": "vlattn.demo", "vqa": "vlattn.demo_vqa"}  # ``KIND:CONFIG`` presets


LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def parts(preset: str) -> tuple[str, str, list[str]]:
    """``(label, base, overrides)`` of a preset as given: ``LABEL=KIND:CONFIG@KEY=VALUE...`` -> ``(LABEL,
    KIND:CONFIG, [KEY=VALUE, ...])``; the label of a preset given without one is the preset itself."""
    head, eq, rest = preset.partition("=")
    labelled = bool(eq) and ":" not in head and "@" not in head
    base, *overrides = (rest if labelled else preset).split("@")
    return (head if labelled else preset), base, overrides


def preset_name(text: str) -> str:
    """``text`` if it names a preset (``demo``, ``demo-vqa``, ``xe:CONFIG``, ``vqa:CONFIG``, the last two with an
    optional ``LABEL=`` and ``@KEY=VALUE`` overrides), else a usage error."""
    label, base, overrides = parts(text)
    kind, _, config = base.partition(":")
    if not (base in FIXED or (kind in KINDS and config)):
        raise argparse.ArgumentTypeError(f"{text!r}: not demo, demo-vqa, xe:CONFIG or vqa:CONFIG")
    if base in FIXED and label != base:
        raise argparse.ArgumentTypeError(f"{text!r}: labels and overrides are for xe:CONFIG and vqa:CONFIG presets")
    if overrides and label == text:
        raise argparse.ArgumentTypeError(f"{text!r}: a preset with overrides needs a label (LABEL={text})")
    if label != text and not LABEL.fullmatch(label):
        raise argparse.ArgumentTypeError(f"{text!r}: the label {label!r} is not letters, digits, '_', '.', '-'")
    if bad := [item for item in overrides if "=" not in item]:
        raise argparse.ArgumentTypeError(f"{text!r}: override {bad[0]!r} is not KEY=VALUE")
    return text


def is_vqa(preset: str) -> bool:
    base = parts(preset)[1]
    return base == "demo-vqa" or base.startswith("vqa:")


@dataclass(frozen=True)
class Job:
    preset: str
    kernel: str
    seed: int

    @property
    def name(self) -> str:
        return f"{parts(self.preset)[0].replace(':', '-')}-{self.kernel}-s{self.seed}"


def kernel_env(kernel: str) -> dict[str, str]:
    """The environment of a job on ``kernel``: ``best`` unsets ``ATEN_CPU_CAPABILITY``, anything else sets it."""
    env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
    if kernel != "best":
        env["ATEN_CPU_CAPABILITY"] = kernel
    return env


def capability(kernel: str) -> str:
    """The CPU capability torch uses under ``kernel`` (read by a fresh interpreter)."""
    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    out = subprocess.run([sys.executable, "-c", code], env=kernel_env(kernel), capture_output=True, text=True,
                         check=True)
    return out.stdout.strip()


def run_dir(work: Path, job: Job) -> Path:
    return work / "runs" / job.name


def command(job: Job, work: Path, overrides: list[str]) -> list[str]:
    """The demo command of ``job`` (its seed, ``overrides`` and its preset's own as ``--set`` items)."""
    _, base, own = parts(job.preset)
    kind, _, config = base.partition(":")
    module, config = FIXED[base] if base in FIXED else (KINDS[kind], config)
    cmd = [sys.executable, "-m", module, "--data", str(work / "data"), "--out", str(run_dir(work, job)),
           "--config", config]
    if kind == "xe":
        cmd.append("--no-scst")
    for item in [f"train.seed={job.seed}", *overrides, *own]:
        cmd += ["--set", item]
    return cmd


def test_metrics(run: Path) -> dict:
    return json.loads((run / "eval" / "test_metrics.json").read_text())


def collect(job: Job, work: Path) -> dict[str, float]:
    """The job's test figures from the metrics files its demo wrote."""
    run = run_dir(work, job)
    if is_vqa(job.preset):
        report = test_metrics(run)
        return {"overall": report["overall"], **{f"type {k}": v for k, v in report["perAnswerType"].items()}}
    figures = {"XE CIDEr-D": test_metrics(run)["scores"]["CIDEr"], "XE beam": test_metrics(run)["beam_size"]}
    if job.preset == "demo":
        scst = run.with_name(run.name + "-scst")
        figures.update({"SCST CIDEr-D": test_metrics(scst)["scores"]["CIDEr"],
                        "SCST beam": test_metrics(scst)["beam_size"]})
    return figures


def demo_stage(job: Job, work: Path, overrides: list[str]) -> dict | None:
    """An ``xe:demo`` job's result taken from the finished ``demo`` job of its seed, kernel and overrides (the XE
    figures of that run; its time is not the XE stage's: ``seconds`` None), or None."""
    done = work / "results" / f"{Job('demo', job.kernel, job.seed).name}.json"
    if job.preset != "xe:demo" or not done.is_file():
        return None
    result = json.loads(done.read_text())
    if result.get("overrides") != overrides:
        return None
    figures = {k: v for k, v in result["figures"].items() if k.startswith("XE ")}
    return {**result, "job": job.name, "figures": figures, "seconds": None}


def finished(job: Job, work: Path, overrides: list[str]) -> dict | None:
    """The result of ``job`` if it has run: its result file, or (``xe:demo``) the ``demo`` job's XE figures. A
    result file of the job's name made by another preset (a label given to other overrides) ends the benchmark
    (exit 2): its figures are not this preset's."""
    done = work / "results" / f"{job.name}.json"
    if not done.is_file():
        return demo_stage(job, work, overrides)
    result = json.loads(done.read_text())
    if result.get("preset", job.preset) != job.preset:
        print(f"bench_variance: {done}: a result of preset {result['preset']!r}, not {job.preset!r} (another label "
              "or --work)", file=sys.stderr)
        raise SystemExit(2)
    return result


def planned(job: Job, work: Path, overrides: list[str]) -> str:
    """One line for ``--dry-run``: ``JOB: finished`` or ``JOB: run [ATEN_CPU_CAPABILITY=K] COMMAND``."""
    if finished(job, work, overrides) is not None:
        return f"{job.name}: finished"
    env = [] if job.kernel == "best" else [f"ATEN_CPU_CAPABILITY={job.kernel}"]
    return f"{job.name}: run {shlex.join([*env, *command(job, work, overrides)])}"


def run_job(job: Job, work: Path, overrides: list[str], cap: str) -> dict | None:
    """Run ``job`` unless it has run (:func:`finished`); the result (figures, seconds, capability), or None on
    failure."""
    result = finished(job, work, overrides)
    if result is not None:
        return result
    cmd = command(job, work, overrides)
    log = work / "logs" / f"{job.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"[variance] {job.name}: {' '.join(cmd[1:])}", flush=True)
    start = time.perf_counter()
    with log.open("a") as out:
        code = subprocess.run(cmd, env=kernel_env(job.kernel), stdout=out, stderr=subprocess.STDOUT, cwd=REPO).returncode
    seconds = time.perf_counter() - start
    if code not in (0, 1):  # 1: the demo ran but missed its own floor, still a result
        print(f"[variance] {job.name}: FAILED (exit {code}); see {log}", flush=True)
        return None
    result = {"job": job.name, "preset": job.preset, "capability": cap, "seconds": seconds, "overrides": overrides,
              "figures": collect(job, work)}
    done = work / "results" / f"{job.name}.json"
    done.parent.mkdir(parents=True, exist_ok=True)
    done.write_text(json.dumps(result, indent=1))
    print(f"[variance] {job.name}: {result['figures']} in {seconds:.0f} s", flush=True)
    return result


def floors(work: Path, presets: list[str], jobs: list[Job]) -> dict[str, float]:
    """The floors of the presets run: the best constant caption's test CIDEr-D, the majority answers' accuracy."""
    found: dict[str, float] = {}
    if not all(is_vqa(p) for p in presets):
        from vlattn.demo import constant_floor

        found["constant caption CIDEr-D"] = constant_floor(work / "data")[1]
    vqa = [j for j in jobs if is_vqa(j.preset) and (run_dir(work, j) / "config.yaml").is_file()]
    if vqa:
        from vlattn.config import load_config
        from vlattn.tasks.vqa import majority_baseline, read_split

        cfg = load_config(run_dir(work, vqa[0]) / "config.yaml", [f"data.root={work / 'data'}"])
        prior = majority_baseline(read_split(work / "data", cfg.data, "train").annotations,
                                  read_split(work / "data", cfg.data, "test").annotations)
        found["majority overall"] = prior["overall"]
        found.update({f"majority type {k}": v for k, v in prior["perAnswerType"].items()})
    return found


def describe(values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else float("nan")
    return f"{statistics.fmean(values):.4f} | {sd:.4f} | {min(values):.4f} | {max(values):.4f} | {len(values)}"


def table(results: dict[Job, dict], kernels: list[str], caps: dict[str, str], beams: bool = True) -> list[str]:
    """Markdown rows: per preset and figure, each kernel's seeds and (with several kernels) all runs together; the
    beam sizes used unless not ``beams``."""
    rows = ["| preset | figure | kernels | mean | sd | min | max | runs |", "|---|---|---|---|---|---|---|---|"]
    presets = list(dict.fromkeys(sorted((job.preset for job in results), key=is_vqa)))
    for preset in presets:
        mine = {job: r for job, r in results.items() if job.preset == preset}
        label = parts(preset)[0]
        figures = [f for f in next(iter(mine.values()))["figures"] if "beam" not in f]
        for figure in figures:
            groups = [(f"{k} ({caps[k]})", [k]) for k in kernels] + ([("all", kernels)] if len(kernels) > 1 else [])
            for group, members in groups:
                values = [r["figures"][figure] for job, r in mine.items() if job.kernel in members]
                if values:
                    rows.append(f"| {label} | {figure} | {group} | {describe(values)} |")
        used = sorted({f"{f} {r['figures'][f]}" for r in mine.values() for f in r["figures"] if "beam" in f})
        if used and beams:
            rows.append(f"| {label} | beam sizes used | all | {', '.join(used)} | | | | |")
    return rows


def paired(results: dict[Job, dict], baseline: str, kernels: list[str], caps: dict[str, str],
           seeds: list[int]) -> list[str]:
    """Markdown rows: each other preset minus ``baseline`` per figure and kernel over the seeds both finished
    (the difference per seed, then mean, sd and min of the differences), and the seeds of each beam size chosen."""
    rows = ["| difference | figure | kernel | per seed | mean | sd | min | pairs |", "|---|---|---|---|---|---|---|---|"]
    found = {(job.preset, job.kernel, job.seed): r["figures"] for job, r in results.items()}
    presets = list(dict.fromkeys(job.preset for job in results))
    for preset in (p for p in presets if p != baseline):
        for kernel in kernels:
            both = [s for s in seeds if (preset, kernel, s) in found and (baseline, kernel, s) in found]
            if not both:
                continue
            mine, base = [found[preset, kernel, s] for s in both], [found[baseline, kernel, s] for s in both]
            for figure in (f for f in base[0] if "beam" not in f and f in mine[0]):
                diffs = [m[figure] - b[figure] for m, b in zip(mine, base, strict=True)]
                sd = f"{statistics.stdev(diffs):.4f}" if len(diffs) > 1 else "nan"
                per_seed = ", ".join(f"{d:+.4f}" for d in diffs)
                rows.append(f"| {parts(preset)[0]} - {parts(baseline)[0]} | {figure} | {kernel} ({caps[kernel]}) | "
                            f"{per_seed} (seeds {', '.join(map(str, both))}) | {statistics.fmean(diffs):+.4f} | {sd} "
                            f"| {min(diffs):+.4f} | {len(diffs)} |")
    beams = []
    for preset in presets:
        for kernel in kernels:
            chosen = [(s, found[preset, kernel, s]) for s in seeds if (preset, kernel, s) in found]
            for figure in sorted({f for _, figures in chosen for f in figures if "beam" in f}):
                seeds_of: dict[int, list[str]] = {}
                for seed, figures in chosen:
                    if figure in figures:
                        seeds_of.setdefault(figures[figure], []).append(str(seed))
                sizes = ", ".join(f"{size} (seed{'s' * (len(of) > 1)} {', '.join(of)})"
                                  for size, of in sorted(seeds_of.items()))
                beams.append(f"{parts(preset)[0]} {figure} on {kernel}: {sizes}")
    return rows + (["", "Beam sizes chosen on validation: " + "; ".join(beams) + "."] if beams else [])


def requirements(results: dict[Job, dict], floor: dict[str, float]) -> list[str]:
    """The demos' targets over all runs (every seed and kernel): XE test CIDEr-D sd <= 0.05 and min >= 2x the
    constant caption, SCST min >= 3x; VQA min >= the majority answers + 25 points overall and above them in every
    answer type."""
    def values(preset: str, figure: str) -> list[float]:
        return [r["figures"][figure] for job, r in results.items() if job.preset == preset and figure in r["figures"]]

    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"

    lines = []
    constant = floor.get("constant caption CIDEr-D")
    for preset in ("demo", "xe:demo"):
        xe, scst = values(preset, "XE CIDEr-D"), values(preset, "SCST CIDEr-D")
        if xe and constant:
            sd = statistics.stdev(xe) if len(xe) > 1 else float("nan")
            lines.append(f"{preset} XE: sd {sd:.4f} (<= 0.05: {verdict(sd <= 0.05)}); min {min(xe):.4f} = "
                         f"{min(xe) / constant:.2f}x the constant caption (>= 2x: {verdict(min(xe) >= 2 * constant)})")
        if scst and constant:
            lines.append(f"{preset} SCST: min {min(scst):.4f} = {min(scst) / constant:.2f}x the constant caption "
                         f"(>= 3x: {verdict(min(scst) >= 3 * constant)})")
    overall = values("demo-vqa", "overall")
    if overall and "majority overall" in floor:
        margin = min(overall) - floor["majority overall"]
        lines.append(f"demo-vqa overall: min {min(overall):.2f} = majority {margin:+.2f} points "
                     f"(>= +25: {verdict(margin >= 25)})")
        for key, prior in floor.items():
            if key.startswith("majority type "):
                kind = key.removeprefix("majority ")
                low = min(values("demo-vqa", kind))
                lines.append(f"demo-vqa {kind}: min {low:.2f} vs majority {prior:.2f} ({verdict(low > prior)})")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", type=preset_name, default=["demo", "demo-vqa"],
                        help="demo, demo-vqa, xe:CONFIG, vqa:CONFIG (see above)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[1234, 1, 2, 3, 4])
    parser.add_argument("--kernels", nargs="+", default=["avx2", "best"])
    parser.add_argument("--work", type=Path, default=Path("runs/bench-variance"))
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="run nothing; list each job as finished or its command")
    mode.add_argument("--report-only", action="store_true", help="run nothing; report the finished jobs")
    parser.add_argument("--floors", type=Path, metavar="FILE", help="the floors as a JSON object of name: value")
    parser.add_argument("--baseline", type=preset_name, metavar="PRESET",
                        help="one of --presets: add the others' paired differences to it (same seed and kernel)")
    parser.add_argument("--write", nargs="?", const=SECTION, metavar="SECTION",
                        help=f"write the table to RESULTS.md, under SECTION (default {SECTION!r})")
    args = parser.parse_args()
    if args.baseline is not None and args.baseline not in args.presets:
        parser.error(f"--baseline {args.baseline}: not one of --presets")
    work = args.work.resolve()
    # seed by seed, so that a benchmark stopped early has the same seeds of every preset and kernel
    jobs = [Job(p, k, s) for s in args.seeds for p in args.presets for k in args.kernels]
    if args.dry_run:
        print("\n".join(f"[variance] {planned(job, work, args.overrides)}" for job in jobs))
        return 0
    caps = {kernel: capability(kernel) for kernel in args.kernels}
    results: dict[Job, dict] = {}
    for job in jobs:
        if args.report_only:
            result = finished(job, work, args.overrides)
        else:
            result = run_job(job, work, args.overrides, caps[job.kernel])
        if result is not None:
            results[job] = result
    if not results:
        print("[variance] no finished jobs")
        return 1
    lines = table(results, args.kernels, caps, beams=args.baseline is None)  # --baseline: the beams per seed
    if args.baseline is not None:
        lines += ["", *paired(results, args.baseline, args.kernels, caps, args.seeds)]
    floor = json.loads(args.floors.read_text()) if args.floors else floors(work, args.presets, jobs)
    targets = requirements(results, floor)
    lines += ["", "Floors: " + "; ".join(f"{k} {v:.4f}" for k, v in floor.items()) + "."]
    if targets:
        lines += ["", "Targets over all runs:", *(f"- {target}" for target in targets)]
    print("\n".join(lines))
    seconds = [r["seconds"] for r in results.values() if r["seconds"] is not None]
    if seconds:  # the shared machine's wall time: printed, not a result
        print(f"Job wall time (one torch thread, s): mean {statistics.fmean(seconds):.0f}, max {max(seconds):.0f}")
    if args.write:
        section = [] if args.write == SECTION else ["--write", args.write]
        cmd = shlex.join(["benchmarks/bench_variance.py", "--presets", *args.presets, "--seeds", *map(str, args.seeds),
                          "--kernels", *args.kernels, *[a for o in args.overrides for a in ("--set", o)],
                          *(["--baseline", args.baseline] if args.baseline else []), *section])
        write_section(args.write, "\n".join([f"Command: `.venv/bin/python {cmd}`", "", *lines]))
    return 0 if len(results) == len(jobs) else 1


if __name__ == "__main__":
    sys.exit(main())
