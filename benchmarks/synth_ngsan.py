"""SAN, N-SAN, G-SAN, NG-SAN (and SAN + the absolute geometry of Table 4) on the synthetic data:
train each model with the same budget for several seeds, score the test split, measure how well each model
states spatial relations, and write the table to benchmarks/RESULTS.md ("## NG-SAN on synthetic data").

Every run is ``vlattn --threads 1 train`` with vlattn/presets/demo.yaml and the same overrides except the encoder
self-attention (and, for "absolute", ``model.box_encoding``), then ``vlattn --threads 1 eval --split test
--beam-size auto|K --json`` (``--beam-size``, default auto: the beam size chosen on validation; the table gives each
run's). Runs whose evaluation at that decoding exists are reused, a trained run is only evaluated again, so an
interrupted driver continues where it stopped.

Relation accuracy, two ways (vlattn.data.synth.claims):

- probe: for every ordered pair of test objects with a unique full description, the model's likelihood of
  "<a> is <relation words> <b>" (teacher forcing, EOS included, summed over each relation's synonyms) picks one
  of the five relations; accuracy = share of pairs whose picked relation holds (chance = the mean share of
  relations that hold for a pair); the same on as many training images;
- captions: the share of relation statements in the generated test captions (decoded as evaluated) that
  are true of the scene, and how many were made.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from beam_option import add_beam_option, beam_of, chosen, decoded_as, decoding_text
from results import write_section

from vlattn.data.captioning import collate_eval
from vlattn.data.synth.claims import RelationProbe, relation_probes, relation_verdicts
from vlattn.text import tokenize
from vlattn.data.vocab import Vocabulary
from vlattn.tasks.captioning import build_model, load_caption_data
from vlattn.training.checkpoint import load_checkpoint, load_weights

CONFIG = "demo"
COMMON = ["model.box_input=false"]  # the papers' setting: detector features only; geometry only through GSA
MODELS: dict[str, list[str]] = {
    "SAN": ["model.encoder_self_attention.name=mha"],
    "N-SAN": ["model.encoder_self_attention.name=nsa"],
    "G-SAN": ["model.encoder_self_attention.name=gsa"],
    "NG-SAN": ["model.encoder_self_attention.name=ngsa"],
    "SAN + absolute": ["model.encoder_self_attention.name=mha", "model.box_encoding=sinusoidal"],
    "G-SAN signed": ["model.encoder_self_attention.name=gsa", "model.encoder_self_attention.options.geometry=signed"],
}
METRICS = ("Bleu_4", "METEOR", "ROUGE_L", "CIDEr")
VLATTN = str(Path(sys.executable).with_name("vlattn"))


def sets(items: list[str]) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


def train_and_eval(run: Path, overrides: list[str], beam: str | int, log: list[str],
                   finished_only: bool = False) -> dict | None:
    """Train (unless trained already) and evaluate one run at ``beam`` (unless evaluated so already); the commands
    are appended to ``log``. With ``finished_only``, None for a run not evaluated at ``beam`` yet (nothing is run)."""
    train = [VLATTN, "--threads", "1", "train", "--config", CONFIG, "--out", str(run), *sets(overrides)]
    evaluate = [VLATTN, "--threads", "1", "eval", "--checkpoint", str(run), "--split", "test", "--beam-size", str(beam),
                "--json"]
    report_path = Path(f"{run}.eval.json")
    done = report_path.is_file() and decoded_as(json.loads(report_path.read_text()), beam)
    if finished_only and not done:
        return None
    log += [" ".join(["vlattn", *train[1:]]), " ".join(["vlattn", *evaluate[1:]]) + f" > {run}.eval.json"]
    if not done:
        started = time.perf_counter()
        if not (run / "checkpoints" / "best").is_dir() or not (run / "checkpoints" / "last").is_dir():
            subprocess.run([*train, *(["--resume"] if (run / "checkpoints" / "last").is_dir() else [])], check=True)
        report = subprocess.run(evaluate, check=True, capture_output=True, text=True).stdout
        tmp = report_path.with_suffix(".tmp")
        tmp.write_text(report)
        tmp.replace(report_path)
        print(f"{run.name}: {time.perf_counter() - started:.0f}s", flush=True)
    report = json.loads(report_path.read_text())
    print(f"{run.name}: {chosen(report)}", flush=True)
    return report


def sentence_log_probs(model: torch.nn.Module, inputs: dict, sentences: list[list[int]], bos: int, eos: int, pad: int) -> torch.Tensor:
    """log P(sentence | image) (S,) under teacher forcing, EOS included, for one image's ``inputs``."""
    width = max(len(s) for s in sentences) + 2
    tokens = torch.full((len(sentences), width), pad, dtype=torch.long)
    for row, ids in enumerate(sentences):
        tokens[row, : len(ids) + 2] = torch.tensor([bos, *ids, eos])
    image = {key: inputs[key].expand(len(sentences), *inputs[key].shape[1:]) for key in ("features", "boxes", "region_mask")}
    log_probs = model(image, tokens[:, :-1]).log_softmax(-1)  # (S, T, V)
    targets = tokens[:, 1:]
    picked = log_probs.gather(-1, targets[..., None]).squeeze(-1)  # (S, T)
    return (picked * (targets != pad)).sum(-1)


