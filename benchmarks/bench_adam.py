"""Adam update of M2's parameters (vlattn/presets/m2.yaml, vocabulary 10201): ``build_optimizer`` (PyTorch's fused kernel)
vs ``torch.optim.Adam`` with PyTorch's default implementation (a loop over the parameters on the CPU), same random
gradients, one thread, interleaved rounds after an untimed first step, medians; the parameters of both are compared
at the end.
Writes "## Fused Adam".

    .venv/bin/python benchmarks/bench_adam.py [--repeats 5] [--no-write] [--quick]
"""

from __future__ import annotations

import statistics
import time

import torch
from torch import nn
from results import paired_ratio, parse_args, publish

from vlattn.config import load_config
from vlattn.models import build_captioner
from vlattn.training.optim import build_optimizer

BETAS, LR = (0.9, 0.98), 1e-4


def main() -> None:
    args = parse_args(__doc__, repeats=5)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = build_captioner(load_config("m2").model, 10201, pad_id=0)
    copies = {name: nn.ParameterList(p.detach().clone() for p in model.parameters()) for name in ("default", "fused")}
    grads = [torch.randn_like(p) for p in model.parameters()]
    for params in copies.values():
        for p, g in zip(params, grads):
            p.grad = g.clone()
    fused = build_optimizer(copies["fused"], BETAS)
    for group in fused.param_groups:
        group["lr"] = LR
    optimizers = {"default": torch.optim.Adam(copies["default"].parameters(), lr=LR, betas=BETAS), "fused": fused}
    for optimizer in optimizers.values():
        optimizer.step()  # first step: allocates the moments (not timed)
    times: dict[str, list[float]] = {name: [] for name in optimizers}
    for _ in range(args.repeats):
        for name, optimizer in optimizers.items():
            start = time.perf_counter()
            optimizer.step()
            times[name].append(time.perf_counter() - start)
    with torch.no_grad():
        difference = max(float((a - b).abs().max()) for a, b in zip(copies["default"], copies["fused"]))
    count = sum(p.numel() for p in model.parameters())
    body = f"""M2 (vlattn/presets/m2.yaml, V = 10201): {count:,} parameters in {len(grads)} tensors, fixed random gradients; one Adam
step per implementation per round after an untimed first one, {args.repeats} interleaved rounds, `torch.set_num_threads(1)`, medians.

| implementation | median step (s) | all (s) |
|---|---|---|
| `torch.optim.Adam` (PyTorch's default on the CPU: a loop over the parameters) | {statistics.median(times['default']):.3f} | {", ".join(f"{t:.3f}" for t in times['default'])} |
| `build_optimizer` (fused kernel) | {statistics.median(times['fused']):.3f} | {", ".join(f"{t:.3f}" for t in times['fused'])} |

Fused speed-up: **{paired_ratio(times['default'], times['fused']):.1f}x** (median of the per-round ratios). Largest
parameter difference after {args.repeats + 1} steps: {difference:.1e}."""
    publish("Fused Adam", body, args)


if __name__ == "__main__":
    main()
