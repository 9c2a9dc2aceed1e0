"""MCAN on the synthetic VQA split (issue 10): the test accuracy of a finished MCAN run beside the same model
trained and evaluated with the image zeroed (question only) and the majority training answer of each question
type; written to benchmarks/RESULTS.md ("## VQA on synthetic data") with the commands that produced it.

Each run directory holds the ``vlattn eval --json`` output of its best checkpoint at ``RUN.eval.json``
(see ``--help`` for the commands this expects to have been run).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml
from results import write_section

from vlattn.config import load_config
from vlattn.tasks.vqa import majority_baseline, read_split

CONFIG = "configs/vqa-demo.yaml"
RUNS = {"MCAN": [], "MCAN, image zeroed (question only)": ["data.zero_image=true"]}
TYPES = ("yes/no", "number", "other")


def run_dir(runs: Path, name: str) -> Path:
    return runs / ("question-only" if "zeroed" in name else "mcan")


def row(name: str, report: dict) -> str:
    cells = [report["overall"], *(report["perAnswerType"].get(kind, float("nan")) for kind in TYPES)]
    return f"| {name} | " + " | ".join(f"{value:.2f}" for value in cells) + " |"


def val_curve(run: Path) -> str:
    """Validation accuracy after each epoch, from the run's ``metrics.jsonl``."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return ", ".join(f"{r['accuracy']:.1f}" for r in rows if r["kind"] == "val")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, default=Path("/tmp/vqa_runs"), help="holds mcan/, question-only/, *.eval.json")
    parser.add_argument("--data", default="/tmp/synth_default", help="the synthetic data root the runs used")
    parser.add_argument("--note", default="", help="a remark on the runs, printed under the table")
    parser.add_argument("--no-write", action="store_true", help="print only, leave RESULTS.md alone")
    args = parser.parse_args()
    cfg = load_config(CONFIG, [f"data.root={args.data}"])
    rows, curves = [], []
    commands = [f".venv/bin/vlattn --threads 1 data synth --out {args.data}"]
    for name, overrides in RUNS.items():
        run = run_dir(args.runs, name)
        report = json.loads(Path(f"{run}.eval.json").read_text())
        rows.append(row(name, report))
        curves.append(f"{name}: {val_curve(run)}")
        sets = " ".join(f"--set {item}" for item in [f"data.root={args.data}", *overrides])
        commands.append(f".venv/bin/vlattn --threads 1 train --config {CONFIG} --out {run} {sets}")
        commands.append(f".venv/bin/vlattn --threads 1 eval --checkpoint {run} --split test --json > {run}.eval.json")
    prior = majority_baseline(read_split(Path(args.data), cfg.data, "train").annotations,
                              read_split(Path(args.data), cfg.data, "test").annotations)
    rows.append(row("majority training answer of the question type", prior))
    commands.append(f".venv/bin/python benchmarks/synth_vqa.py --runs {args.runs} --data {args.data}")
    mcan = json.loads(Path(f"{run_dir(args.runs, 'MCAN')}.eval.json").read_text())
    blind = json.loads(Path(f"{run_dir(args.runs, 'zeroed')}.eval.json").read_text())
    model = yaml.safe_load((run_dir(args.runs, "MCAN") / "config.yaml").read_text())["model"]
    shape = (f"{model['encoder_layers']}+{model['decoder_layers']} layers, d={model['d_model']}, "
             f"{model['num_heads']} heads, box input {model['box_input']}")
    per_type = "\n".join(
        f"| {kind} | {mcan['perQuestionType'][kind]:.2f} | {blind['perQuestionType'][kind]:.2f} | "
        f"{prior['perQuestionType'][kind]:.2f} |" for kind in mcan["perQuestionType"])
    body = f"""Synthetic data set at {args.data} (`vlattn data synth` defaults: 2000 images, 1600 train / 200 val /
200 test, 5 questions per image with ten simulated answers each, 512-d region features). MCAN of {CONFIG}
({shape}; the full config is in each run's config.yaml), best checkpoint by validation accuracy, test split
({mcan['questions']:,} questions), official VQA accuracy in percent. "Image zeroed" is the same model and training with every region
feature and box set to zero (`data.zero_image=true`), in training and evaluation: what the questions alone
allow. The majority baseline answers every question with the most frequent training answer of its question
type.

| model | overall | yes/no | number | other |
|---|---|---|---|---|
{chr(10).join(rows)}

Per question type:

| question type | MCAN | image zeroed | majority |
|---|---|---|---|
{per_type}

The image adds {mcan['overall'] - blind['overall']:+.2f} points over the question-only model
({mcan['overall'] - prior['overall']:+.2f} over the majority answers). Validation accuracy after each epoch:
{'; '.join(curves)}. {args.note}

Commands:

```
{chr(10).join(commands)}
```"""
    print(body)
    if not args.no_write:
        write_section("VQA on synthetic data", body)


if __name__ == "__main__":
    main()
