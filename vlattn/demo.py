"""``make demo``: synthetic data -> XE training -> beam-search evaluation, with a constant-caption floor.

Usage: ``python -m vlattn.demo [--data data/synth] [--out runs/demo] [--config configs/demo.yaml]``.
Re-running continues (or just re-evaluates) the existing run instead of starting over.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from vlattn.commands import format_report, run_eval
from vlattn.config import load_config
from vlattn.data.karpathy import load_karpathy
from vlattn.errors import VlattnError
from vlattn.metrics import best_constant_caption
from vlattn.stages import train_scst, train_xe

REPO = Path(__file__).resolve().parent.parent
FLOOR_RATIO = 3.0


def constant_floor(data_root: Path, split: str = "test", num_candidates: int = 200) -> tuple[str, float]:
    """The best single caption for every ``split`` image, among the most frequent training captions."""
    entries = load_karpathy(data_root / "dataset.json")
    refs = {e.image_id: list(e.raw) for e in entries if e.split == split}
    counts: dict[str, int] = {}
    for entry in entries:
        if entry.split == "train":
            for tokens in entry.captions:
                key = " ".join(tokens)
                counts[key] = counts.get(key, 0) + 1
    pool = sorted(counts, key=lambda c: (-counts[c], c))[:num_candidates]
    return best_constant_caption(refs, pool, tokenizer_backend="python")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("data/synth"))
    parser.add_argument("--out", type=Path, default=Path("runs/demo"))
    parser.add_argument("--config", type=Path, default=REPO / "configs" / "demo.yaml")
    parser.add_argument("--scst", action="store_true", help="Add a short SCST phase after XE (runs/demo-scst).")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        if not (args.data / "dataset.json").is_file():
            from vlattn.data.synth import generate

            print(f"[demo] generating the synthetic data set in {args.data}", flush=True)
            generate(args.data, log=lambda line: print(f"[synth] {line}", flush=True))
        cfg = load_config(args.config, [f"data.root={args.data}"])
        resume = (args.out / "checkpoints" / "last").exists()
        print(f"[demo] {'continuing' if resume else 'training'} {cfg.model.kind} (XE) in {args.out}", flush=True)
        train_xe(cfg, args.out, resume=resume, device="auto")
        run = args.out
        if args.scst:
            scst_dir = args.out.with_name(args.out.name + "-scst")
            resume = (scst_dir / "checkpoints" / "last").exists()
            print(f"[demo] SCST fine-tuning in {scst_dir}", flush=True)
            train_scst(cfg, scst_dir, init=args.out, resume=resume, device="auto")
            run = scst_dir
        report = run_eval(run, split="test", device="auto")
        print(format_report(report))
        caption, floor = constant_floor(args.data)
        cider = report["scores"]["CIDEr"]
        ratio = cider / floor if floor > 0 else float("inf")
        print(f"  best constant caption {caption!r}: CIDEr-D {floor:.4f}")
        print(f"  model / constant CIDEr-D = {ratio:.1f}x (required >= {FLOOR_RATIO:.0f}x)")
        print(f"[demo] done in {time.perf_counter() - start:.0f} s")
        return 0 if ratio >= FLOOR_RATIO else 1
    except VlattnError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
