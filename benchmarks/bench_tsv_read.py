"""Bottom-up TSV reading: `vlattn data convert` throughput (TSV -> memmap), offset-index build, random access.

Generates a TSV of 1,000 images x 36 regions x 2048-d float32 (the trainval_36 layout, ~400 MB) in a
temporary directory (deleted afterwards, never committed), then, one thread, ``--repeats`` rounds of:
convert to a memmap store (one sequential pass, what the CLI does), build the offset index (one pass over the
file, cache disabled), and read 200 random images through the index. Writes the section
"## Bottom-up TSV conversion" of benchmarks/RESULTS.md.

    .venv/bin/python benchmarks/bench_tsv_convert.py [--repeats 3] [--no-write]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import base64  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from results import parse_args, publish, sized  # noqa: E402

from vlattn.data.features import TSVStore  # noqa: E402

HEADING = "Bottom-up TSV reading"
REGIONS, DIM = 36, 2048


def write_tsv(path: Path, images: int) -> None:
    """The bottom-up-attention layout: image_id, image_w, image_h, num_boxes, boxes, features (base64 float32)."""
    rng = np.random.default_rng(0)
    with open(path, "w") as handle:
        for image_id in range(images):
            features = np.maximum(rng.normal(size=(REGIONS, DIM)), 0).astype("<f4")  # ReLU-like, as detectors
            half = np.array([320.0, 240.0])  # boxes inside the 640 x 480 image: corner and size each up to half of it
            xy = rng.uniform(0, 1, size=(REGIONS, 2)) * half
            boxes = np.concatenate([xy, xy + rng.uniform(10 / 240, 1, size=(REGIONS, 2)) * half], axis=1).astype("<f4")
            fields = [str(image_id * 7 + 9), "640", "480", str(REGIONS),
                      base64.b64encode(boxes.tobytes()).decode(), base64.b64encode(features.tobytes()).decode()]
            handle.write("\t".join(fields) + "\n")


def timed(fn) -> tuple[float, object]:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def main() -> None:
    args = parse_args(__doc__, repeats=3)
    images = sized(args, 1000, 50)
    torch.set_num_threads(1)
    tmp = Path(tempfile.mkdtemp(prefix="vlattn-bench-tsv-"))
    os.environ["XDG_CACHE_HOME"] = str(tmp / "cache")
    try:
        tsv = tmp / "trainval_36.tsv"
        write_tsv(tsv, images)
        size_mb = tsv.stat().st_size / 2**20
        index_t, access_t = [], []
        for round_ in range(args.repeats):
            shutil.rmtree(tmp / "cache", ignore_errors=True)  # index from scratch each round
            store = TSVStore(tsv, dim=DIM)
            index_t.append(timed(store.ids)[0])
            ids = random.Random(round_).sample(store.ids(), min(200, images))
            access_t.append(timed(lambda store=store, ids=ids: [store.get(i) for i in ids])[0] / len(ids))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    index = statistics.median(index_t)
    body = (
        f"{images} images x {REGIONS} regions x {DIM}-d float32 in the bottom-up TSV layout ({size_mb:.0f} MB of "
        f"base64 text), generated in a temporary directory; 1 thread, {args.repeats} rounds, medians; "
        f"{os.cpu_count()} CPUs, shared machine.\n\n"
        "| step | median | throughput |\n|---|---|---|\n"
        f"| offset index, one pass (no cache) | {index:.2f} s | {size_mb / index:.0f} MB/s |\n"
        f"| random `get` through the index ({min(200, images)} ids) | {statistics.median(access_t) * 1e3:.1f} ms/image | "
        f"{1 / statistics.median(access_t):.0f} images/s |\n\n"
        f"All runs: index {', '.join(f'{t:.2f}' for t in index_t)} s; get "
        f"{', '.join(f'{t * 1e3:.1f}' for t in access_t)} ms/image."
    )
    publish(HEADING, body, args)


if __name__ == "__main__":
    main()
