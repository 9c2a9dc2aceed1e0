"""``make demo``: synthetic data -> XE training -> SCST fine-tuning -> test evaluation of both (at the beam size
the preset gives, ``auto``: chosen on validation), beside the best single constant caption.

Usage: ``python -m vlattn.demo [--data data/synth] [--out runs/demo] [--config demo] [--no-scst]``.
The XE run goes to OUT, the SCST run to OUT-scst, the run report (curves of both stages, ``vlattn explain`` of three
test images) to OUT/report/index.html. Re-running continues (or just re-evaluates) existing runs and keeps an
existing report.
Torch runs on one thread by default (``--threads``; 0 = torch's default, all cores): the demo's d=128 model gains
little from a second one (on this 2-core machine, idle: XE 158 s instead of 179 s at twice the CPU time, SCST
137 s instead of 129 s). The figures are deterministic for a seed, a thread count and a CPU kernel path
(``ATEN_CPU_CAPABILITY``); benchmarks/bench_variance.py measures how they spread over seeds and kernels, and
benchmarks/RESULTS.md "Demo time" has the stages' times. ``--set KEY=VALUE`` overrides the preset (e.g.
``--set train.seed=7``).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from vlattn.validation import load_valid_config
from vlattn.data.karpathy import load_karpathy
from vlattn.errors import VlattnError
from vlattn.metrics import best_constant_caption
from vlattn.metrics.meteor import prestart as prestart_meteor
from vlattn.tasks import EvalRequest, evaluate, format_report, train
from vlattn.viz.report import write_report

FLOOR_RATIO = 3.0


def constant_floor(data_root: Path, split: str = "test", num_candidates: int = 200) -> tuple[str, float]:
    """The best single caption for every ``split`` image, among the most frequent training captions."""
    entries = load_karpathy(data_root / "dataset.json")
    refs = {e.image_id: list(e.raw) for e in entries if e.split == split}
    counts = Counter(" ".join(tokens) for e in entries if e.split == "train" for tokens in e.captions)
    pool = sorted(counts, key=lambda c: (-counts[c], c))[:num_candidates]
    return best_constant_caption(refs, pool, tokenizer_backend="python")


def write_demo_report(runs: list[Path], data_root: Path, out: Path, images: int = 3) -> Path:
    """The run report (curves of both stages, explain for the first ``images`` test images by the last run) in
    ``out``; an existing report is kept as it is (it is not replaced: remove it to write a new one)."""
    if out.exists():
        return out / "index.html"
    test = [e.image_id for e in load_karpathy(data_root / "dataset.json") if e.split == "test"][:images]
    return write_report(runs, test, out)


class StageClock:
    """Wall-clock and CPU seconds (this process; METEOR's Java process not included) of each demo stage."""

    def __init__(self) -> None:
        self.stages: list[tuple[str, float, float]] = []

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        wall, cpu = time.perf_counter(), time.process_time()
        yield
        self.stages.append((name, time.perf_counter() - wall, time.process_time() - cpu))

    def summary(self) -> str:
        return "; ".join(f"{name} {wall:.0f} s (CPU {cpu:.0f} s)" for name, wall, cpu in self.stages)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("data/synth"))
    parser.add_argument("--out", type=Path, default=Path("runs/demo"))
    parser.add_argument("--config", default="demo", help="Preset name or YAML config file.")
    parser.add_argument("--no-scst", dest="scst", action="store_false", help="Skip the SCST phase.")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0 = torch's default: all cores).")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="Override a config key (repeatable), e.g. --set train.seed=7.")
    args = parser.parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    start = time.perf_counter()
    clock = StageClock()
    try:
        if not (args.data / "dataset.json").is_file():
            from vlattn.data.synth import generate

            print(f"[demo] generating the synthetic data set in {args.data}", flush=True)
            with clock.stage("synthetic data"):
                generate(args.data, log=lambda line: print(f"[synth] {line}", flush=True))
        cfg = load_valid_config(args.config, [f"data.root={args.data}", *args.overrides])
        runs = [("XE", args.out, "xe", None)]
        if args.scst:
            runs.append(("SCST", args.out.with_name(args.out.name + "-scst"), "scst", args.out))
        reports = {}
        for label, run, stage, init in runs:
            resume = (run / "checkpoints" / "last").exists()
            print(f"[demo] {'continuing' if resume else 'training'} {cfg.model.kind} ({label}) in {run}", flush=True)
            prestart_meteor()  # the test evaluation's METEOR loads while the model trains
            with clock.stage(f"{label} training"):
                train(cfg, run, stage=stage, resume=resume, device="auto", init=init)
            with clock.stage(f"{label} test evaluation"):
                reports[label] = evaluate(run, EvalRequest(split="test"))
        with clock.stage("constant-caption floor"):
            caption, floor = constant_floor(args.data)
        with clock.stage("report"):
            page = write_demo_report([run for _, run, _, _ in runs], args.data, args.out / "report")
        for label, report in reports.items():
            print(f"[{label}] " + format_report(report))
        print(f"  best constant caption {caption!r}: CIDEr-D {floor:.4f}")
        for label, report in reports.items():
            ratio = report["scores"]["CIDEr"] / floor if floor > 0 else float("inf")
            print(f"  {label}: test CIDEr-D {report['scores']['CIDEr']:.4f} at beam {report['beam_size']} = "
                  f"{ratio:.1f}x the constant caption")
        final = reports[runs[-1][0]]["scores"]["CIDEr"]
        ratio = final / floor if floor > 0 else float("inf")
        print(f"[demo] report: {page}")
        print(f"[demo] time: {clock.summary()}")
        print(f"[demo] final model {ratio:.1f}x the constant caption (required >= {FLOOR_RATIO:.0f}x); "
              f"done in {time.perf_counter() - start:.0f} s")
        return 0 if ratio >= FLOOR_RATIO else 1
    except VlattnError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
