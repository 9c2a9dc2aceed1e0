"""Up-Down vs Up-Down + SLA on the synthetic data set: train both presets with the same budget over several
seeds, one after the other, evaluate each best checkpoint on the test split, and write mean, spread and every seed
to benchmarks/RESULTS.md ("## Up-Down vs Up-Down + SLA on synthetic data") with the commands.

Runs go to RUNS/<model>-s<seed>; a run whose test metrics exist is not repeated, one with checkpoints is resumed
(``--eval-only``: never trained, e.g. copies of finished runs scored with another ``--beam-size``).
Usage: ``python benchmarks/synth_updown.py --data DATA --runs RUNS [--seeds 1 2 3] [--beam-size K] [--eval-only]
[--set KEY=VALUE ...]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from results import mean_sd, write_section

from vlattn.config import load_config
from vlattn.data.vocab import Vocabulary
from vlattn.models import build_captioner
from vlattn.models.profile import trainable

METRICS = ("Bleu_1", "Bleu_4", "METEOR", "ROUGE_L", "CIDEr")
MODELS = {"Up-Down": ("updown", "updown-demo"), "Up-Down + SLA": ("updown-sla", "updown-sla-demo")}
VLATTN = [sys.executable, "-m", "vlattn.cli", "--threads", "1"]


def run(command: list[str], log: Path) -> None:
    """Run a vlattn command, appending its output to ``log``; stop on failure."""
    with log.open("a") as handle:
        handle.write(f"$ {' '.join(command)}\n")
        handle.flush()
        subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, check=True)


def train_and_eval(config: str, out: Path, sets: list[str], beam: int, eval_only: bool) -> None:
    """Train (or resume; not with ``eval_only``) ``out`` and evaluate its best checkpoint on the test split with
    beam size ``beam``, unless already done."""
    if (out / "eval" / "test_metrics.json").is_file():
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    log = out.with_suffix(".log")
    if not eval_only:
        resume = ["--resume"] if (out / "checkpoints").exists() else []
        run([*VLATTN, "train", "--config", config, "--out", str(out), *[f"--set={s}" for s in sets], *resume], log)
    run([*VLATTN, "eval", "--checkpoint", str(out), "--split", "test", "--beam-size", str(beam)], log)


def scores(out: Path) -> dict[str, float]:
    report = json.loads((out / "eval" / "test_metrics.json").read_text())
    return {name: report["scores"][name] for name in METRICS if name in report["scores"]}


def val_curve(out: Path) -> list[float]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [row["CIDEr"] for row in rows if row["kind"] == "val"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="a `vlattn data synth` output directory")
    parser.add_argument("--runs", type=Path, required=True, help="where the run directories go")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="overrides for both models")
    parser.add_argument("--beam-size", type=int, default=None,
                        help="test decoding (default: the presets' eval.beam_size; 1 = greedy)")
    parser.add_argument("--eval-only", action="store_true", help="score existing runs, never train")
    parser.add_argument("--note", default="", help="a remark printed under the table")
    parser.add_argument("--no-write", action="store_true", help="print only, leave RESULTS.md alone")
    args = parser.parse_args()
    beam = args.beam_size or load_config(MODELS["Up-Down"][1], [f"data.root={args.data}", *args.overrides]).eval.beam_size
    for seed in args.seeds:  # seed by seed, the two models one after the other
        for name, config in MODELS.values():
            sets = [f"data.root={args.data}", f"train.seed={seed}", *args.overrides]
            train_and_eval(config, args.runs / f"{name}-s{seed}", sets, beam, args.eval_only)
    rows, seeds_rows, curves = [], [], []
    for label, (name, config) in MODELS.items():
        results = [scores(args.runs / f"{name}-s{seed}") for seed in args.seeds]
        cfg = load_config(config, [f"data.root={args.data}", *args.overrides])
        vocab = Vocabulary.load(args.runs / f"{name}-s{args.seeds[0]}" / "vocab-words.json")
        parameters = trainable(build_captioner(cfg.model, len(vocab)))
        cells = [mean_sd([r[m] for r in results], 3) if all(m in r for r in results) else "n/a" for m in METRICS]
        rows.append(f"| {label} | {parameters:,} | " + " | ".join(cells) + " |")
        seeds_rows.append(f"| {label} | " + " | ".join(f"{r['CIDEr']:.3f}" for r in results) + " |")
        for seed in args.seeds:
            curve = ", ".join(f"{value:.3f}" for value in val_curve(args.runs / f"{name}-s{seed}"))
            curves.append(f"{label}, seed {seed}: {curve}")
    sets = "".join(f" --set {item}" for item in args.overrides)
    commands = [f".venv/bin/vlattn --threads 1 data synth --out {args.data}"]
    for name, config in MODELS.values():
        run_dir = args.runs / f"{name}-sSEED"
        commands.append(f".venv/bin/vlattn --threads 1 train --config {config} --out {run_dir} --set data.root={args.data} "
                        f"--set train.seed=SEED{sets}")
        commands.append(f".venv/bin/vlattn --threads 1 eval --checkpoint {run_dir} --split test --beam-size {beam}")
    commands.append(f".venv/bin/python benchmarks/synth_updown.py --data {args.data} --runs {args.runs} "
                    f"--seeds {' '.join(map(str, args.seeds))} --beam-size {beam}{' --eval-only' * args.eval_only}{sets}")
    cfg = load_config(MODELS["Up-Down + SLA"][1], [f"data.root={args.data}", *args.overrides])
    model, train = cfg.model, cfg.train
    sla = model.decoder_cross_attention.options
    decoding = "greedy decoding" if beam == 1 else f"beam {beam}"
    body = f"""Synthetic data set {args.data} (`vlattn data synth`, defaults: 2000 images, 1600 train / 200 val / 200 test,
5 captions each, 512-d region features). vlattn/presets/updown-demo.yaml (Up-Down, additive top-down attention: LSTMs
{model.d_model}, embedding {model.options['embed_dim']}, attention {model.options['attention_dim']}, box channels appended to the
features, {train.epochs} XE epochs, batch {train.batch_size}, lr {train.schedule.options['base_lr']:g} x{train.schedule.options['decay_factor']:g} every
{train.schedule.options['decay_every']} epochs after epoch {train.schedule.options['decay_start_epoch']}, dropout {model.dropout}) vs vlattn/presets/updown-sla-demo.yaml (the same with SLA at
the top-down site: T = {sla['units']}, {sla['activation']}, positional bias from the {sla['position']}, {sla['pooling']} pooling);
overrides `{' '.join(args.overrides) or 'none'}`. Same budget:
same epochs, batches and schedule; seeds {', '.join(map(str, args.seeds))} (model initialisation and data order);
best checkpoint by validation CIDEr-D (greedy), test split, {decoding}; mean ± sample standard deviation over the seeds.

| model | parameters | {' | '.join(METRICS)} |
|---|---|{'---|' * len(METRICS)}
{chr(10).join(rows)}

Test CIDEr-D per seed ({', '.join(map(str, args.seeds))}):

| model | {' | '.join(f'seed {s}' for s in args.seeds)} |
|---|{'---|' * len(args.seeds)}
{chr(10).join(seeds_rows)}

Validation CIDEr-D after each epoch: {'; '.join(curves)}. {args.note}

Commands (SEED in {', '.join(map(str, args.seeds))}; the driver runs them in this order, seed by seed):

```
{chr(10).join(commands)}
```"""
    print(body)
    if not args.no_write:
        write_section("Up-Down vs Up-Down + SLA on synthetic data", body)


if __name__ == "__main__":
    main()