def probe_choices(model, inputs: dict, probes: list[RelationProbe], vocab) -> list[str]:
    """For each probe of one image, the relation whose sentences (synonyms summed) the model finds most likely;
    all sentences of the image are scored in one batch."""
    flat = [vocab.encode(words) for probe in probes for synonyms in probe.sentences.values() for words in synonyms]
    if any(vocab.UNK in ids for ids in flat):
        raise ValueError("probe words outside the vocabulary")
    scores = sentence_log_probs(model, inputs, flat, vocab.BOS, vocab.EOS, vocab.PAD) if flat else torch.zeros(0)
    choices, start = [], 0
    for probe in probes:
        per_relation = []
        for synonyms in probe.sentences.values():
            per_relation.append(scores[start : start + len(synonyms)].logsumexp(0))
            start += len(synonyms)
        choices.append(list(probe.sentences)[int(torch.stack(per_relation).argmax())])
    return choices


def probe_accuracy(model: torch.nn.Module, dataset, scenes: dict[int, dict], next_to_gap: float, vocab) -> tuple[float, float, int]:
    """(accuracy, chance, number of probes) of the relation probes of every image of ``dataset``."""
    correct = chance = total = 0
    with torch.no_grad():
        for index in range(len(dataset)):
            item = dataset[index]
            probes = relation_probes(scenes[item["image_id"]], next_to_gap)
            for probe, choice in zip(probes, probe_choices(model, collate_eval([item]), probes, vocab), strict=True):
                correct += choice in probe.holds
                chance += len(probe.holds) / len(probe.sentences)
                total += 1
    return correct / total, chance / total, total


def relation_scores(run: Path, scenes: dict[int, dict], next_to_gap: float) -> dict[str, float]:
    """Probe accuracy and chance level on the test images and on as many training images, and the truth of
    relation statements in the generated test captions."""
    checkpoint = load_checkpoint(run)
    vocab = checkpoint.vocabulary("words", Vocabulary.load)
    data = load_caption_data(checkpoint.config.data, vocab)
    model = load_weights(build_model(checkpoint.config, vocab, data.store.dim), checkpoint).eval()
    test = data.eval_set("test")
    probe, chance, pairs = probe_accuracy(model, test, scenes, next_to_gap, vocab)
    train_probe, _, _ = probe_accuracy(model, data.eval_set("train", limit=len(test)), scenes, next_to_gap, vocab)
    predictions = json.loads((run / "eval" / "test_predictions.json").read_text())
    verdicts = [v for row in predictions for v in relation_verdicts(tokenize(row["caption"]), scenes[row["image_id"]], next_to_gap)]
    return {
        "probe": probe, "chance": chance, "pairs": pairs, "train_probe": train_probe,
        "stated": len(verdicts), "true": sum(verdicts) / len(verdicts) if verdicts else float("nan"),
    }


def without_note(argv: list[str]) -> list[str]:
    """The command line without ``--note TEXT`` (the note is printed under the tables)."""
    kept, skip = [], False
    for arg in argv:
        if skip or arg == "--note":
            skip = arg == "--note"
            continue
        kept.append(arg)
    return kept


def stated_true(results: list[dict]) -> str:
    """Mean ± std of the share of true stated relations over the seeds whose captions state any."""
    shares = [r["true"] for r in results if r["stated"]]
    return mean_std(shares) if shares else "none stated"


