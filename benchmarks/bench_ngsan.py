"""Cost of NSA and GSA: SAN, N-SAN, G-SAN and NG-SAN (vlattn/presets/san.yaml, n-san.yaml, g-san.yaml,
ng-san.yaml; vocabulary 9487) on one XE training step and on encoding a batch for decoding.

Batch 10, 50 regions x 2048-d (10 of them padded), captions of 20 input tokens. XE step: forward +
cross-entropy + backward + Adam update, train mode. Encode: ``model.encode`` in eval mode without gradients
(the per-image part of beam search; the decoder is the same in all four). One thread; the eight runs
interleaved; medians and ratios to SAN written to benchmarks/RESULTS.md ("## NG-SAN speed").
"""

from __future__ import annotations

import statistics
from functools import partial

import torch
from bench_xe_step import xe_step
from results import paired_ratio, parse_args, publish, sized
from torch import Tensor, nn

from vlattn.config import load_config
from vlattn.models import build_captioner
from vlattn.models.profile import random_batch, time_interleaved

VOCAB, LENGTH, FEATURES = 9487, 20, 2048
PRESETS = {"SAN": "san", "N-SAN": "n-san", "G-SAN": "g-san", "NG-SAN": "ng-san"}


def xe_run(model: nn.Module, optimizer: torch.optim.Optimizer, inputs: dict[str, Tensor]) -> None:
    model.train()
    xe_step(model, optimizer, inputs)


def encode_run(model: nn.Module, optimizer: torch.optim.Optimizer, inputs: dict[str, Tensor]) -> None:
    model.eval()
    with torch.no_grad():
        model.encode(inputs)


def main() -> None:
    args = parse_args(__doc__, repeats=5)
    torch.set_num_threads(1)
    models, optimizers = {}, {}
    for name, preset in PRESETS.items():
        torch.manual_seed(0)
        models[name] = build_captioner(load_config(preset).model, VOCAB)
        optimizers[name] = torch.optim.Adam(models[name].parameters(), lr=1e-6)
    batch, regions = sized(args, 10, 2), sized(args, 50, 10)
    inputs = random_batch(batch, regions, LENGTH, FEATURES, VOCAB)
    inputs["region_mask"][:, regions - regions // 5 :] = False
    tasks = {"XE training step": xe_run, "encode (eval, no grad)": encode_run}
    runs = {(task, name): partial(run, models[name], optimizers[name], inputs) for task, run in tasks.items() for name in models}
    times = time_interleaved(runs, args.repeats)
    rows = []
    for task in tasks:
        base = times[(task, "SAN")]
        cells = [f"{statistics.median(times[(task, name)]):.0f}" for name in models]
        ratios = [f"{paired_ratio(times[(task, name)], base):.2f}x" for name in models if name != "SAN"]
        rows.append(f"| {task} | {' | '.join(cells)} | {' | '.join(ratios)} |")
    names = list(models)
    body = f"""Batch {batch}, {regions} regions x {FEATURES}-d ({regions // 5} padded), {LENGTH} tokens, vocabulary {VOCAB}; the four presets (4+4
layers, d=512, 8 heads, FFN 2048; N-SAN: IN of the queries; G-SAN/NG-SAN: query-dependent geometric bias,
d_g = 64). XE step: forward + cross-entropy + backward + Adam, train mode; encode: `model.encode`, eval mode,
no gradients. `torch.set_num_threads(1)`, {args.repeats} interleaved rounds of the eight runs, median ms; ratios are
medians of the per-round ratios to SAN; shared 2-CPU machine.

| run | {' | '.join(f'{n} (ms)' for n in names)} | {' | '.join(f'{n} / SAN' for n in names[1:])} |
|---|{'---|' * (2 * len(names) - 1)}
{chr(10).join(rows)}"""
    publish("NG-SAN speed", body, args)


if __name__ == "__main__":
    main()
