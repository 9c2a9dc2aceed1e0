"""Caption-metric speed: vlattn's CiderD and Bleu vs pycocoevalcap's Cider and Bleu at 5000 and 40000 images x 5
references, and the SCST reward (``CiderReward``, ``CiderDocumentFrequency.build``).

With ``--baseline REV`` the same calls also run on ``vlattn.metrics`` as it was at git revision REV (extracted with
``git archive`` into a temporary package), so before/after ratios come from one interleaved run. One thread;
interleaved rounds (pycocoevalcap, baseline, vlattn, ...), medians; every score must equal pycocoevalcap's to
1e-12. Captions: 8-14 words from a Zipfian 5000-word vocabulary (seeded). Writes "## CIDEr-D (metrics)".

    .venv/bin/python benchmarks/bench_cider.py [--repeats 5] [--large-repeats 3] [--baseline REV] [--no-write]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):  # one thread; the metrics are
    os.environ[_var] = "1"  # numpy only, so torch (seconds of start-up) is not imported

import argparse  # noqa: E402
import importlib  # noqa: E402
import io  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tarfile  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from types import ModuleType  # noqa: E402
from typing import Callable  # noqa: E402

import numpy as np  # noqa: E402
from results import paired_ratio, parse_args, publish, sized  # noqa: E402

import vlattn.metrics  # noqa: E402

HEADING = "CIDEr-D (metrics)"  # the section this script has always written; it now holds BLEU too


def captions(rng: random.Random, count: int, vocab: int = 5000) -> list[str]:
    """Caption-like strings: 8-14 words drawn from a Zipfian vocabulary (COCO's word frequencies are Zipfian)."""
    words = [f"w{i}" for i in range(vocab)]
    weights = [1.0 / (i + 1) for i in range(vocab)]
    return [" ".join(rng.choices(words, weights, k=rng.randint(8, 14))) for _ in range(count)]


def metrics_at(revision: str) -> ModuleType:
    """``vlattn.metrics`` as it was at git ``revision``, imported as ``vlattn_<revision>.metrics``."""
    name = "vlattn_" + re.sub(r"\W", "_", revision)
    archive = subprocess.run(["git", "archive", revision, "vlattn"], capture_output=True, check=True).stdout
    root = Path(tempfile.mkdtemp(prefix="bench_cider_"))
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(root, filter="data")
    (root / "vlattn").rename(root / name)
    for path in (root / name).rglob("*.py"):
        path.write_text(re.sub(r"\bvlattn\b(?=[. ])", name, path.read_text()))
    sys.path.insert(0, str(root))
    return importlib.import_module(f"{name}.metrics")


def seconds(fn: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def max_difference(ours: tuple, theirs: tuple) -> float:
    """Largest absolute difference of the corpus and per-image scores (BLEU: all orders)."""
    return max(float(np.max(np.abs(np.asarray(ours[0], float) - np.asarray(theirs[0], float)))),
               float(np.max(np.abs(np.asarray(ours[1], float) - np.asarray(theirs[1], float)))))


def bench_scores(images: int, repeats: int, implementations: dict[str, ModuleType]) -> list[dict]:
    """CIDEr-D and BLEU-4 of ``images`` x 5 references: per metric, seconds of each implementation per round."""
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.cider.cider import Cider

    rng = random.Random(0)
    gts = {i: captions(rng, 5) for i in range(images)}
    res = {i: captions(rng, 1) for i in range(images)}
    metrics = {
        "CIDEr-D": {"pycocoevalcap": lambda: Cider().compute_score(gts, res),
                    **{name: (lambda m=m: m.CiderD().compute_score(gts, res)) for name, m in implementations.items()}},
        "BLEU-1..4": {"pycocoevalcap": lambda: Bleu(4).compute_score(gts, res, verbose=0),
                      **{name: (lambda m=m: m.Bleu(4).compute_score(gts, res)) for name, m in implementations.items()}},
    }
    rows = []
    for metric, runs in metrics.items():
        times: dict[str, list[float]] = {name: [] for name in runs}
        differences: dict[str, float] = {}
        for _ in range(repeats):  # interleaved rounds
            outputs = {}
            for name, run in runs.items():
                elapsed, outputs[name] = seconds(run)
                times[name].append(elapsed)
            for name in implementations:
                differences[name] = max_difference(outputs[name], outputs["pycocoevalcap"])
                if differences[name] > 1e-12:
                    raise SystemExit(f"{metric} of {name} differs from pycocoevalcap by {differences[name]:.1e}")
        rows.append({"metric": metric, "images": images, "times": times, "differences": differences})
    return rows


def bench_reward(repeats: int, implementations: dict[str, ModuleType], train_images: int) -> dict[str, dict]:
    """Seconds per round of ``CiderDocumentFrequency.build`` (``train_images`` x 5) and of ``CiderReward`` on
    50 images x 5 samples x 5 references (token ids, include_eos), per implementation."""
    rng = random.Random(1)
    train = [captions(rng, 5) for _ in range(train_images)]
    words = ["<pad>", "<bos>", "<eos>", "<unk>", *(f"w{i}" for i in range(5000))]
    ids = np.array([[words.index(w) for w in c.split()] + [2] * (20 - len(c.split())) for c in captions(rng, 250)])
    tables = {name: m.CiderDocumentFrequency.build(train) for name, m in implementations.items()}
    rewards = {name: m.CiderReward(tables[name], include_eos=True, vocabulary=words) for name, m in implementations.items()}
    values = {name: reward(ids, train[:50]) for name, reward in rewards.items()}
    for name, value in values.items():
        np.testing.assert_allclose(value, values["vlattn"], rtol=1e-12, err_msg=f"reward of {name}")
    out: dict[str, dict] = {"build": {name: [] for name in implementations},
                            "reward": {name: [] for name in implementations}}
    for _ in range(repeats):
        for name, m in implementations.items():
            out["build"][name].append(seconds(lambda m=m: m.CiderDocumentFrequency.build(train))[0])
            out["reward"][name].append(statistics.median(seconds(lambda n=name: rewards[n](ids, train[:50]))[0]
                                                         for _ in range(10)))
    return out


def extra_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--large-repeats", type=int, default=3, help="interleaved rounds at 40000 images")
    parser.add_argument("--baseline", metavar="REV", help="also time vlattn.metrics at this git revision")


def main() -> None:
    args = parse_args(__doc__, repeats=5, extra=extra_options)
    implementations = {"vlattn": vlattn.metrics}
    if args.baseline:
        implementations = {f"`{args.baseline}`": metrics_at(args.baseline), **implementations}
    sizes = [(sized(args, 5000, 500), args.repeats)] + ([] if args.quick else [(40000, args.large_repeats)])
    rows = [row for images, repeats in sizes for row in bench_scores(images, repeats, implementations)]
    reward = bench_reward(args.repeats, implementations, sized(args, 20000, 2000))
    names = list(implementations)
    header = " | ".join(f"{name} (s)" for name in names)
    lines = [f"| metric | images x 5 refs | pycocoevalcap (s) | {header} | "
             + " | ".join(f"speed-up of {name}" for name in names)
             + (" | after / before |" if len(names) > 1 else " |"),
             "|" + "---|" * (3 + 2 * len(names) + (len(names) > 1))]
    for row in rows:
        times, theirs = row["times"], row["times"]["pycocoevalcap"]
        cells = [f"{statistics.median(times[name]):.3f}" for name in names]
        ups = [f"**{paired_ratio(theirs, times[name]):.1f}x**" for name in names]
        after = [f"{paired_ratio(times[names[0]], times[names[-1]]):.2f}x"] if len(names) > 1 else []
        lines.append(f"| {row['metric']} | {row['images']} | {statistics.median(theirs):.2f} | "
                     + " | ".join(cells + ups + after) + " |")
    largest = max(d for row in rows for d in row["differences"].values())
    reward_lines = [
        f"| {what} | " + " | ".join(f"{statistics.median(reward[key][name]) * 1e3:.1f}" for name in names)
        + (f" | {paired_ratio(reward[key][names[0]], reward[key][names[-1]]):.2f}x |" if len(names) > 1 else " |")
        for key, what in (("reward", "`CiderReward`, 50 images x 5 samples x 5 refs (ms)"),
                          ("build", f"`CiderDocumentFrequency.build`, {sized(args, 20000, 2000)} images x 5 refs (ms)"))
    ]
    rounds = ", ".join(f"{repeats} rounds at {images} images" for images, repeats in sizes)
    body = f"""One thread, interleaved rounds (pycocoevalcap, {", ".join(names)}), medians; {rounds};
{os.cpu_count()} CPUs, shared machine. Captions: 8-14 words from a
Zipfian 5000-word vocabulary (seeded). Speed-up = median over rounds of pycocoevalcap's time / ours; largest
difference from pycocoevalcap's scores (corpus and per image, every BLEU order): {largest:.1e}.

{chr(10).join(lines)}

| SCST reward | {" | ".join(names)} |{" after / before |" if len(names) > 1 else ""}
|---|{"---|" * (len(names) + (len(names) > 1))}
{chr(10).join(reward_lines)}"""
    publish(HEADING, body, args)


if __name__ == "__main__":
    main()
