"""Does LXMERT's pretraining help at the synthetic set's scale? For each variant and seed: pretrain the
lxmert-demo model on the synthetic set's captions and questions (vlattn/presets/lxmert-pretrain-demo.yaml: masked
LM, masked object prediction, matching, image QA), fine-tune it on the VQA split (vlattn/presets/vqa-lxmert-demo.yaml,
``--init`` the pretrained run), and fine-tune the same model from scratch with the same budget; score both on the
test split (official VQA accuracy) and write the means, the paired differences with their 95% confidence intervals
(Student's t over the seeds) and the per-seed values to benchmarks/RESULTS.md ("LXMERT pretraining on synthetic
data").

Variants (:data:`VARIANTS`): LXMERT, and the other kinds or attention choices given as config overrides of both
presets. LXMERT+CATT's image and word dictionaries (100 entries each, as vqa-catt-demo's) are initialised by k-means
in a fresh run's prepare step: the pretraining run's over its training regions and the WordPiece counts of its
captions and questions, the scratch fine-tuning run's over the same regions and its questions' counts; the
fine-tuning run from the pretrained one loads them with the other weights. The pretraining run is evaluated on
the val split (``vlattn eval``: each task's accuracy, and the masked pieces predicted again with another pair's
image, which says whether the pretrained model reads the image at all). Runs are resumable: a run whose ``<run>.eval.json`` exists is skipped, an unfinished one resumes. Every
command is ``vlattn --threads 1 ...``; ``--wrap`` prefixes the training and evaluation commands (a job-queue
wrapper), ``--jobs`` runs that many (variant, seed) chains at once, ``--collect-only`` only writes the table.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from results import write_section

# t quantiles 0.975 for 1..9 degrees of freedom (a 95% interval of a mean over 2..10 seeds)
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262)
VARIANTS: dict[str, tuple[str, list[str]]] = {  # key -> (row name, overrides of both presets)
    "lxmert": ("LXMERT", []),
    "lxmert-catt": ("LXMERT+CATT (dictionaries of 100, k-means)", [
        "model.kind=lxmert_catt", "model.options.image_dictionary.size=100", "model.options.word_dictionary.size=100"]),
    "lw-lxmert": ("LW-LXMERT 1x (G-MHA + G-FFN, k=2)", [
        *(f"model.{site}={{name: gmha, options: {{groups: 2, share_weights: true}}}}"
          for site in ("encoder_self_attention", "decoder_self_attention", "decoder_cross_attention")),
        "model.feed_forward={name: gffn, options: {groups: 2, share_weights: true}}"]),
}
PRETRAIN, FINETUNE = "lxmert-pretrain-demo", "vqa-lxmert-demo"
PRETRAIN_TASKS = (("words", "words"), ("words_other_image", "words with another image"), ("matching", "matching"),
                  ("objects", "objects"), ("attributes", "attributes"), ("answers", "answers"))  # (metric, label)
TYPES = ("yes/no", "number", "other")


def vlattn(*args: str) -> list[str]:
    return [str(Path(sys.executable).with_name("vlattn")), "--threads", "1", *args]


def sets(items: list[str]) -> list[str]:
    return [word for item in items for word in ("--set", item)]


def train(config: str, run: Path, overrides: list[str], args: argparse.Namespace, init: Path | None = None) -> None:
    """Train ``run`` (fresh, or resumed when it has a checkpoint) unless it finished."""
    if (run / "checkpoints" / "best").is_dir() and run.with_suffix(".done").exists():
        return
    start = ["--resume"] if (run / "checkpoints" / "last").is_dir() else ([] if init is None else ["--init", str(init)])
    subprocess.run([*args.wrap, *vlattn("train", "--config", config, "--out", str(run), *start, *sets(overrides))],
                   check=True)
    run.with_suffix(".done").touch()


def evaluate(run: Path, args: argparse.Namespace, split: str = "test") -> None:
    """``vlattn eval`` of ``run`` on ``split`` into ``<run>.eval.json``, unless it is there."""
    report = run.with_suffix(".eval.json")
    if report.exists():
        return
    done = subprocess.run([*args.wrap, *vlattn("eval", "--checkpoint", str(run), "--split", split, "--json")],
                          check=True, capture_output=True, text=True)
    report.write_text(done.stdout)


def chain(key: str, seed: int, args: argparse.Namespace) -> None:
    """Pretrain, fine-tune from it, fine-tune from scratch and evaluate both, for one (variant, seed)."""
    common = [f"data.root={args.data}", f"train.seed={seed}", *VARIANTS[key][1], *args.set]
    pretrained = args.runs / f"{key}-pretrain-s{seed}"
    train(PRETRAIN, pretrained, [*common, f"train.epochs={args.pretrain_epochs}"], args)
    evaluate(pretrained, args, split="val")
    for start in ("pretrained", "scratch"):
        run = args.runs / f"{key}-{start}-s{seed}"
        train(FINETUNE, run, [*common, f"train.epochs={args.epochs}"], args,
              init=pretrained if start == "pretrained" else None)
        evaluate(run, args)


def half_width(values: list[float]) -> float:
    """The half-width of the 95% confidence interval of the mean of ``values`` (Student's t; 0 for one value)."""
    return T975[len(values) - 2] * statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else 0.0


def interval(values: list[float]) -> str:
    """Mean ± the half-width of its 95% confidence interval."""
    mean = statistics.mean(values)
    return f"{mean:.2f}" if len(values) < 2 else f"{mean:.2f} ± {half_width(values):.2f}"


def verdict(differences: list[float]) -> str:
    """Whether the paired differences' 95% interval lies above 0, below it, or contains it."""
    mean, half = statistics.mean(differences), half_width(differences)
    return "helps" if mean - half > 0 else "hurts" if mean + half < 0 else "no significant difference"


def accuracy(run: Path) -> dict[str, float]:
    report = json.loads(run.with_suffix(".eval.json").read_text())
    return {"overall": report["overall"], **{t: report["perAnswerType"][t] for t in TYPES}}


def pretrain_metrics(run: Path) -> dict[str, float]:
    """The val-split evaluation of a pretraining run's checkpoint."""
    return json.loads(run.with_suffix(".eval.json").read_text())


def table(args: argparse.Namespace) -> str:
    rows, verdicts, per_seed, pretext = [], [], [], []
    for key in args.variants:
        name = VARIANTS[key][0]
        seeds = [s for s in args.seeds if all((args.runs / f"{key}-{start}-s{s}.eval.json").exists()
                                               for start in ("pretrain", "pretrained", "scratch"))]
        if not seeds:
            continue
        scores = {start: {s: accuracy(args.runs / f"{key}-{start}-s{s}") for s in seeds}
                  for start in ("scratch", "pretrained")}
        for start in ("scratch", "pretrained"):
            rows.append(f"| {name} | {start} | {len(seeds)} | " + " | ".join(
                interval([scores[start][s][c] for s in seeds]) for c in ("overall", *TYPES)) + " |")
        rows.append(f"| {name} | pretrained − scratch (paired) | {len(seeds)} | " + " | ".join(
            interval([scores["pretrained"][s][c] - scores["scratch"][s][c] for s in seeds])
            for c in ("overall", *TYPES)) + " |")
        gains = [scores["pretrained"][s]["overall"] - scores["scratch"][s]["overall"] for s in seeds]
        if len(seeds) > 1:  # an interval needs two seeds
            verdicts.append(f"{name}: {verdict(gains)}")
        per_seed.append(f"{name}: " + "; ".join(
            f"seed {s} {scores['scratch'][s]['overall']:.2f} -> {scores['pretrained'][s]['overall']:.2f}"
            for s in seeds))
        val = [pretrain_metrics(args.runs / f"{key}-pretrain-s{s}") for s in seeds]
        pretext.append(f"{name}: " + ", ".join(
            f"{label} {statistics.mean(v[f'{task}_accuracy'] for v in val):.1f}" for task, label in PRETRAIN_TASKS))
    command = ["benchmarks/synth_pretrain.py", "--data", str(args.data), "--runs", str(args.runs), "--seeds",
               *map(str, args.seeds), "--variants", *args.variants, "--epochs", str(args.epochs),
               "--pretrain-epochs", str(args.pretrain_epochs), *[w for s in args.set for w in ("--set", s)]]
    return "\n".join([
        f"lxmert-demo model (d=64, 2 + 1 + 1 layers); pretraining {args.pretrain_epochs} epochs on the captions and "
        f"questions of the train split (lxmert-pretrain-demo), then VQA fine-tuning {args.epochs} epochs "
        "(vqa-lxmert-demo), or the same fine-tuning from scratch; test split, official VQA accuracy (%), mean ± 95% "
        "confidence half-width (t over the seeds).", "",
        "| model | start | seeds | overall | yes/no | number | other |", "|---|---|---|---|---|---|---|", *rows, "",
        *(["Does pretraining help (paired difference overall, its 95% interval against 0): " + " / ".join(verdicts),
            ""] if verdicts else []),
        "Per seed, overall (scratch -> pretrained): " + " / ".join(per_seed), "",
        "Pretraining's val accuracies (masked pieces; the same with another pair's image; matching; masked "
        "regions' objects and attributes; drawn answers; mean over seeds): " + " / ".join(pretext), "",
        "Command (after `.venv/bin/vlattn --threads 1 data synth --out data/synth`): "
        f"`.venv/bin/python {' '.join(command)}`",
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("data/synth"), help="the synthetic data root")
    parser.add_argument("--runs", type=Path, default=Path("runs/pretrain"), help="where runs and evaluations go")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--variants", nargs="+", default=["lxmert"], choices=list(VARIANTS))
    parser.add_argument("--epochs", type=int, default=16, help="fine-tuning epochs (both starts)")
    parser.add_argument("--pretrain-epochs", type=int, default=4)
    parser.add_argument("--set", action="append", default=[], help="an override of every run (repeatable)")
    parser.add_argument("--wrap", type=shlex.split, default=[], help="a prefix of every vlattn command")
    parser.add_argument("--jobs", type=int, default=1, help="(variant, seed) chains at once")
    parser.add_argument("--collect-only", action="store_true", help="write the table from the finished runs")
    parser.add_argument("--no-write", action="store_true", help="print only, leave RESULTS.md alone")
    args = parser.parse_args()
    if not args.collect_only:
        args.runs.mkdir(parents=True, exist_ok=True)
        with ThreadPoolExecutor(args.jobs) as pool:
            for done in [pool.submit(chain, key, seed, args) for seed in args.seeds for key in args.variants]:
                done.result()
    body = table(args)
    print(body)
    if not args.no_write:
        write_section("LXMERT pretraining on synthetic data", body)


if __name__ == "__main__":
    main()