def mean_std(values: list[float], digits: int = 3) -> str:
    """Mean ± sample standard deviation; the value alone when there is one."""
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("data/ngsan"), help="a `vlattn data synth` output")
    parser.add_argument("--runs", type=Path, default=Path("runs/ngsan"), help="where the runs are kept")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    add_beam_option(parser)
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="extra overrides for every run")
    parser.add_argument("--note", default="", help="a remark on the results, printed under the tables")
    parser.add_argument("--no-write", action="store_true", help="print only, leave RESULTS.md alone")
    parser.add_argument("--finished-only", action="store_true",
                        help="run nothing: tabulate the runs evaluated at --beam-size so far (the table gives each model's seeds)")
    args = parser.parse_args()
    scenes_json = json.loads((args.data / "scenes.json").read_text())
    scenes = {image["image_id"]: image for image in scenes_json["images"]}
    next_to_gap = float(scenes_json["info"]["next_to_gap"])
    commands: list[str] = []
    runs = {(model, seed): args.runs / f"{model.lower().replace(' + ', '+').replace(' ', '-')}-s{seed}" for model in args.models for seed in args.seeds}
    reports = {}
    for seed in args.seeds:  # every model of a seed before the next seed: comparable partial results early
        for model in args.models:
            overrides = [f"data.root={args.data}", f"train.seed={seed}", *COMMON, *MODELS[model], *args.overrides]
            report = train_and_eval(runs[model, seed], overrides, args.beam_size, commands, args.finished_only)
            if report is not None:
                reports[model, seed] = report
    rows, per_seed = [], []
    for model in args.models:
        done = [seed for seed in args.seeds if (model, seed) in reports]
        if not done:
            continue
        results = {
            seed: {**{m: reports[model, seed]["scores"][m] for m in METRICS}, "beam": beam_of(reports[model, seed]),
                   **relation_scores(runs[model, seed], scenes, next_to_gap)}
            for seed in done
        }
        columns = [", ".join(map(str, done)), ", ".join(r["beam"] for r in results.values())]
        results_list = list(results.values())
        columns += [mean_std([r[m] for r in results_list]) for m in METRICS]
        columns += [mean_std([r["probe"] for r in results_list]), f"{statistics.mean(r['chance'] for r in results_list):.3f}",
                    mean_std([r["train_probe"] for r in results_list]),
                    stated_true(results_list), f"{statistics.mean(r['stated'] for r in results_list):.1f}"]
        rows.append(f"| {model} | " + " | ".join(columns) + " |")
        cells = [f"{results[s]['CIDEr']:.3f} / {results[s]['probe']:.3f}" if s in results else "not finished" for s in args.seeds]
        per_seed.append(f"| {model} | " + " | ".join(cells) + " |")
    if not rows:
        raise SystemExit(f"no evaluated runs under {args.runs}")
    pairs = next(iter(results.values()))["pairs"]
    chance = statistics.mean(r["chance"] for r in results.values())
    per_seed_table = f"""Per seed (test CIDEr-D / relation probe accuracy):

| model | {' | '.join(f'seed {s}' for s in args.seeds)} |
|---|{'---|' * len(args.seeds)}
{chr(10).join(per_seed)}"""
    body = f"""The demo preset (vlattn/presets/demo.yaml: Transformer 2+2, d=128) with `{' '.join(COMMON + args.overrides)}` (geometry
only through the encoder self-attention, as in the paper), its encoder self-attention mha (SAN), nsa (N-SAN), gsa
(G-SAN) or ngsa (NG-SAN); synthetic data (`vlattn data synth` defaults: 1600/200/200 images), best-by-val
checkpoint, test split, {decoding_text(args.beam_size)}; seeds {', '.join(map(str, args.seeds))},
mean ± sd. Relation probe (defined in the driver): the share of {pairs} object pairs whose most likely relation
holds (chance {chance:.3f}).

| model | seeds | beam | BLEU-4 | METEOR | ROUGE-L | CIDEr-D | relation probe acc. (test) | chance | probe acc. (train) | stated relations true | stated per run |
|---|---|---|---|---|---|---|---|---|---|---|---|
{chr(10).join(rows)}
{chr(10) + args.note + chr(10) if args.note else ''}
Commands (the driver prints every run's `vlattn` commands):

```
.venv/bin/vlattn --threads 1 data synth --out {args.data}
.venv/bin/python {' '.join(without_note(sys.argv))}
```"""
    print("\n".join(commands), per_seed_table, "", sep="\n")
    print(body)
    if not args.no_write:
        write_section("NG-SAN on synthetic data", body)


if __name__ == "__main__":
    main()
