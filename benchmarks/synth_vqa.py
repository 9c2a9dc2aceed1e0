"""VQA models on the synthetic VQA split, from finished runs: the test accuracy (overall, per answer type, per question
type; mean ± sample deviation over seeds) beside the majority training answer of each question type, with the
commands that produced it. Two comparisons, each written to its own section of benchmarks/RESULTS.md:

- ``--compare image``: MCAN (vlattn/presets/vqa-demo.yaml) beside the same model
  trained and evaluated with the image zeroed (question only);
- ``--compare catt``: MCAN beside MCAN+CATT at the same size
  and budget (vlattn/presets/vqa-catt-demo.yaml);
- ``--compare sla``: the twin-stream SLA model
  (vlattn/presets/vqa-sla-demo.yaml) beside the same model with plain stacked attention units (vlattn/presets/vqa-stacked-demo.yaml),
  on the grid features of ``vlattn data synth --grid 6``.

Run directories are ``RUNS/<stem>`` (one seed, the config's) or ``RUNS/<stem>-s<seed>`` (``--seeds``); each holds
the ``vlattn eval --json`` output of its best checkpoint at ``<run>.eval.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from results import write_section

from vlattn.config import Config, load_config
from vlattn.models import build_vqa_model
from vlattn.models.profile import trainable
from vlattn.tasks.vqa import majority_baseline, read_split

TYPES = ("yes/no", "number", "other")


@dataclass(frozen=True)
class Model:
    """One compared model: its table label, run-directory stem, config and overrides."""

    label: str
    stem: str
    config: str
    overrides: tuple[str, ...] = ()


def mcan_shape(cfg: Config) -> str:
    """The MCAN size of the intro."""
    m = cfg.model
    return (f"MCAN: {m.encoder_layers}+{m.decoder_layers} layers, d={m.d_model}, {m.num_heads} heads, box input "
            f"{m.box_input}.")


def twin_stream_shape(cfg: Config) -> str:
    """The twin-stream SLA size of the intro (the stacked model is the same with plain stacked attention units)."""
    m, sla = cfg.model, cfg.model.options["attention"]["options"]
    return (f"Twin-stream SLA: T = {sla['units']} units per stream, m = {m.d_model}, grid positional bias over "
            f"{sla['grid_cells']} cells, {m.options['features']} features, {m.options['init']} initialisation; the "
            "stacked model has plain stacked attention units (softmax in the main pathway, no positional bias), "
            "as in the paper's Sec. 4.1.4 comparison. The visual stream reads the grid of cell features, as the "
            "paper's reads a 14 x 14 ResNet grid.")


@dataclass(frozen=True)
class Comparison:
    """The models of one RESULTS section, the ``vlattn data synth`` options their data needs and their size."""

    heading: str
    models: tuple[Model, ...]
    data_options: str = ""
    shape: Callable[[Config], str] = mcan_shape


MCAN = Model("MCAN", "mcan", "vqa-demo")
COMPARISONS = {
    "image": Comparison("VQA on synthetic data", (
        MCAN, Model("MCAN, image zeroed (question only)", "question-only", MCAN.config, ("data.zero_image=true",)))),
    "catt": Comparison("MCAN vs MCAN+CATT on synthetic VQA", (
        MCAN, Model("MCAN+CATT", "catt", "vqa-catt-demo"))),
    "sla": Comparison("Twin-stream SLA vs stacked attention on synthetic VQA", (
        Model("twin-stream SLA", "sla", "vqa-sla-demo"),
        Model("twin-stream stacked attention", "stacked", "vqa-stacked-demo")),
        data_options=" --grid 6", shape=twin_stream_shape),
}


def run_dirs(runs: Path, model: Model, seeds: list[int] | None) -> list[Path]:
    """The model's run directories: one per seed, or the config's seed alone."""
    return [runs / model.stem] if not seeds else [runs / f"{model.stem}-s{seed}" for seed in seeds]


def mean_sd(values: list[float]) -> str:
    """Mean ± sample standard deviation; the value alone for one run."""
    text = f"{statistics.mean(values):.2f}"
    return text + (f" ± {statistics.stdev(values):.2f}" if len(values) > 1 else "")


def answer_type_cells(reports: list[dict]) -> list[str]:
    """Overall and per answer type, over the runs."""
    columns = [[r["overall"] for r in reports]] + [[r["perAnswerType"].get(t, float("nan")) for r in reports]
                                                   for t in TYPES]
    return [mean_sd(column) for column in columns]


def fill(text: str) -> str:
    """A paragraph wrapped as RESULTS.md is."""
    return textwrap.fill(text, width=116, break_long_words=False, break_on_hyphens=False)


def val_curve(run: Path) -> str:
    """Validation accuracy after each epoch, from the run's ``metrics.jsonl``."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return ", ".join(f"{r['accuracy']:.1f}" for r in rows if r["kind"] == "val")


def config_of(model: Model, data: str, overrides: list[str]) -> Config:
    """The config the model's runs train with (seed aside)."""
    return load_config(model.config, [f"data.root={data}", *model.overrides, *overrides])


def parameters(cfg: Config, run: Path) -> int:
    """Trainable parameters of ``cfg``'s model at the vocabularies of ``run``'s best checkpoint."""
    best = run / "checkpoints" / "best"
    words = json.loads((best / "vocab-words.json").read_text())["itos"]
    answers = json.loads((best / "vocab-answers.json").read_text())["answers"]
    return trainable(build_vqa_model(cfg.model, len(words), len(answers)))


