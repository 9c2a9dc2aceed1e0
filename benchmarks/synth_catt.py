"""The CATT bias benchmark (CATT paper Table 2 and Table 6) on the confounded synthetic set: train each
variant with several seeds on a split whose training data binds red to circles and stars to circles (p = 0.9, test
independent) while half of all objects are drawn in shadow (colour not visible) and half the stars go undetected
(`vlattn data synth ... --ambiguous 0.5 --missed 0.5`, docs/catt.md says why), score the test split with CIDEr-D
and the bias metrics (CHAIR_s, CHAIR_i, A@Attr; vlattn.metrics.bias), and write the means and
spreads to benchmarks/RESULTS.md ("CATT bias benchmark on confounded synthetic data": the setup, the mean ± sd
table, the paired differences, ``--note`` and the commands that reproduce it; the per-seed values are printed only).
Variants (:data:`VARIANTS`): Transformer vs Transformer+CATT (vlattn/presets/demo.yaml, vlattn/presets/catt-demo.yaml), Up-Down vs
Up-Down+CATT (BUTD+CATT, supplementary Sec. 9: vlattn/presets/updown-demo.yaml, vlattn/presets/updown-catt-demo.yaml), and Table
6's ablations of Transformer+CATT (w/o Init, w/o Share, dictionary sizes). The main variants (:data:`MAIN`) run
first, all their seeds, then the ablations.

Test decoding: ``--beam-size auto`` (default; each run's beam size chosen on validation CIDEr-D, the table's "beam"
column) or a fixed ``K``. Runs are resumable: a (variant, seed) whose ``<run>.eval.json`` was decoded that way is
skipped, one decoded otherwise is only evaluated again, an unfinished run resumes from its last checkpoint. ``--collect-only`` only writes the table from what exists. Every run is `vlattn --threads 1 ...`;
``--wrap`` prefixes each training and evaluation command (e.g. a job-queue wrapper) and
``--jobs`` runs that many at once.

Extra columns (:func:`measures`), on the colour words said of a shape in a test image whose objects of that shape
are all drawn in shadow (``amb.``) or all clear: ``A@Attr amb. circle`` / ``amb. other`` / ``clear`` (their
accuracy), ``red: amb. circle`` and ``red: amb. other`` (the share saying "red"; the test images' rate is ~1/8, the
training circles' 0.9), ``amb. circle words`` (how many words the two circle columns rest on); and ``star: circle``
/ ``star: no circle``: the share of captions naming a star in test images without a star that hold a circle / that
hold none (the co-occurrence's hallucination, and its control).
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from textwrap import fill

from beam_option import add_beam_option, beam_of, chosen, decoded_as, decoding_text
from results import RESULTS, write_section

from vlattn.data.bias import synthetic_lexicon
from vlattn.metrics.bias import GENERIC, read_caption

DICTIONARY = "model.options.{}_dictionary.{}={}"
BOTH = ("image", "word")
VARIANTS: dict[str, tuple[str, str, list[str]]] = {  # key -> (row name, config, overrides)
    # the demo preset without its speed options (length buckets, uniform dropout masks): catt-demo's training
    "base": ("Transformer", "demo", ["train.length_buckets=0", "model.dropout_mask=bernoulli"]),
    "catt": ("Transformer+CATT (D#500)", "catt-demo", []),
    "wo_init": ("CATT w/o Init (random U(0, 0.01))", "catt-demo",
                [DICTIONARY.format(d, "init", "random") for d in BOTH]),
    "wo_share": ("CATT w/o Share", "catt-demo", ["model.options.share=false"]),
    "d100": ("CATT D#100", "catt-demo",
             [DICTIONARY.format(d, "size", 100) for d in BOTH]),
    "d200": ("CATT D#200", "catt-demo",
             [DICTIONARY.format(d, "size", 200) for d in BOTH]),
    "d1000": ("CATT D#1000", "catt-demo",
              [DICTIONARY.format(d, "size", 1000) for d in BOTH]),
    "updown": ("Up-Down", "updown-demo", []),
    "updown_catt": ("Up-Down+CATT (D#100)", "updown-catt-demo", []),
}
MAIN = ("base", "catt", "updown", "updown_catt")  # Table 2's rows: run first
CONFOUNDED = "circle"  # the shape whose colour (red) and company (star) the training data bind
HALLUCINATED = "star"
COLUMNS = ("CIDEr", "CHAIR_s", "CHAIR_i", "A@Attr", "A@Attr amb. circle", "A@Attr amb. other", "A@Attr clear",
           "red: amb. circle", "red: amb. other", "star: circle", "star: no circle", "amb. circle words")
LOWER_IS_BETTER = {"CHAIR_s", "CHAIR_i", "red: amb. circle", "star: circle", "star: no circle"}
NEUTRAL = {"red: amb. other", "amb. circle words"}  # a control rate and a count: no better/worse direction
COUNTS = {"amb. circle words"}
# variant -> what its paired difference is taken against (Table 2: the baseline; Table 6: Transformer+CATT)
REFERENCE = {"catt": "base", "updown_catt": "updown", "wo_init": "catt", "wo_share": "catt", "d100": "catt",
             "d200": "catt", "d1000": "catt"}
PAIRED_COLUMNS = ("CIDEr", "CHAIR_s", "CHAIR_i", "A@Attr", "A@Attr amb. circle", "red: amb. circle", "star: circle")
VAL_IMAGES = 100  # default --val-images


def vlattn(*args: str) -> list[str]:
    return [str(Path(sys.executable).with_name("vlattn")), "--threads", "1", *args]


def run_one(key: str, seed: int, args: argparse.Namespace) -> None:
    """Train (fresh or resumed) and evaluate one (variant, seed) at ``--beam-size`` unless its evaluation at that
    decoding exists; a run evaluated at another decoding is only evaluated again."""
    _, config, overrides = VARIANTS[key]
    run = args.runs / f"{key}-s{seed}"
    report = run.with_suffix(".eval.json")
    trained = report.exists()
    if trained and decoded_as(json.loads(report.read_text()), args.beam_size):
        return
    sets = [f"data.root={args.data}", f"train.seed={seed}", f"train.epochs={args.epochs}",
            f"train.val_max_images={args.val_images}", *args.set, *overrides]
    train = vlattn("train", "--config", config, "--out", str(run), *[x for s in sets for x in ("--set", s)])
    if (run / "checkpoints" / "last").exists():
        train.append("--resume")
    if not trained:
        print(" ".join(train), flush=True)
    if args.dry_run:
        return
    if not trained:
        subprocess.run([*args.wrap, *train], check=True, stdout=subprocess.DEVNULL)
    evaluation = subprocess.run([*args.wrap, *vlattn("eval", "--checkpoint", str(run), "--split", "test",
                                                     "--beam-size", str(args.beam_size), "--json")],
                                check=True, capture_output=True, text=True)
    tmp = report.with_suffix(".tmp")
    tmp.write_text(evaluation.stdout)
    tmp.replace(report)
    print(f"{run.name}: {chosen(json.loads(evaluation.stdout))}", flush=True)


def schedule(variants: list[str], seeds: list[int]) -> list[tuple[str, int]]:
    """The (variant, seed) runs in order: every seed of the :data:`MAIN` variants, then every seed of the rest."""
    main = [k for k in variants if k in MAIN]
    rest = [k for k in variants if k not in MAIN]
    return [(k, s) for group in (main, rest) for s in seeds for k in group]


def rate(hits: list[bool]) -> float:
    return sum(hits) / len(hits) if hits else float("nan")


def measures(run: Path, report: dict, scenes: dict[int, dict]) -> dict[str, float]:
    """The table's columns for one evaluated run; ``scenes`` are ``scenes.json``'s images by id."""
    values = {name: report["scores"][name] for name in COLUMNS[:4]}
    predictions = json.loads((run / "eval" / "test_predictions.json").read_text())
    lexicon = synthetic_lexicon()
    words: dict[str, list[tuple[str, bool]]] = {"amb. circle": [], "amb. other": [], "clear": []}
    star: dict[str, list[bool]] = {"star: circle": [], "star: no circle": []}
    for row in predictions:
        objects = scenes[int(row["image_id"])]["objects"]
        shapes = {o["shape"] for o in objects}
        mentions = read_caption(row["caption"], lexicon)
        if HALLUCINATED not in shapes:
            star["star: circle" if CONFOUNDED in shapes else "star: no circle"].append(HALLUCINATED in mentions.objects)
        for colour, shape in mentions.attributes:
            described = [o for o in objects if o["shape"] == shape]
            shadowed = {bool(o.get("ambiguous")) for o in described}
            if shape == GENERIC or len(shadowed) != 1:  # a generic noun, an absent shape, or mixed evidence
                continue
            group = "clear" if shadowed == {False} else "amb. circle" if shape == CONFOUNDED else "amb. other"
            words[group].append((colour, any(o["colour"] == colour for o in described)))
    for group, said in words.items():
        values[f"A@Attr {group}"] = rate([ok for _, ok in said])
    for group in ("amb. circle", "amb. other"):
        values[f"red: {group}"] = rate([colour == "red" for colour, _ in words[group]])
    values.update({name: rate(hits) for name, hits in star.items()})
    values["amb. circle words"] = len(words["amb. circle"])
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


def paired(results: dict[str, dict[int, dict[str, float]]]) -> list[str]:
    """Rows of per-seed differences (variant − its reference of :data:`REFERENCE`, the same seed), mean ± sample
    standard deviation over the seeds both have, for the columns of :data:`PAIRED_COLUMNS`."""
    rows = []
    for key, reference in REFERENCE.items():
        seeds = sorted(set(results.get(key, {})) & set(results.get(reference, {})))
        if not seeds:
            continue
        cells = [fmt([results[key][s][c] - results[reference][s][c] for s in seeds]) for c in PAIRED_COLUMNS]
        rows.append(f"| {VARIANTS[key][0]} − {VARIANTS[reference][0]} | {len(seeds)} | " + " | ".join(cells) + " |")
    return rows


def data_command(root: Path) -> str:
    """The `vlattn data synth` call that made the data set at ``root`` (from its scenes.json and confound.json)."""
    info = json.loads((root / "scenes.json").read_text())["info"]
    splits = json.loads((root / "dataset.json").read_text())["images"]
    confound = json.loads((root / "confound.json").read_text())
    words = [".venv/bin/vlattn --threads 1 data synth --out", str(root), "--images", str(info["images"]),
             "--seed", str(info["seed"])]
    for split in ("val", "test"):
        words += [f"--{split}", str(sum(i["split"] == split for i in splits))]
    for pair in confound["pairs"]:
        words += ["--confound", f"{pair['attribute']}:{pair['shape']}"]
    words += ["--confound-p", str(confound["p"])] if confound["pairs"] else []
    for pair in confound.get("cooccur", []):
        words += ["--cooccur", f"{pair['shape']}:{pair['with']}"]
    words += ["--cooccur-p", str(confound["cooccur_p"])] if confound.get("cooccur") else []
    for option, key in (("--ambiguous", "ambiguous"), ("--ambiguous-contrast", "ambiguous_contrast"),
                        ("--missed", "missed")):
        words += [option, str(confound[key])] if confound.get(key) else []
    return " ".join(words)


def driver_commands(evaluated: dict[str, list[int]], args: argparse.Namespace) -> list[str]:
    """The driver calls that reproduce the table: one per set of seeds, naming the variants evaluated with exactly
    those seeds (``evaluated``: variant -> seeds, in row order)."""
    groups: dict[tuple[int, ...], list[str]] = {}
    for key, seeds in evaluated.items():
        groups.setdefault(tuple(seeds), []).append(key)
    return [" ".join([".venv/bin/python", "benchmarks/synth_catt.py", "--data", str(args.data), "--runs", str(args.runs),
                      "--epochs", str(args.epochs), "--seeds", *map(str, seeds), "--variants", *keys,
                      *([] if args.val_images == VAL_IMAGES else ["--val-images", str(args.val_images)]),
                      *([] if args.beam_size == "auto" else ["--beam-size", str(args.beam_size)]),
                      *[x for s in args.set for x in ("--set", s)]]) for seeds, keys in groups.items()]


def setup(args: argparse.Namespace) -> str:
    """The section's first paragraph: what the runs are (the data set's split sizes, the options)."""
    splits = [i["split"] for i in json.loads((args.data / "dataset.json").read_text())["images"]]
    sizes = " / ".join(str(splits.count(split)) for split in ("train", "val", "test"))
    return (f"CATT paper Tables 2 and 6 on the data set of the first command below (training binds red and stars to "
            f"circles, test independent; objects in shadow, stars missed: docs/catt.md): {sizes} images, "
            f"{args.epochs} XE epochs, checkpoint best on {args.val_images} val images, test at "
            f"{decoding_text(args.beam_size)}. Transformer (demo preset trained as catt-demo: no length buckets, "
            "Bernoulli masks) vs Transformer+CATT (catt-demo: 500 + 500 k-means entries, shared, concat); Up-Down vs "
            "Up-Down+CATT (100 entries); Table 6's rows change one thing each (columns: benchmarks/synth_catt.py). "
            "Mean ± sample sd over the seeds run.")


def paragraph(text: str) -> str:
    """``text`` wrapped at 120 columns, never inside a hyphenated name such as Up-Down."""
    return fill(text, 120, break_on_hyphens=False)


def table(args: argparse.Namespace) -> tuple[str, str]:
    """The results section (the setup, means ± sample standard deviations over the evaluated seeds, the paired
    differences, ``--note``, the commands) and the per-seed table."""
    scenes = {int(i["image_id"]): i for i in json.loads((args.data / "scenes.json").read_text())["images"]}
    rows, per_seed, evaluated, results = [], [], {}, {}
    for key in args.variants:
        name, config, overrides = VARIANTS[key]
        paths = {s: args.runs / f"{key}-s{s}.eval.json" for s in args.seeds}
        reports = {s: json.loads(path.read_text()) for s, path in paths.items() if path.exists()}
        seeds = [s for s in args.seeds if s in reports and decoded_as(reports[s], args.beam_size)]
        if not seeds:
            continue
        evaluated[key] = seeds
        runs = {s: measures(args.runs / f"{key}-s{s}", reports[s], scenes) for s in seeds}
        results[key] = runs
        beams = ", ".join(beam_of(reports[s]) for s in seeds)
        rows.append(f"| {name} | {len(seeds)} | {beams} | " + " | ".join(
            fmt([runs[s][c] for s in seeds], 1 if c in COUNTS else 3) for c in COLUMNS) + " |")
        per_seed += [f"| {name} | {s} | {beam_of(reports[s])} | " + " | ".join(
            f"{runs[s][c]:{'.0f' if c in COUNTS else '.3f'}}" for c in COLUMNS) + " |" for s in seeds]
    arrows = {c: "" if c in NEUTRAL else " ↓" if c in LOWER_IS_BETTER else " ↑" for c in COLUMNS}
    header = "| model | seeds | beam | " + " | ".join(f"{c}{arrows[c]}" for c in COLUMNS) + " |"
    rule = "|---|---|---|" + "---|" * len(COLUMNS)
    commands = [data_command(args.data), *driver_commands(evaluated, args)]
    differences = paired(results)
    paired_header = "| difference | seeds | " + " | ".join(PAIRED_COLUMNS) + " |"
    section = "\n".join([
        paragraph(setup(args)), "", header, rule, *rows, "",
        *(["Paired differences (same seed; mean ± sample sd of the per-seed differences):", "",
           paired_header, "|---|---|" + "---|" * len(PAIRED_COLUMNS), *differences, ""] if differences else []),
        *([paragraph(args.note), ""] if args.note else []), "Commands:", "", "```", *commands, "```",
    ])
    return section, "\n".join(["Per seed:", "", header.replace("| seeds | beam |", "| seed | beam |"), rule, *per_seed])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="the confounded synthetic data root")
    parser.add_argument("--runs", type=Path, required=True, help="where the runs and their evaluations go")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--epochs", type=int, default=6, help="XE epochs of every run (one budget for all)")
    parser.add_argument("--val-images", type=int, default=VAL_IMAGES, help="val images decoded per epoch (selection)")
    add_beam_option(parser)
    parser.add_argument("--set", action="append", default=[], help="a config override for every run (repeatable)")
    parser.add_argument("--wrap", type=shlex.split, default=[], help="a prefix of every training/eval command, "
                        "e.g. a job-queue wrapper")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (each through --wrap)")
    parser.add_argument("--note", default="", help="a remark on the results, written under the tables")
    parser.add_argument("--collect-only", action="store_true", help="write the table from the finished runs")
    parser.add_argument("--dry-run", action="store_true", help="print the training commands in order, run nothing")
    parser.add_argument("--no-write", action="store_true", help="print only, leave RESULTS.md alone")
    parser.add_argument("--results", type=Path, default=RESULTS, help="the results file the section is written to")
    args = parser.parse_args()
    if not args.collect_only:
        with ThreadPoolExecutor(args.jobs) as pool:
            for done in [pool.submit(run_one, key, seed, args) for key, seed in schedule(args.variants, args.seeds)]:
                done.result()
    if args.dry_run:
        return
    body, per_seed = table(args)
    print(per_seed, "", body, sep="\n")
    if not args.no_write:
        write_section("CATT bias benchmark on confounded synthetic data", body, args.results)


if __name__ == "__main__":
    main()
