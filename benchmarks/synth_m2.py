"""M2 vs Transformer on the synthetic data set: collect the test metrics of two finished runs and write
them to benchmarks/RESULTS.md ("## M2 vs Transformer on synthetic data") with the commands that produced them.

Each run directory holds the ``vlattn eval --json`` output of its best checkpoint at ``RUN.eval.json``
(see ``--help`` for the commands this expects to have been run).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml
from results import write_section

METRICS = ("Bleu_1", "Bleu_4", "METEOR", "ROUGE_L", "CIDEr", "SPICE")
MODELS = {"Transformer": "demo", "M2": "m2-demo"}


def scores_of(report: dict) -> dict[str, float]:
    """The metrics of a ``vlattn eval --json`` report (top level or under ``scores``)."""
    flat = {**report, **report.get("scores", {})}
    return {name: flat[name] for name in METRICS if isinstance(flat.get(name), (int, float))}


def val_cider(run: Path) -> str:
    """Validation CIDEr-D after each epoch, from the run's ``metrics.jsonl``."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return ", ".join(f"{row['CIDEr']:.3f}" for row in rows if row["kind"] == "val")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, default=Path("runs/m2"), help="holds transformer/, m2/ and *.eval.json")
    parser.add_argument("--data", default="data/synth", help="the synthetic data root the runs used")
    parser.add_argument("--eval-data", help="the data root given to `vlattn eval --data` (default: the training one)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="overrides both runs used")
    parser.add_argument("--note", default="", help="a remark on the runs, printed under the table")
    parser.add_argument("--no-write", action="store_true", help="print only, leave RESULTS.md alone")
    args = parser.parse_args()
    sets = " ".join(f"--set {item}" for item in [f"data.root={args.data}", *args.overrides])
    eval_data = f" --data {args.eval_data}" if args.eval_data else ""
    rows, commands, curves = [], [], []
    for model, config in MODELS.items():
        run = args.runs / model.lower()
        scores = scores_of(json.loads((args.runs / f"{model.lower()}.eval.json").read_text()))
        rows.append(f"| {model} | " + " | ".join(f"{scores[m]:.3f}" if m in scores else "n/a" for m in METRICS) + " |")
        curves.append(f"{model}: {val_cider(run)}")
        commands.append(f".venv/bin/vlattn train --config {config} --out {run} {sets}")
        commands.append(f".venv/bin/vlattn eval --checkpoint {run} --split test{eval_data} --json > {run}.eval.json")
    collect = f".venv/bin/python benchmarks/synth_m2.py --runs {args.runs} --data {args.data}"
    collect += f" --eval-data {args.eval_data}" if args.eval_data else ""
    commands.append(collect + "".join(f" --set {item}" for item in args.overrides))
    model = yaml.safe_load((args.runs / "transformer" / "config.yaml").read_text())["model"]
    layers = f"{model['encoder_layers']}+{model['decoder_layers']} layers"
    shape = f"{layers}, d={model['d_model']}, {model['num_heads']} heads"
    body = f"""Synthetic data set at {args.data} (2000 images: 1600 train / 200 val / 200 test, 5 captions each, 512-d
region features). The Transformer of vlattn/presets/demo.yaml vs M2 (vlattn/presets/m2-demo.yaml: the same model and training
with m=40 memory slots and meshed sigmoid-gated cross-attention), both as the presets stood when the runs were
made ({shape}; the full configs are in each run's config.yaml), the same budget: batch 50, overrides
`{' '.join(args.overrides) or 'none'}`; best checkpoint by val CIDEr-D, test split, beam 3.

| model | {' | '.join(METRICS)} |
|---|{'---|' * len(METRICS)}
{chr(10).join(rows)}

Validation CIDEr-D after each epoch: {'; '.join(curves)}. {args.note}

Commands:

```
{chr(10).join(commands)}
```"""
    print(body)
    if not args.no_write:
        write_section("M2 vs Transformer on synthetic data", body)


if __name__ == "__main__":
    main()
