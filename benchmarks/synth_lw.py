"""Transformer vs LW-Transformer 1x / 3x on the synthetic data, captioning or VQA (``--task``): the same
budget (data, epochs, batch, seed), test quality, parameters, FLOPs and measured training/inference speed side by
side; written to benchmarks/RESULTS.md ("## LW-Transformer on synthetic data", "## LW-Transformer on synthetic VQA
data").

Runs, one after another (one torch thread each): ``vlattn train`` with the task's Transformer preset
(vlattn/presets/demo.yaml; VQA: the MCAN of vlattn/presets/vqa-demo.yaml), its LW preset (vlattn/presets/lw-demo.yaml;
vlattn/presets/vqa-lw-demo.yaml) and the LW preset with expansion 3 at the three attention sites, then ``vlattn eval
--split test --json`` of each best checkpoint. Existing finished runs are reused (delete a run directory to redo
it). Speed is measured afterwards on the trained models, interleaved: one training step (forward + loss +
backward + Adam) on a real training batch, and inference on a real test batch (captioning: beam search with the
config's beam and length; VQA: answering the batch).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from functools import partial
from pathlib import Path

from collections.abc import Callable
from dataclasses import dataclass

import torch
from bench_lw import breakdown, breakdown_table
from bench_m2 import xe_run
from results import paired_ratio, write_section
from synth_m2 import METRICS, scores_of, val_cider
from synth_vqa import TYPES, val_curve
from torch import nn

from vlattn.data.captioning import collate_eval, collate_train
from vlattn.data.vocab import Vocabulary
from vlattn.data.vqa import collate_vqa
from vlattn.decoding import beam_search
from vlattn.models.profile import backbone_parameters, count_flops, count_parameters, time_interleaved, train_step
from vlattn.tasks import captioning, vqa
from vlattn.training.answers import answer_loss
from vlattn.training.checkpoint import load_checkpoint, load_weights

SITES = ("encoder_self_attention", "decoder_self_attention", "decoder_cross_attention")
EXPAND_3 = [f"model.{site}.options.expansion=3" for site in SITES]
VARIANTS = {  # task -> variant -> (preset, overrides)
    "captioning": {
        "Transformer": ("demo", []),
        "LW-Transformer 1x": ("lw-demo", []),
        "LW-Transformer 3x": ("lw-demo", EXPAND_3),
    },
    "vqa": {
        "Transformer": ("vqa-demo", []),
        "LW-Transformer 1x": ("vqa-lw-demo", []),
        "LW-Transformer 3x": ("vqa-lw-demo", EXPAND_3),
    },
}
VLATTN = [sys.executable, "-m", "vlattn.cli", "--threads", "1"]


def slug(name: str) -> str:
    return name.lower().replace(" ", "-").replace("-transformer", "")


def shell(command: list[str], stdout: Path | None = None) -> None:
    """Run ``command`` (output to ``stdout`` if given), raise on failure."""
    if stdout is None:
        subprocess.run(command, check=True)
        return
    with open(stdout, "w") as out:
        subprocess.run(command, check=True, stdout=out)


def train_and_eval(task: str, name: str, runs: Path, data: Path, overrides: list[str]) -> Path:
    """The run directory of variant ``name`` of ``task``, trained and evaluated unless already done."""
    config, extra = VARIANTS[task][name]
    run = runs / slug(name)
    sets = [item for value in [f"data.root={data}", *overrides, *extra] for item in ("--set", value)]
    if not (run / "checkpoints" / "best").is_dir():
        shell([*VLATTN, "train", "--config", config, "--out", str(run), *sets])
    report = run.with_suffix(".eval.json")
    if not report.is_file():
        shell([*VLATTN, "eval", "--checkpoint", str(run), "--split", "test", "--json"], stdout=report)
    return run


def training_seconds(run: Path) -> float:
    """Wall seconds from the first to the last record of the run's ``metrics.jsonl`` (training and validation)."""
    times = [json.loads(line)["time"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    return max(times) - min(times)


@dataclass
class Measured:
    """A trained model's timed runs (training step, inference) and the FLOPs of its training step."""

    model: nn.Module
    train: Callable[[], None]
    infer: Callable[[], None]
    train_flops: Callable[[], None]  # forward + loss + backward, no update (what the FLOPs count)


def captioning_runs(run: Path) -> Measured:
    """XE step on the first training batch, beam search over the first test batch of the run's data."""
    checkpoint = load_checkpoint(run / "checkpoints" / "best")
    cfg = checkpoint.config
    vocab = checkpoint.vocabulary("words", Vocabulary.load)
    data = captioning.load_caption_data(cfg.data, vocab)
    model = captioning.build_model(cfg, vocab, data.store.dim)
    load_weights(model, checkpoint)
    batch = collate_train([data.train_set()[i] for i in range(cfg.train.batch_size)])
    images = collate_eval([data.eval_set("test")[i] for i in range(cfg.eval.batch_size)])
    inputs = {key: batch[key] for key in ("features", "boxes", "region_mask", "tokens")}
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-9)

    def decode() -> None:
        model.eval()
        with torch.no_grad():
            beam_search(model, images, bos=vocab.BOS, eos=vocab.EOS, beam_size=cfg.eval.beam_size,
                        max_len=cfg.eval.max_len)

    def flops() -> None:
        model.train()
        train_step(model, inputs)

    return Measured(model, partial(xe_run, model, optimizer, inputs), decode, flops)


def vqa_runs(run: Path) -> Measured:
    """Training step (BCE with the config's reduction, Adam) on the first training batch, answering the first
    test batch of the run's data."""
    checkpoint = load_checkpoint(run / "checkpoints" / "best")
    cfg = checkpoint.config
    words, answers = vqa.checkpoint_vocabularies(checkpoint)
    data = vqa.load_vqa_data(cfg.data, words, answers)
    model = vqa.load_model(checkpoint, words, answers, data.store.dim, torch.device("cpu"))
    train_set, test_set = data.train_set(), data.dataset("test")
    batch = collate_vqa([train_set[i] for i in range(cfg.train.batch_size)])
    questions = collate_vqa([test_set[i] for i in range(cfg.eval.batch_size)])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-9)

    def backward() -> None:
        model.train()
        answer_loss(model(batch), batch["targets"], cfg.train.bce_reduction).backward()

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        backward()
        optimizer.step()

    def answer() -> None:
        model.eval()
        with torch.no_grad():
            model(questions)

    def flops() -> None:
        backward()
        model.zero_grad(set_to_none=True)

    return Measured(model, step, answer, flops)


