"""The CATT bias benchmark (issue 14; CATT paper Table 2 and Table 6) on the confounded synthetic set: train each
variant with several seeds on a split where circles are red with p = 0.9 in training only (val/test uniform), score
the test split with CIDEr-D and the bias metrics (CHAIR_s, CHAIR_i, A@Attr; vlattn.metrics.bias), and write the
means, spreads and per-seed values to benchmarks/RESULTS.md ("CATT bias benchmark on confounded synthetic data").
Variants (:data:`VARIANTS`): Transformer vs Transformer+CATT (configs/demo.yaml, configs/catt-demo.yaml), Up-Down vs
Up-Down+CATT (BUTD+CATT, supplementary Sec. 9: configs/updown-demo.yaml, configs/updown-catt-demo.yaml), and Table
6's ablations of Transformer+CATT (w/o Init, w/o Share, dictionary sizes).

Runs are resumable: a (variant, seed) whose ``<run>.eval.json`` exists is skipped, an unfinished run resumes from its
last checkpoint. ``--collect-only`` only writes the table from what exists. Every run is `vlattn --threads 1 ...`,
one at a time.

Extra columns: ``A@Attr circle`` is the accuracy of the colour words describing circles (the confounded shape);
``red:circle`` the share of those colour words that say "red" (training: 0.90; test images: 0.086); ``circle
colours`` how many such words the test captions hold (what the two circle columns rest on).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

from results import write_section

from vlattn.data.bias import synthetic_lexicon
from vlattn.metrics.bias import read_caption

DICTIONARY = "model.options.{}_dictionary.{}={}"
BOTH = ("image", "word")
# The Transformer+CATT runs in RESULTS were made while kind: catt still defaulted to dropout on the attention
# weights (the released code's 0.1; the Transformer baseline had none). Kept so the recorded figures reproduce;
# a like-for-like comparison with the baseline drops this override (the default is now the Transformer's: none).
RECORDED_CATT = ["model.attention_dropout=0.1"]
VARIANTS: dict[str, tuple[str, str, list[str]]] = {  # key -> (row name, config, overrides)
    "base": ("Transformer", "configs/demo.yaml", []),
    "catt": ("Transformer+CATT (D#500)", "configs/catt-demo.yaml", RECORDED_CATT),
    "wo_init": ("CATT w/o Init (random U(0, 0.01))", "configs/catt-demo.yaml",
                [*RECORDED_CATT, *(DICTIONARY.format(d, "init", "random") for d in BOTH)]),
    "wo_share": ("CATT w/o Share", "configs/catt-demo.yaml", [*RECORDED_CATT, "model.options.share=false"]),
    "d100": ("CATT D#100", "configs/catt-demo.yaml",
             [*RECORDED_CATT, *(DICTIONARY.format(d, "size", 100) for d in BOTH)]),
    "d200": ("CATT D#200", "configs/catt-demo.yaml",
             [*RECORDED_CATT, *(DICTIONARY.format(d, "size", 200) for d in BOTH)]),
    "d1000": ("CATT D#1000", "configs/catt-demo.yaml",
              [*RECORDED_CATT, *(DICTIONARY.format(d, "size", 1000) for d in BOTH)]),
    "updown": ("Up-Down", "configs/updown-demo.yaml", []),
    "updown_catt": ("Up-Down+CATT (D#100)", "configs/updown-catt-demo.yaml", []),
}
COLUMNS = ("CIDEr", "CHAIR_s", "CHAIR_i", "A@Attr", "A@Attr circle", "red:circle", "circle colours")
LOWER_IS_BETTER = {"CHAIR_s", "CHAIR_i", "red:circle"}
COUNTS = {"circle colours"}  # how many colour words the two circle columns rest on (no better/worse direction)


def vlattn(*args: str) -> list[str]:
    return [str(Path(sys.executable).with_name("vlattn")), "--threads", "1", *args]


def run_one(key: str, seed: int, args: argparse.Namespace) -> None:
    """Train (fresh or resumed) and evaluate one (variant, seed) unless its evaluation exists."""
    _, config, overrides = VARIANTS[key]
    run = args.runs / f"{key}-s{seed}"
    report = run.with_suffix(".eval.json")
    if report.exists():
        return
    sets = [f"data.root={args.data}", f"train.seed={seed}", f"train.epochs={args.epochs}",
            f"train.val_max_images={args.val_images}", *args.set, *overrides]
    train = vlattn("train", "--config", config, "--out", str(run), *[x for s in sets for x in ("--set", s)])
    if (run / "checkpoints" / "last").exists():
        train.append("--resume")
    print(" ".join(train), flush=True)
    subprocess.run(train, check=True, stdout=subprocess.DEVNULL)
    evaluation = subprocess.run(vlattn("eval", "--checkpoint", str(run), "--split", "test", "--json"), check=True,
                                capture_output=True, text=True)
    tmp = report.with_suffix(".tmp")
    tmp.write_text(evaluation.stdout)
    tmp.replace(report)


def measures(run: Path, report: dict, truth: dict[int, set[tuple[str, str]]]) -> dict[str, float]:
    """The table's columns for one evaluated run."""
    values = {name: report["scores"][name] for name in COLUMNS[:4]}
    predictions = json.loads((run / "eval" / "test_predictions.json").read_text())
    lexicon, said = synthetic_lexicon(), []
    for row in predictions:
        pairs = truth[int(row["image_id"])]
        said += [(colour, (colour, "circle") in pairs)
                 for colour, shape in read_caption(row["caption"], lexicon).attributes if shape == "circle"]
    values["A@Attr circle"] = sum(ok for _, ok in said) / len(said) if said else float("nan")
    values["red:circle"] = sum(colour == "red" for colour, _ in said) / len(said) if said else float("nan")
    values["circle colours"] = len(said)
    return values


