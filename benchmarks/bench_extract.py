"""Feature extraction from image files: images/s and memory per batch of each extractor at 1 and 2 threads.

Writes 640 x 480 JPEG photos-like images (noise and coloured rectangles) and 80 x 80 PNGs of the synthetic set's
size into a temporary directory (deleted afterwards), and a randomly initialised synthetic-set CNN (512-d). Each
(extractor, threads) pair runs in its own process: the extractor is built with random weights (the speed of a
network does not depend on its values), one batch is run to warm up, then the peak resident memory is reset
(``/proc/self/clear_refs``) and ``--repeats`` timed passes over the images are made through ``extract_images``
(decoding included, memmap store written). Reported: images/s (median over passes) and the peak resident memory
above the process's memory before the timed passes (the loaded extractor), i.e. what one batch in flight costs.
Writes the section "## Feature extraction from images" of benchmarks/RESULTS.md.

    .venv/bin/python benchmarks/bench_extract.py [--repeats 2] [--no-write] [--quick]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

HEADING = "Feature extraction from images"
# extractor -> (settings, batch, images, kind of image)
CASES = {
    "grid": ({"arch": "resnet50", "size": 448, "grid": 7}, 4, 8, "photo"),
    "regions": ({"min_size": 600, "max_size": 1000}, 2, 4, "photo"),
    "synth": ({"grid": 6}, 32, 64, "synth"),
}


def write_images(folder: Path, kind: str, count: int) -> None:
    """``count`` images: 640 x 480 JPEGs (``photo``) or 80 x 80 PNGs (``synth``)."""
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True)
    for k in range(count):
        width, height = (640, 480) if kind == "photo" else (80, 80)
        image = Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))
        draw = ImageDraw.Draw(image)
        for _ in range(4):
            x, y = rng.integers(0, width // 2), rng.integers(0, height // 2)
            draw.rectangle((x, y, x + width // 4, y + height // 4), fill=tuple(int(v) for v in rng.integers(0, 256, 3)))
        image.save(folder / (f"img_{k}.jpg" if kind == "photo" else f"img_{k}.png"), quality=90)


def memory_mb(field: str) -> float:
    """``VmRSS`` or ``VmHWM`` of this process in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def child(name: str, threads: int, folder: Path, weights: str, repeats: int, work: Path) -> None:
    """Time one extractor in this process; print one JSON line."""
    import torch

    torch.set_num_threads(threads)
    from vlattn.pixels.extract import extract_images
    from vlattn.pixels.images import list_images, load_image
    from vlattn.pixels.registry import build_extractor
    from vlattn.pixels.weights import parse_weights

    settings, batch, _, _ = CASES[name]
    extractor = build_extractor(name, parse_weights(weights), settings, torch.device("cpu"))
    files = list_images([folder])
    extractor([load_image(path, max_side=extractor.max_side) for _, path in files[:batch]])  # warm-up
    before = memory_mb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # peak RSS := current RSS
    rates = []
    for k in range(repeats):
        start = time.perf_counter()
        extract_images(files, work / f"store{k}", extractor, batch=batch, workers=threads)
        rates.append(len(files) / (time.perf_counter() - start))
    print(json.dumps({"rate": statistics.median(rates), "rates": rates, "extra_mb": memory_mb("VmHWM") - before,
                      "model_mb": before, "dim": extractor.dim}))


def main() -> None:
    from results import parse_args, publish, sized

    args = parse_args(__doc__, repeats=2)
    repeats = sized(args, args.repeats, 1)
    rows, notes = [], []
    with tempfile.TemporaryDirectory(prefix="bench-extract-") as tmp:
        root = Path(tmp)
        from vlattn.data.synth.extractor import RegionCNN, save_extractor

        save_extractor(RegionCNN(512), root / "synth.safetensors", 80)
        for name, (settings, batch, count, kind) in CASES.items():
            count = sized(args, count, batch)
            folder = root / name
            write_images(folder, kind, count)
            weights = str(root / "synth.safetensors") if name == "synth" else "random"
            for threads in (1, 2):
                command = [sys.executable, __file__, "--child", name, str(threads), str(folder), weights,
                           str(repeats), str(root / f"{name}-{threads}")]
                (root / f"{name}-{threads}").mkdir()
                result = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
                rows.append(f"| {name} | {json.dumps(settings)} | {count} x {kind_size(kind)} | {batch} | {threads} | "
                            f"{result['rate']:.2f} | {result['extra_mb']:.0f} | {result['model_mb']:.0f} |")
                notes.append(f"{name} at {threads} thread(s): " + ", ".join(f"{r:.2f}" for r in result["rates"]))
    body = "\n".join([
        f"Random weights (speed does not depend on their values), CPU, torch {torch_version()}; images/s = median "
        f"of {repeats} passes of `extract_images` over the images (decoding with as many threads as torch's, "
        "memmap store written); memory = peak resident memory above the process before the passes (the loaded "
        "extractor), i.e. one batch in flight; 2 CPUs, shared machine.",
        "",
        "| extractor | settings | images | batch | threads | images/s | MB per batch | MB loaded |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "All passes (images/s): " + "; ".join(notes) + ".",
        "",
        "Load average at the end of the run (1/5/15 min): " + " / ".join(f"{v:.1f}" for v in os.getloadavg())
        + ". Above 2 the two cores were shared with other jobs, and 2 threads (plus 2 decoding threads) then compete "
        "with them and each other: compare threads only on an idle machine. The random detector scores every box "
        "about 1/91, under the 0.2 threshold, so `regions` keeps its 10 `min_boxes` per image.",
    ])
    publish(HEADING, body, args)


def kind_size(kind: str) -> str:
    return "640x480 JPEG" if kind == "photo" else "80x80 PNG"


def torch_version() -> str:
    import torch

    return torch.__version__


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        name, threads, folder, weights, repeats, work = sys.argv[2:8]
        child(name, int(threads), Path(folder), weights, int(repeats), Path(work))
    else:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        main()