@dataclass(frozen=True)
class Bench:
    """What differs between the tasks: how a trained model is timed, the names of the timed runs, the quality
    columns of an ``vlattn eval --json`` report, and the validation curve of a run."""

    heading: str
    measured: Callable[[Path], Measured]
    run_names: tuple[str, str]
    quality_columns: tuple[str, ...]
    quality: Callable[[dict], dict[str, float]]
    curve: Callable[[Path], str]
    fmt: str


def vqa_quality(report: dict) -> dict[str, float]:
    return {"overall": report["overall"], **{kind: report["perAnswerType"][kind] for kind in TYPES
                                            if kind in report["perAnswerType"]}}


BENCHES = {
    "captioning": Bench("LW-Transformer on synthetic data", captioning_runs, ("XE step", "beam search"), METRICS,
                        scores_of, val_cider, "{:.3f}"),
    "vqa": Bench("LW-Transformer on synthetic VQA data", vqa_runs, ("training step", "answering"),
                 ("overall", *TYPES), vqa_quality, val_curve, "{:.2f}"),
}


def speed(bench: Bench, runs: dict[str, Path], repeats: int) -> tuple[dict, dict, dict]:
    """Interleaved training-step and inference times of the trained models, their sizes and FLOPs, and where
    the time goes (profile of three more calls of each)."""
    sizes, tasks = {}, {}
    for name, run in runs.items():
        measured = bench.measured(run)
        model = measured.model
        sizes[name] = {"params": count_parameters(model)["total"], "backbone": backbone_parameters(model),
                       "gflops": count_flops(measured.train_flops) / 1e9}
        tasks[(bench.run_names[0], name)] = measured.train
        tasks[(bench.run_names[1], name)] = measured.infer
    times = time_interleaved(tasks, repeats)
    profiles = {(task, name): breakdown(run, runs=3) for (task, name), run in tasks.items()}
    return times, sizes, profiles


def commands_of(task: str, args: argparse.Namespace) -> list[str]:
    """The commands that make the data and each run of ``task`` (what :func:`main` runs)."""
    sets = " ".join(f"--set {item}" for item in args.overrides)
    commands = [f"vlattn --threads 1 data synth --out {args.data}"]
    for name, (config, extra) in VARIANTS[task].items():
        run = args.runs / slug(name)
        extras = " ".join(f"--set {item}" for item in extra)
        commands.append(f"vlattn --threads 1 train --config {config} --out {run} --set data.root={args.data} {sets} {extras}".strip())
        commands.append(f"vlattn --threads 1 eval --checkpoint {run} --split test --json > {run}.eval.json")
    return commands


