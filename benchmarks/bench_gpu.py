"""GPU check: each captioning preset's XE step, SCST step and beam search in fp32, bf16 autocast and compiled.

On a CUDA machine, for every preset of ``--presets`` and every mode of ``--modes`` (``fp32``; ``bf16``: the
forward under ``torch.autocast(bfloat16)``, as ``train.precision: bf16``; ``compile``: fp32 with every backbone
layer compiled as ``train.compile: true`` does), it runs ``--warmup`` untimed then ``--steps`` timed repetitions
of

- ``xe``: forward, cross-entropy, backward and Adam update on a batch of 50 images x 50 regions (of the preset's
  ``model.feature_dim``, 2048 for the COCO presets) with 20-word captions over COCO's 10,201-word vocabulary (M2 Sec. 4: batch 50);
- ``scst``: the SCST objective (``train.scst_*`` defaults: 5 beams per image, 20 steps, mean baseline) with its
  backward and Adam update; the rewards are random numbers (CIDEr-D runs on the CPU and is benchmarked
  elsewhere), so this times the model's part;
- ``beam``: beam search of size 5 to 20 words, no gradients,

and prints one JSON object per line: preset, mode, phase, images/s, ms per step and peak CUDA memory (MiB, from
``torch.cuda.max_memory_allocated``). Without CUDA it prints one line saying so and exits with status 0 (nothing
measured); ``--device cpu`` runs the same code on the CPU (``--tiny``: small shapes, for the test suite).

    .venv/bin/python benchmarks/bench_gpu.py [--presets m2,transformer] [--modes fp32,bf16,compile] [--steps 10]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Callable

import torch

from vlattn.api import create_model, load_config
from vlattn.data.vocab import Vocabulary
from vlattn.decoding import beam_search
from vlattn.models.profile import random_batch
from vlattn.precision import autocast, compile_layers
from vlattn.training.scst import scst_objective
from vlattn.training.xe import xe_loss

PRESETS = ("m2", "transformer", "updown", "ng-san", "lw-transformer", "catt", "updown-sla")
MODES = ("fp32", "bf16", "compile")
FULL = {"batch": 50, "regions": 50, "length": 20, "vocab": 10_201, "beam": 5}
TINY = {"batch": 2, "regions": 4, "length": 3, "vocab": 40, "beam": 2}


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(run: Callable[[], None], device: torch.device, warmup: int, steps: int) -> float:
    """Seconds per call of ``run`` over ``steps`` calls after ``warmup`` untimed ones."""
    for _ in range(warmup):
        run()
    synchronize(device)
    start = time.perf_counter()
    for _ in range(steps):
        run()
    synchronize(device)
    return (time.perf_counter() - start) / steps


def phases(model: torch.nn.Module, inputs: dict[str, torch.Tensor], shapes: dict[str, int], mode: str,
           device: torch.device) -> dict[str, Callable[[], None]]:
    """``{phase: one step}`` of ``model`` on ``inputs`` under ``mode``'s autocast."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-5)
    precision = "bf16" if mode == "bf16" else "fp32"
    vocab = Vocabulary([f"w{i}" for i in range(shapes["vocab"] - 4)])
    scst = scst_objective(reward=lambda tokens, ids: torch.rand(tokens.shape[0]), vocab=vocab,
                          num_samples=shapes["beam"], max_len=shapes["length"])

    def update(loss: torch.Tensor) -> None:
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    def xe() -> None:
        model.train()
        with autocast(precision, device):
            logits = model(inputs, inputs["tokens"][:, :-1])
            loss = xe_loss(logits.float(), inputs["tokens"][:, 1:], pad_id=Vocabulary.PAD)
        update(loss)

    def self_critical() -> None:
        model.train()
        with autocast(precision, device):
            loss, _ = scst(model, inputs)
        update(loss)

    def beam() -> None:
        model.eval()
        with torch.no_grad(), autocast(precision, device):
            beam_search(model, inputs, bos=Vocabulary.BOS, eos=Vocabulary.EOS, pad=Vocabulary.PAD,
                        beam_size=shapes["beam"], max_len=shapes["length"])

    return {"xe": xe, "scst": self_critical, "beam": beam}


def measure(preset: str, mode: str, args: argparse.Namespace, device: torch.device) -> list[dict[str, Any]]:
    shapes = TINY if args.tiny else FULL
    torch.manual_seed(0)
    cfg = load_config(preset)
    model = create_model(cfg, vocab_size=shapes["vocab"]).to(device)
    if mode == "compile":
        if not hasattr(model, "backbone_layers"):  # what train.compile compiles; LSTM captioners have none
            return [{"preset": preset, "mode": mode, "skipped": f"{type(model).__name__} has no backbone_layers()"}]
        compile_layers(model, backend=args.compile_backend)
    batch = random_batch(shapes["batch"], shapes["regions"], shapes["length"], cfg.model.feature_dim, shapes["vocab"])
    inputs = {key: value.to(device) for key, value in batch.items()}
    inputs["image_ids"] = torch.arange(shapes["batch"])
    rows = []
    for phase, run in phases(model, inputs, shapes, mode, device).items():
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        seconds = timed(run, device, args.warmup, args.steps)
        peak = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None
        rows.append({"preset": preset, "mode": mode, "phase": phase, "batch": shapes["batch"],
                     "images_per_s": round(shapes["batch"] / seconds, 2), "ms_per_step": round(seconds * 1e3, 2),
                     "peak_mib": None if peak is None else round(peak, 1), "device": str(device)})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default=",".join(PRESETS), help="captioning presets, comma-separated")
    parser.add_argument("--modes", default=",".join(MODES), help=f"of {', '.join(MODES)}")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per measurement")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (compilation included)")
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (cpu: the code path, no GPU figures)")
    parser.add_argument("--tiny", action="store_true", help="small shapes (the CPU test)")
    parser.add_argument("--compile-backend", default="inductor", help="torch.compile backend of the compile mode")
    parser.add_argument("--quick", action="store_true", help="make bench's reduced size: --tiny, 1 step, no warm-up")
    args = parser.parse_args(argv)
    if args.quick:
        args.tiny, args.steps, args.warmup = True, 1, 0
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("bench_gpu: no CUDA device on this machine; nothing measured (--device cpu runs the code path)")
        return 0
    modes = args.modes.split(",")
    unknown = [mode for mode in modes if mode not in MODES]
    if unknown:
        parser.error(f"unknown mode(s) {', '.join(unknown)}; valid: {', '.join(MODES)}")
    for preset in args.presets.split(","):
        for mode in modes:
            for row in measure(preset, mode, args, device):
                print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
