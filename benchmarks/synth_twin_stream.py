"""Twin-stream SLA vs the same model with plain stacked attention on the synthetic VQA split (issue 13): the test
accuracy (overall, per answer type, per question type) of finished runs of configs/vqa-sla-demo.yaml and
configs/vqa-stacked-demo.yaml trained with the same budget, beside the majority training answer of each question
type; written to benchmarks/RESULTS.md ("## Twin-stream SLA vs stacked attention on synthetic VQA").

Each run ``RUNS/<name>-s<seed>`` holds the ``vlattn eval --json`` output of its best checkpoint at
``RUNS/<name>-s<seed>.eval.json``; the commands are printed with the table.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from results import mean_sd, write_section

from vlattn.config import load_config
from vlattn.models import build_vqa_model
from vlattn.models.profile import trainable
from vlattn.tasks.vqa import majority_baseline, read_split

MODELS = {"twin-stream SLA": ("sla", "configs/vqa-sla-demo.yaml"),
          "twin-stream stacked attention": ("stacked", "configs/vqa-stacked-demo.yaml")}
TYPES = ("yes/no", "number", "other")


def cells(reports: list[dict]) -> list[str]:
    """Overall and per answer type: the mean over the seeds (± sample deviation with several)."""
    columns = [[r["overall"] for r in reports]] + [[r["perAnswerType"][t] for r in reports] for t in TYPES]
    return [mean_sd(column, 2) for column in columns]


def val_curve(run: Path) -> str:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return ", ".join(f"{r['accuracy']:.1f}" for r in rows if r["kind"] == "val")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, required=True, help="holds <name>-s<seed>/ and their .eval.json")
    parser.add_argument("--data", required=True, help="the `vlattn data synth --grid 6` root the runs used")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="overrides the runs used (both)")
    parser.add_argument("--note", default="", help="a remark printed under the table")
    parser.add_argument("--no-write", action="store_true", help="print only, leave RESULTS.md alone")
    args = parser.parse_args()
    sets = "".join(f" --set {item}" for item in args.overrides)
    rows, per_seed, curves, per_type, commands = [], [], [], {}, [f".venv/bin/vlattn --threads 1 data synth --out {args.data} --grid 6"]
    for label, (name, config) in MODELS.items():
        runs = [args.runs / f"{name}-s{seed}" for seed in args.seeds]
        reports = [json.loads(Path(f"{run}.eval.json").read_text()) for run in runs]
        cfg = load_config(config, [f"data.root={args.data}", *args.overrides])
        words = json.loads((runs[0] / "checkpoints" / "best" / "vocab-words.json").read_text())
        answers = json.loads((runs[0] / "checkpoints" / "best" / "vocab-answers.json").read_text())["answers"]
        parameters = trainable(build_vqa_model(cfg.model, len(words["itos"]), len(answers)))
        rows.append(f"| {label} | {parameters:,} | " + " | ".join(cells(reports)) + " |")
        per_type[label] = {kind: mean_sd([r["perQuestionType"][kind] for r in reports], 2)
                           for kind in reports[0]["perQuestionType"]}
        per_seed.append(f"| {label} | " + " | ".join(f"{r['overall']:.2f}" for r in reports) + " |")
        curves += [f"{label}, seed {seed}: {val_curve(run)}" for seed, run in zip(args.seeds, runs)]
        run = args.runs / f"{name}-sSEED"
        commands.append(f".venv/bin/vlattn --threads 1 train --config {config} --out {run} --set data.root={args.data} "
                        f"--set train.seed=SEED{sets}")
        commands.append(f".venv/bin/vlattn --threads 1 eval --checkpoint {run} --split test --json > {run}.eval.json")
    cfg = load_config(MODELS["twin-stream SLA"][1], [f"data.root={args.data}", *args.overrides])
    prior = majority_baseline(read_split(Path(args.data), cfg.data, "train").annotations,
                              read_split(Path(args.data), cfg.data, "test").annotations)
    rows.append("| majority training answer of the question type | - | " + " | ".join(cells([prior])) + " |")
    commands.append(f".venv/bin/python benchmarks/synth_twin_stream.py --runs {args.runs} --data {args.data} "
                    f"--seeds {' '.join(map(str, args.seeds))}{sets}")
    labels = list(per_type)
    type_rows = "\n".join(f"| {kind} | " + " | ".join(per_type[label][kind] for label in labels)
                          + f" | {prior['perQuestionType'][kind]:.2f} |" for kind in per_type[labels[0]])
    model, train, sla = cfg.model, cfg.train, cfg.model.options["attention"]["options"]
    schedule = ", ".join(f"{key} {value}" for key, value in train.schedule.options.items())
    body = f"""Synthetic data set at {args.data} (`vlattn data synth --grid 6`: 2000 images, 1600 train / 200 val / 200 test,
5 questions per image with ten simulated answers each; the visual stream reads the 6 x 6 grid of 512-d cell
features, as the paper's stream reads a 14 x 14 ResNet grid). configs/vqa-sla-demo.yaml (twin-stream SLA: T =
{sla['units']} units per stream, m = {model.d_model}, grid positional bias over {sla['grid_cells']} cells, {model.options['features']} features,
{model.options['init']} initialisation) vs configs/vqa-stacked-demo.yaml (the same model with plain stacked attention units: softmax in
the main pathway, no positional bias). Same budget: {train.epochs} epochs, batch {train.batch_size}, Adam {tuple(train.adam_betas)},
schedule {train.schedule.name} ({schedule}); seeds {', '.join(map(str, args.seeds))}; best checkpoint by validation accuracy, test
split, official VQA accuracy in percent (mean ± sample deviation over the seeds when there are several).

| model | parameters | overall | yes/no | number | other |
|---|---|---|---|---|---|
{chr(10).join(rows)}

Overall test accuracy per seed ({', '.join(map(str, args.seeds))}):

| model | {' | '.join(f'seed {s}' for s in args.seeds)} |
|---|{'---|' * len(args.seeds)}
{chr(10).join(per_seed)}

Per question type (mean ± sample deviation over the seeds):

| question type | {' | '.join(labels)} | majority |
|---|---|---|---|
{type_rows}

Validation accuracy after each epoch: {'; '.join(curves)}. {args.note}

Commands (SEED in {', '.join(map(str, args.seeds))}):

```
{chr(10).join(commands)}
```"""
    print(body)
    if not args.no_write:
        write_section("Twin-stream SLA vs stacked attention on synthetic VQA", body)


if __name__ == "__main__":
    main()
