"""``make demo-vqa``: synthetic data (if absent) -> MCAN training -> official accuracy table on the test split,
beside the majority answer of each question type (the prior a model must clear by far).

Usage: ``python -m vlattn.demo_vqa [--data data/synth] [--out runs/demo-vqa] [--config vqa-demo]``.
Re-running continues (or just re-evaluates) an existing run. Torch runs on one thread by default
(``--threads``), as in ``make demo``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from vlattn.validation import load_valid_config
from vlattn.errors import VlattnError
from vlattn.tasks import EvalRequest, evaluate, train
from vlattn.tasks.vqa import format_accuracy, majority_baseline, read_split

MIN_MARGIN = 25.0  # accuracy points over the majority answers that the trained model must reach (and be above
# them in every answer type)


def comparison(model: dict, prior: dict) -> list[str]:
    """Overall and per-answer-type accuracy of the model beside the prior's."""
    lines = [f"  {'':<10} {'MCAN':>7} {'majority':>9}", f"  {'overall':<10} {model['overall']:7.2f} {prior['overall']:9.2f}"]
    for kind, value in model["perAnswerType"].items():
        lines.append(f"  {kind:<10} {value:7.2f} {prior['perAnswerType'].get(kind, float('nan')):9.2f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("data/synth"))
    parser.add_argument("--out", type=Path, default=Path("runs/demo-vqa"))
    parser.add_argument("--config", default="vqa-demo", help="Preset name or YAML config file.")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0 = torch's default).")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="Override a config key (repeatable), e.g. --set train.seed=7.")
    args = parser.parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    start, cpu = time.perf_counter(), time.process_time()
    try:
        if not (args.data / "vqa" / "questions_train.json").is_file():
            from vlattn.data.synth import generate

            print(f"[demo-vqa] generating the synthetic data set in {args.data}", flush=True)
            generate(args.data, log=lambda line: print(f"[synth] {line}", flush=True))
        cfg = load_valid_config(args.config, [f"data.root={args.data}", *args.overrides])
        resume = (args.out / "checkpoints" / "last").exists()
        print(f"[demo-vqa] {'continuing' if resume else 'training'} {cfg.model.kind} in {args.out}", flush=True)
        train(cfg, args.out, resume=resume, device="auto")
        report = evaluate(args.out, EvalRequest(split="test"))
        prior = majority_baseline(read_split(args.data, cfg.data, "train").annotations,
                                  read_split(args.data, cfg.data, "test").annotations)
        print(f"[demo-vqa] test: {report['questions']:,} questions, official VQA accuracy (%) of {report['checkpoint']}")
        print("\n".join(format_accuracy(report)))
        print("[demo-vqa] beside the majority training answer of each question type:")
        print("\n".join(comparison(report, prior)))
        margin = report["overall"] - prior["overall"]
        below = [kind for kind, value in report["perAnswerType"].items()
                 if value <= prior["perAnswerType"].get(kind, float("-inf"))]
        print(f"[demo-vqa] results file: {report['results']}")
        print(f"[demo-vqa] {margin:+.2f} points over the majority answers (required >= +{MIN_MARGIN:.0f}); "
              f"not above them in: {', '.join(below) or 'no answer type'}; "
              f"done in {time.perf_counter() - start:.0f} s ({time.process_time() - cpu:.0f} s of CPU)")
        return 0 if margin >= MIN_MARGIN and not below else 1
    except VlattnError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