def fmt(values: list[float], digits: int = 3) -> str:
    """Mean ± sample standard deviation of the seeds that have a value (NaN: no such word was generated), with
    ``digits`` decimals; the number of those seeds when some lack one."""
    known = [v for v in values if not math.isnan(v)]
    note = f" ({len(known)} seeds)" if len(known) < len(values) else ""
    if not known:
        return "n/a"
    if len(known) == 1:
        return f"{known[0]:.{digits}f}{note}"
    return f"{statistics.mean(known):.{digits}f} ± {statistics.stdev(known):.{digits}f}{note}"


def driver_commands(evaluated: dict[str, list[int]], args: argparse.Namespace) -> list[str]:
    """The driver calls that reproduce the table: one per set of seeds, naming the variants evaluated with exactly
    those seeds (``evaluated``: variant -> seeds, in row order)."""
    groups: dict[tuple[int, ...], list[str]] = {}
    for key, seeds in evaluated.items():
        groups.setdefault(tuple(seeds), []).append(key)
    return [" ".join(["benchmarks/synth_catt.py", "--data", str(args.data), "--runs", str(args.runs), "--epochs",
                      str(args.epochs), "--seeds", *map(str, seeds), "--variants", *keys,
                      *[x for s in args.set for x in ("--set", s)]]) for seeds, keys in groups.items()]


def table(args: argparse.Namespace) -> str:
    """The results section (means ± sample standard deviations over the evaluated seeds)."""
    scenes = json.loads((args.data / "scenes.json").read_text())["images"]
    truth = {int(i["image_id"]): {(o["colour"], o["shape"]) for o in i["objects"]} for i in scenes}
    rows, per_seed, evaluated = [], [], {}
    for key in args.variants:
        name, config, overrides = VARIANTS[key]
        seeds = [s for s in args.seeds if (args.runs / f"{key}-s{s}.eval.json").exists()]
        if not seeds:
            continue
        evaluated[key] = seeds
        runs = {s: measures(args.runs / f"{key}-s{s}", json.loads((args.runs / f"{key}-s{s}.eval.json").read_text()),
                            truth) for s in seeds}
        rows.append(f"| {name} | {len(seeds)} | " + " | ".join(fmt([runs[s][c] for s in seeds], 1 if c in COUNTS else 3)
                                                              for c in COLUMNS) + " |")
        per_seed += [f"| {name} | {s} | " + " | ".join(f"{runs[s][c]:{'.0f' if c in COUNTS else '.3f'}}" for c in COLUMNS)
                     + " |" for s in seeds]
    arrows = {c: "" if c in COUNTS else " ↓" if c in LOWER_IS_BETTER else " ↑" for c in COLUMNS}
    header = "| model | seeds | " + " | ".join(f"{c}{arrows[c]}" for c in COLUMNS) + " |"
    rule = "|---|---|" + "---|" * len(COLUMNS)
    commands = [f".venv/bin/vlattn --threads 1 data synth --out {args.data} --confound red:circle --confound-p 0.9",
                *driver_commands(evaluated, args)]
    return "\n".join([
        header, rule, *rows, "", "Per seed:", "", header.replace("| seeds |", "| seed |"), rule, *per_seed, "",
        "Commands:", "", "```", *commands, "```",
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="the confounded synthetic data root")
    parser.add_argument("--runs", type=Path, required=True, help="where the runs and their evaluations go")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--epochs", type=int, default=6, help="XE epochs of every run (one budget for all)")
    parser.add_argument("--val-images", type=int, default=100, help="val images decoded per epoch (selection)")
    parser.add_argument("--set", action="append", default=[], help="a config override for every run (repeatable)")
    parser.add_argument("--collect-only", action="store_true", help="write the table from the finished runs")
    parser.add_argument("--no-write", action="store_true", help="print only, leave RESULTS.md alone")
    args = parser.parse_args()
    if not args.collect_only:
        for seed in args.seeds:
            for key in args.variants:
                run_one(key, seed, args)
    body = table(args)
    print(body)
    if not args.no_write:
        write_section("CATT bias benchmark on confounded synthetic data", body)


if __name__ == "__main__":
    main()
