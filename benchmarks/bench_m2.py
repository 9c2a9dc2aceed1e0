"""M2 vs the 3+3 Transformer: one XE training step, beam search and one SCST step.

Batch 10, 50 regions x 2048-d (10 of them padded), captions of 20 input tokens, vocabulary 10201. M2 is the
model of vlattn/presets/m2.yaml; the Transformer is the same config with kind ``transformer``, plain encoder
self-attention and no options (so the two differ only in memory slots and meshed cross-attention).
XE step: forward + cross-entropy + backward + Adam update, train mode. Beam search: beam 5, 20 steps, eval
mode, no gradients, key/value caches. SCST step: train mode, ``beam_search(..., grad=True)`` (beam 5, 20
steps), SCST loss with the mean baseline, backward, Adam update. One thread; the six runs interleaved;
medians written to benchmarks/RESULTS.md ("## M2 speed").
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable
from functools import partial

import torch
from bench_xe_step import xe_step
from results import paired_ratio, parse_args, publish, sized
from torch import Tensor, nn

from vlattn.config import Spec, load_config
from vlattn.decoding import beam_search
from vlattn.models import build_captioner
from vlattn.models.profile import count_parameters, random_batch, time_interleaved
from vlattn.training.scst import mean_baseline, scst_loss

VOCAB, BATCH, REGIONS, LENGTH, FEATURES, BEAM = 10201, 10, 50, 20, 2048, 5
PAD, BOS, EOS = 0, 1, 2


def xe_run(model: nn.Module, optimizer: torch.optim.Optimizer, inputs: dict[str, Tensor]) -> None:
    """One XE step (benchmarks/bench_xe_step.py) in train mode."""
    model.train()
    xe_step(model, optimizer, inputs)


def beam_run(model: nn.Module, optimizer: torch.optim.Optimizer, inputs: dict[str, Tensor]) -> None:
    """Cached beam search (beam 5, 20 steps) in eval mode; ``optimizer`` is unused."""
    model.eval()
    beam_search(model, inputs, bos=BOS, eos=EOS,
                beam_size=BEAM, max_len=LENGTH)


def scst_step(model: nn.Module, optimizer: torch.optim.Optimizer, inputs: dict[str, Tensor]) -> None:
    """Differentiable beams, a stand-in reward (caption length: CIDEr-D is benchmarked on its own), the SCST
    loss with the mean baseline, backward and an Adam update."""
    model.train()
    beams = beam_search(model, inputs, bos=BOS, eos=EOS,
                        beam_size=BEAM, max_len=LENGTH, grad=True)
    rewards = beams.tokens.ne(PAD).sum(-1).float()  # (B, K)
    tokens, log_probs = beams.tokens.flatten(0, 1), beams.log_probs.flatten(0, 1)  # (B * K, L)
    loss = scst_loss(log_probs, tokens, rewards.flatten(), mean_baseline(rewards).flatten(), eos=EOS)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def main() -> None:
    args = parse_args(__doc__, repeats=5)
    torch.set_num_threads(1)
    m2_config = load_config("m2").model
    configs = {
        "Transformer": dataclasses.replace(
            m2_config, kind="transformer", encoder_self_attention=Spec("mha"), options={}
        ),
        "M2": m2_config,
    }
    models, optimizers = {}, {}
    for name, cfg in configs.items():
        torch.manual_seed(0)
        models[name] = build_captioner(cfg, VOCAB, pad_id=PAD)
        optimizers[name] = torch.optim.Adam(models[name].parameters(), lr=1e-6)
    inputs = random_batch(sized(args, BATCH, 2), REGIONS, LENGTH, FEATURES, VOCAB)
    inputs["region_mask"][:, 40:] = False  # some padded regions, as in real batches

    tasks: dict[str, Callable[[nn.Module, torch.optim.Optimizer, dict[str, Tensor]], None]] = {
        "XE training step": xe_run,
        "beam search (beam 5, 20 steps)": beam_run,
        "SCST step (beam 5, backward)": scst_step,
    }
    runs = {(task, name): partial(run, models[name], optimizers[name], inputs)
            for task, run in tasks.items() for name in models}
    times = time_interleaved(runs, args.repeats)
    rows = []
    for task in tasks:
        base, m2 = times[(task, "Transformer")], times[(task, "M2")]
        rows.append(
            f"| {task} | {statistics.median(base):.0f} | {statistics.median(m2):.0f} | "
            f"{statistics.median(m2) / statistics.median(base):.2f}x | {paired_ratio(m2, base):.2f}x |"
        )
    params = {name: f"{count_parameters(model)['total']:,}" for name, model in models.items()}
    body = f"""Batch {BATCH}, {REGIONS} regions x {FEATURES}-d (10 padded), {LENGTH} tokens, vocabulary {VOCAB}; d=512, 8 heads,
FFN 2048, 3+3 layers, dropout 0.1, untied output without bias. M2 = vlattn/presets/m2.yaml (m=40 memory slots,
meshed sigmoid gates; {params["M2"]} parameters); Transformer = the same config with plain self-attention and
single-level cross-attention ({params["Transformer"]} parameters). XE step: forward + cross-entropy + backward +
Adam. Beam search: eval mode, K/V caches (M2: one per encoder level). SCST step: train mode,
`beam_search(..., grad=True)` with beam 5 over 20 steps, SCST loss with the mean baseline (reward: caption
length, a stand-in — CIDEr-D costs ~20 ms per batch, see "CIDEr-D (metrics)"), backward + Adam.
`torch.set_num_threads(1)`, {args.repeats} interleaved rounds of the six runs, medians; shared 2-CPU machine.

| run | Transformer (ms) | M2 (ms) | M2 / Transformer (medians) | M2 / Transformer (median of per-round ratios) |
|---|---|---|---|---|
{chr(10).join(rows)}"""
    publish("M2 speed", body, args)


if __name__ == "__main__":
    main()
