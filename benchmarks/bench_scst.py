"""Share of the CIDEr-D reward in one SCST step.

The 3+3-layer d=512 Transformer captioner (vocabulary 10201, 50 regions x 2048-d), 50 images x 5 beams kept
differentiable (M2's SCST sampling), CIDEr-D reward against 5 references per image with training document
frequencies, mean baseline, backward. One thread; the reward and the full step are timed interleaved;
medians written to benchmarks/RESULTS.md ("## SCST step and reward").
"""

from __future__ import annotations

import statistics

import numpy as np
import torch
from results import parse_args, publish, sized

from vlattn.config import ModelConfig
from vlattn.decoding import beam_search
from vlattn.metrics import CiderDocumentFrequency, CiderReward
from vlattn.models import build_captioner
from vlattn.models.profile import random_batch, time_interleaved
from vlattn.training.scst import mean_baseline, scst_loss

BOS, EOS, VOCAB, BEAM = 1, 2, 10201, 5


def references(rng: np.random.Generator, images: int, words: list[str]) -> list[list[str]]:
    """Five 8-14-word captions per image drawn from a Zipfian distribution over ``words``."""
    ranks = np.arange(1, len(words) + 1)
    p = (1.0 / ranks) / (1.0 / ranks).sum()
    return [[" ".join(rng.choice(words, size=rng.integers(8, 15), p=p)) for _ in range(5)] for _ in range(images)]


def main() -> None:
    args = parse_args(__doc__, repeats=3)
    images = sized(args, 50, 4)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    words = ["<pad>", "<bos>", "<eos>", "<unk>", *[f"w{i}" for i in range(4, VOCAB)]]
    rng = np.random.default_rng(0)
    train_refs = references(rng, 5000, words[4:])
    table = CiderDocumentFrequency.build(train_refs, mode="image", eos_token="<eos>")
    reward = CiderReward(table, include_eos=False, vocabulary=words)
    batch_refs = train_refs[:images]
    model = build_captioner(ModelConfig(encoder_layers=3, decoder_layers=3, output_bias=False), VOCAB).train()
    inputs = random_batch(images, 50, 1, 2048, VOCAB)
    sampled = {}

    def scst_step() -> None:
        beams = beam_search(model, inputs, bos=BOS, eos=EOS, beam_size=BEAM, max_len=20, grad=True)
        tokens = beams.tokens.flatten(0, 1)  # (B*K, L)
        sampled["tokens"] = tokens
        rewards = torch.from_numpy(reward(tokens.numpy(), batch_refs)).float().view(images, BEAM)
        loss = scst_loss(beams.log_probs.flatten(0, 1), tokens, rewards.flatten(), mean_baseline(rewards).flatten(), eos=EOS)
        loss.backward()
        model.zero_grad(set_to_none=True)

    scst_step()  # fills sampled["tokens"] for the reward-only run
    times = time_interleaved(
        {"step": scst_step, "reward": lambda: reward(sampled["tokens"].numpy(), batch_refs)}, args.repeats
    )
    step, rew = statistics.median(times["step"]), statistics.median(times["reward"])
    body = f"""3+3-layer d=512 Transformer, vocabulary {VOCAB}, {images} images x 50 regions x 2048-d, beam {BEAM}
(differentiable, max 20 words), CIDEr-D against 5 references each with document frequencies of 5000 training
images, mean baseline, backward; `torch.set_num_threads(1)`, {args.repeats} interleaved runs, medians.

| part | median (ms) | all runs (ms) |
|---|---|---|
| whole SCST step (beam search + reward + loss + backward) | {step:.0f} | {", ".join(f"{t:.0f}" for t in times["step"])} |
| CIDEr-D reward of the {images * BEAM} captions | {rew:.1f} | {", ".join(f"{t:.1f}" for t in times["reward"])} |

Reward share of the step: **{100 * rew / step:.2f}%** (target < 10%)."""
    publish("SCST step and reward", body, args)


if __name__ == "__main__":
    main()