def commands(model: Model, runs: Path, data: str, seeds: list[int] | None, overrides: list[str]) -> list[str]:
    """The train and eval commands of the model's runs (SEED stands for each seed)."""
    run = runs / (model.stem if not seeds else f"{model.stem}-sSEED")
    sets = [f"data.root={data}", *model.overrides, *(["train.seed=SEED"] if seeds else []), *overrides]
    return [f".venv/bin/vlattn --threads 1 train --config {model.config} --out {run} "
            + " ".join(f"--set {item}" for item in sets),
            f".venv/bin/vlattn --threads 1 eval --checkpoint {run} --split test --json > {run}.eval.json"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compare", choices=sorted(COMPARISONS), default="image", help="which models (see above)")
    parser.add_argument("--runs", type=Path, default=Path("runs/vqa"), help="holds the runs and *.eval.json")
    parser.add_argument("--data", default="data/synth", help="the synthetic data root the runs used")
    parser.add_argument("--seeds", type=int, nargs="*", default=None, help="runs <stem>-s<seed> (default: <stem>)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        help="an override every model's runs used (repeatable)")
    parser.add_argument("--note", default="", help="a remark on the runs, printed under the table")
    parser.add_argument("--no-write", action="store_true", help="print only, leave RESULTS.md alone")
    args = parser.parse_args()
    comparison = COMPARISONS[args.compare]
    cfg = config_of(comparison.models[0], args.data, args.overrides)
    test = read_split(Path(args.data), cfg.data, "test").annotations
    prior = majority_baseline(read_split(Path(args.data), cfg.data, "train").annotations, test)
    rows, curves, per_seed, per_type, overall = [], [], [], {}, {}
    lines = [f".venv/bin/vlattn --threads 1 data synth --out {args.data}{comparison.data_options}"]
    for model in comparison.models:
        runs = run_dirs(args.runs, model, args.seeds)
        reports = [json.loads(Path(f"{run}.eval.json").read_text()) for run in runs]
        rows.append(f"| {model.label} | {parameters(config_of(model, args.data, args.overrides), runs[0]):,} | " + " | ".join(answer_type_cells(reports)) + " |")
        per_type[model.label] = {kind: [r["perQuestionType"][kind] for r in reports] for kind in prior["perQuestionType"]}
        overall[model.label] = [r["overall"] for r in reports]
        seeds = args.seeds or [config_of(model, args.data, args.overrides).train.seed]
        curves += [f"{model.label}, seed {seed}: {val_curve(run)}" for seed, run in zip(seeds, runs, strict=True)]
        per_seed += [f"| {model.label} | {seed} | " + " | ".join(answer_type_cells([report])) + " |"
                     for seed, report in zip(seeds, reports, strict=True)]
        lines += commands(model, args.runs, args.data, args.seeds, args.overrides)
    rows.append("| majority training answer of the question type | - | " + " | ".join(answer_type_cells([prior])) + " |")
    seeds_option = f" --seeds {' '.join(map(str, args.seeds))}" if args.seeds else ""
    sets = "".join(f" --set {item}" for item in args.overrides)
    lines.append(f".venv/bin/python benchmarks/synth_vqa.py --compare {args.compare} --runs {args.runs} "
                 f"--data {args.data}{seeds_option}{sets}")
    labels = list(per_type)
    type_rows = "\n".join(f"| {kind} | " + " | ".join(mean_sd(per_type[label][kind]) for label in labels)
                          + f" | {prior['perQuestionType'][kind]:.2f} |" for kind in prior["perQuestionType"])
    base, other = labels[0], labels[1]
    gaps = [b - a for a, b in zip(overall[base], overall[other], strict=True)]
    train = cfg.train
    budget = (f"{train.epochs} epochs, batch {train.batch_size}, schedule {train.schedule.name} "
              f"({', '.join(f'{k} {v}' for k, v in train.schedule.options.items())})")
    seed_text = (f"seeds {', '.join(map(str, args.seeds))} (mean ± sample standard deviation over them)" if args.seeds
                 else f"one seed ({seeds[0]})")
    models = " vs ".join(f"{m.label} ({m.config}" + "".join(f", `{o}`" for o in m.overrides) + ")"
                         for m in comparison.models)
    features = "6 x 6 grid cell features" if comparison.data_options else "region features"
    intro = (f"Synthetic data set at {args.data} (`vlattn data synth{comparison.data_options}`: 2000 images, 1600 "
             f"train / 200 val / 200 test, 5 questions per image with ten simulated answers each, 512-d {features}). "
             f"{models}. {comparison.shape(cfg)} The same budget for every model: {budget}; {seed_text}; the full config is in each run's "
             f"config.yaml. Best checkpoint by validation accuracy, test split ({len(test):,} questions), official VQA "
             "accuracy in percent. The majority baseline answers every question with the most frequent training "
             "answer of its question type.")
    gap = f"{statistics.mean(gaps):+.2f}" + (f" ± {statistics.stdev(gaps):.2f}" if len(gaps) > 1 else "")
    reading = (f"{other} minus {base}, overall: {gap} points (per seed: {', '.join(f'{g:+.2f}' for g in gaps)}). "
               f"Validation accuracy after each epoch: {'; '.join(curves)}. {args.note}")
    body = f"""{fill(intro)}

| model | parameters | overall | yes/no | number | other |
|---|---|---|---|---|---|
{chr(10).join(rows)}

Per question type:

| question type | {' | '.join(labels)} | majority |
|---|{'---|' * len(labels)}---|
{type_rows}

Per seed:

| model | seed | overall | yes/no | number | other |
|---|---|---|---|---|---|
{chr(10).join(per_seed)}

{fill(reading)}

Commands{' (SEED in ' + ', '.join(map(str, args.seeds)) + ')' if args.seeds else ''}:

```
{chr(10).join(lines)}
```"""
    print(body)
    if not args.no_write:
        write_section(comparison.heading, body)


if __name__ == "__main__":
    main()
