"""CIDEr-D speed: vlattn.metrics.CiderD vs pycocoevalcap's Cider on 5000 images x 5 references, and the
SCST reward on 50 images x 5 samples x 5 references.

One thread, interleaved runs (A B A B ...), medians; the values must agree to 1e-6. Writes the section
"## CIDEr-D (metrics)" of benchmarks/RESULTS.md (other sections are left as they are).

    .venv/bin/python benchmarks/bench_cider.py [--repeats 5] [--no-write]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import random  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from typing import Callable  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from results import paired_ratio, parse_args, publish  # noqa: E402

from vlattn.metrics import CiderD, CiderDocumentFrequency, CiderReward  # noqa: E402

HEADING = "CIDEr-D (metrics)"


def captions(rng: random.Random, count: int, vocab: int = 5000) -> list[str]:
    """Caption-like strings: 8-14 words drawn from a Zipfian vocabulary (COCO's word frequencies are Zipfian)."""
    words = [f"w{i}" for i in range(vocab)]
    weights = [1.0 / (i + 1) for i in range(vocab)]
    return [" ".join(rng.choices(words, weights, k=rng.randint(8, 14))) for _ in range(count)]


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def bench_eval(repeats: int) -> dict[str, float]:
    from pycocoevalcap.cider.cider import Cider

    rng = random.Random(0)
    gts = {i: captions(rng, 5) for i in range(5000)}
    res = {i: captions(rng, 1) for i in range(5000)}
    ours_t, theirs_t = [], []
    for _ in range(repeats):  # interleaved: A B A B ...
        t, theirs = timed(lambda: Cider().compute_score(gts, res))
        theirs_t.append(t)
        t, ours = timed(lambda: CiderD().compute_score(gts, res))
        ours_t.append(t)
        diff = float(np.max(np.abs(np.asarray(ours[1]) - np.asarray(theirs[1]))))
        if diff > 1e-6 or abs(float(ours[0]) - float(theirs[0])) > 1e-6:
            raise SystemExit(f"values differ: max per-image difference {diff}")
    return {"pycocoevalcap": statistics.median(theirs_t), "vlattn": statistics.median(ours_t),
            "paired": paired_ratio(theirs_t, ours_t), "max_diff": diff, "score": float(ours[0])}


def bench_reward(repeats: int) -> dict[str, float]:
    rng = random.Random(1)
    train = [captions(rng, 5) for _ in range(20000)]
    build_t, table = timed(lambda: CiderDocumentFrequency.build(train, mode="image"))
    reward = CiderReward(table, include_eos=True)
    samples, refs = captions(rng, 250), train[:50]
    times = [timed(lambda: reward(samples, refs))[0] for _ in range(max(repeats, 20))]
    return {"build": build_t, "reward": statistics.median(times)}


def main() -> None:
    args = parse_args(__doc__, repeats=5)
    torch.set_num_threads(1)
    ev, rw = bench_eval(args.repeats), bench_reward(args.repeats)
    body = (
        f"1 thread, {args.repeats} interleaved A B runs, medians; {os.cpu_count()} CPUs, shared machine. Captions:\n"
        "8-14 words from a Zipfian 5000-word vocabulary (seeded).\n\n"
        "| what | median time | note |\n|---|---|---|\n"
        f"| pycocoevalcap `Cider().compute_score`, 5000 images x 5 refs | {ev['pycocoevalcap'] * 1e3:.0f} ms | |\n"
        f"| vlattn `CiderD().compute_score`, same input | {ev['vlattn'] * 1e3:.0f} ms | "
        f"max per-image difference {ev['max_diff']:.1e}; CIDEr-D {ev['score']:.6f} |\n"
        f"| `CiderReward`, 50 images x 5 samples x 5 refs (include_eos) | {rw['reward'] * 1e3:.1f} ms | "
        "target: well under 50 ms |\n"
        f"| `CiderDocumentFrequency.build`, 20000 images x 5 refs (mode=image) | {rw['build']:.2f} s | "
        "once, then cached on disk |\n\n"
        f"Speed-up of `CiderD` over pycocoevalcap: **{ev['pycocoevalcap'] / ev['vlattn']:.1f}x** from the medians, "
        f"{ev['paired']:.1f}x median of the per-round ratios (target >= 20x)."
    )
    publish(HEADING, body, args)


if __name__ == "__main__":
    main()