@dataclass
class Tables:
    """The markdown of one task's results: quality rows, cost rows, the profile table, validation curves."""

    quality: str
    cost: str
    profile: str
    curves: str


def tables(bench: Bench, runs: dict[str, Path], repeats: int) -> Tables:
    times, sizes, profiles = speed(bench, runs, repeats)
    quality, cost = [], []
    for name, run in runs.items():
        scores = bench.quality(json.loads(run.with_suffix(".eval.json").read_text()))
        cells = [bench.fmt.format(scores[m]) if m in scores else "n/a" for m in bench.quality_columns]
        quality.append(f"| {name} | {' | '.join(cells)} |")
        size = sizes[name]
        cells = [f"{size['params']:,}", f"{size['backbone']:,}", f"{size['gflops']:.2f}"]
        for task in bench.run_names:
            ours, plain = times[(task, name)], times[(task, "Transformer")]
            cells.append(f"{statistics.median(ours):.0f} | {paired_ratio(ours, plain):.2f}x")
        cost.append(f"| {name} | {' | '.join(cells)} | {training_seconds(run):.0f} s |")
    order = sorted(profiles, key=lambda key: (bench.run_names.index(key[0]), list(runs).index(key[1])))
    header = f"| op group | {' | '.join(f'{name}: {task}' for task, name in order)} |\n|---|{'---|' * len(order)}"
    profile_rows = breakdown_table({key: profiles[key] for key in order})
    return Tables("\n".join(quality), "\n".join(cost), f"{header}\n{profile_rows}",
                  "; ".join(f"{name}: {bench.curve(run)}" for name, run in runs.items()))


def captioning_body(args: argparse.Namespace, t: Tables, sets: str) -> str:
    return f"""Synthetic data at {args.data} (`vlattn data synth`, defaults: 2000 images, 1600 train / 200 val / 200 test,
5 captions each, 512-d region features + box channels). Same budget for the three: vlattn/presets/demo.yaml's 2+2 layers,
d=128, 4 heads, FFN 512, 10 XE epochs, batch 50, seed 1234, Noam (scale 0.5, warm-up 400); LW = vlattn/presets/lw-demo.yaml
(G-MHA at the three attention sites and G-FFN, k=2, WS, the rate x sqrt(2) as in Sec. IV-C), 3x with Q/K head
width 3 x 32. Best checkpoint by val CIDEr-D, test split, beam 3. Overrides: `{sets or 'none'}`.

| model | {' | '.join(METRICS)} |
|---|{'---|' * len(METRICS)}
{t.quality}

Validation CIDEr-D (greedy) after each epoch: {t.curves}.

Cost: parameters (all; backbone = encoder + decoder layers), FLOPs of one XE step on a real training batch (50
captions; forward + backward), and wall time measured side by side after training (`torch.set_num_threads(1)`,
{args.repeats} interleaved rounds, medians; "vs Transformer" = median of the per-round ratios): one XE step with Adam on
that batch, beam search (beam 3, max 20 words) over 50 test images. The last column is each training run's wall
time from its metrics.jsonl (sequential runs on a shared machine: indicative only).

| model | parameters | backbone | XE-step GFLOPs | XE step (ms) | vs Transformer | beam search (ms) | vs Transformer | training |
|---|---|---|---|---|---|---|---|---|
{t.cost}

Where the time goes (`torch.profiler` after the timed rounds, self CPU ms per run, the mean of three runs each):

{t.profile}

Reading: one seed per model, and the validation CIDEr-D moves by up to 0.1 from one epoch to the next, so the
three are indistinguishable in quality here (as in the paper: COCO CIDEr 117.0 / 116.9 / 117.2 for the
Transformer / LW 1x / LW 3x, Table II). With 45% fewer backbone parameters LW 1x loses nothing measurable on
this data. Speed at this size is another matter than at the paper's: with d=128 every group is 64 channels
wide, narrow matrix products run far below the machine's peak, and a step is dominated by the vocabulary
output layer, dropout masks and element-wise work, so fewer multiply-adds buy little time. LW 1x is somewhat
faster; LW 3x (6% fewer FLOPs than the Transformer) is slower: its Q/K projections to three times the width,
its unfused attention products (queries/keys wider than values rule out SDPA's fused kernel) and the copies
and masking that come with them outweigh G-FFN's saving (profile rows above; on this shared machine a profile
row varies by about a third from run to run, the timing ratios are the interleaved medians). At the paper's
d=512 the layers are faster where their FLOPs are lower — see "LW-Transformer speed"."""


def vqa_body(args: argparse.Namespace, t: Tables, sets: str) -> str:
    return f"""Synthetic data at {args.data} (`vlattn data synth`, defaults: 2000 images, 1600 train / 200 val / 200 test,
5 questions per image with ten simulated answers each, 512-d region features + box channels). Same budget for the
three: vlattn/presets/vqa-demo.yaml's MCAN (2 question self-attention + 2 image self-/question-guided attention layers,
d=64, 4 heads, FFN 256, 64-d word embeddings), 12 epochs, batch 32, seed 1234, warm-up/multi-step schedule at 1e-3,
BCE summed; LW = vlattn/presets/vqa-lw-demo.yaml (G-MHA at the three attention sites and G-FFN, k=2 groups of 2 heads, WS,
the rate x sqrt(2) as in Sec. IV-C), 3x with Q/K head width 3 x 16. Best checkpoint by validation accuracy, test
split (1,000 questions), official VQA accuracy in percent. Overrides: `{sets or 'none'}`.

| model | {' | '.join(BENCHES["vqa"].quality_columns)} |
|---|{'---|' * len(BENCHES["vqa"].quality_columns)}
{t.quality}

Validation accuracy after each epoch: {t.curves}.

Cost: parameters (all; backbone = the SA + SGA layers), FLOPs of one training step on a real training batch (32
questions; forward + BCE + backward), and wall time measured side by side after training
(`torch.set_num_threads(1)`, {args.repeats} interleaved rounds, medians; "vs Transformer" = median of the per-round
ratios): one training step with Adam on that batch, answering 128 test questions. The last column is each training
run's wall time from its metrics.jsonl (runs on a shared machine, the Transformer's beside the two LW runs:
indicative only).

| model | parameters | backbone | step GFLOPs | training step (ms) | vs Transformer | answering (ms) | vs Transformer | training |
|---|---|---|---|---|---|---|---|---|
{t.cost}

Where the time goes (`torch.profiler` after the timed rounds, self CPU ms per run, the mean of three runs each):

{t.profile}

Reading: one seed per model; the validation accuracy still rises by 1-5 points per epoch near the end, and the
"number" questions (the smallest group, 67-78 here) move most, so the leads of LW 1x (+2.8) and LW 3x (+1.8)
over MCAN are within what another seed could change. What the runs do show: with 45% fewer backbone parameters
(128,320 vs 233,472), as in the paper (Table II, VQA2.0 val 67.17 / 67.10 / 67.19 for MCAN / LW 1x / LW 3x), the
group-wise model loses nothing on this data. Speed at this size: LW 1x has 28% fewer FLOPs per training step and
is about 10% faster in training and answering; LW 3x (7% fewer FLOPs than MCAN) is slower by a fifth. With d=64
every group is 32 channels wide, so per-op overhead rather than multiply-adds sets the time: its Q/K projections
to three times the width, unfused attention products (queries/keys wider than values rule out SDPA's fused
kernel) and the copies and reshapes around them (the "copies and masking" and "rest" rows) outweigh G-FFN's
saving, as in the captioning comparison. The training column is not a speed measure: the three runs overlapped
each other (and other jobs) on the shared 2-core machine. At the paper's d=512 the group-wise layers are faster
where their FLOPs are lower ("LW-Transformer speed")."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=sorted(BENCHES), default="captioning")
    parser.add_argument("--data", type=Path, default=Path("data/lw"), help="synthetic data root (made if absent)")
    parser.add_argument("--runs", type=Path, default=None,
                        help="run directories (default runs/lw, VQA runs/lw-vqa)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="overrides all runs use")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved speed rounds")
    parser.add_argument("--no-write", action="store_true", help="print only, leave RESULTS.md alone")
    args = parser.parse_args()
    args.runs = args.runs or Path("runs/lw" if args.task == "captioning" else "runs/lw-vqa")
    torch.set_num_threads(1)
    if not (args.data / "dataset.json").is_file():
        shell([*VLATTN, "data", "synth", "--out", str(args.data)])
    bench = BENCHES[args.task]
    runs = {name: train_and_eval(args.task, name, args.runs, args.data, args.overrides) for name in VARIANTS[args.task]}
    sets = " ".join(f"--set {item}" for item in args.overrides)
    body = (captioning_body if args.task == "captioning" else vqa_body)(args, tables(bench, runs, args.repeats), sets)
    task = "" if args.task == "captioning" else " --task vqa"
    body += f"""

Commands (or `.venv/bin/python benchmarks/synth_lw.py{task} --data {args.data} --runs {args.runs}`, which runs them):

```
{chr(10).join(commands_of(args.task, args))}
```"""
    print(body)
    if not args.no_write:
        write_section(bench.heading, body)


if __name__ == "__main__":
    main()
