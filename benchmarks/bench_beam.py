"""Beam search with and without the decoder's cache.

Beam 5, 20 steps, batch 10, 50 regions x 2048-d, vocabulary 10201; one thread; cached and uncached runs
interleaved; medians reported and written to benchmarks/RESULTS.md. ``--kind transformer`` (default; "## Beam
search cache"): d=512, 3+3 layers; uncached means every step re-runs the decoder over the whole prefix and
re-projects the image keys/values. ``--kind updown`` ("## Beam search cache (Up-Down)"): the model of
vlattn/presets/updown.yaml (LSTMs 1024, additive attention 512); uncached means every step re-runs both LSTMs over the
whole prefix and re-projects the regions for the attention.
"""

from __future__ import annotations

import platform
import statistics
from collections.abc import Callable
from dataclasses import dataclass

import torch
from results import paired_ratio, parse_args, publish, sized

from vlattn.config import ModelConfig, load_config
from vlattn.decoding import beam_search
from vlattn.models import build_captioner
from vlattn.models.profile import random_batch, time_interleaved

BOS, EOS = 1, 2


@dataclass(frozen=True)
class Kind:
    """A ``--kind``: its RESULTS.md section, the model's description, its config, what its cache holds, the
    issue's target for the speed-up (empty: none)."""

    heading: str
    description: str
    config: Callable[[], ModelConfig]
    cache: str
    target: str = ""


KINDS = {
    "transformer": Kind("Beam search cache", "d=512, 8 heads,\n3+3 layers",
                        lambda: ModelConfig(encoder_layers=3, decoder_layers=3), "K/V cache", " (target >= 3x)"),
    "updown": Kind("Beam search cache (Up-Down)", "vlattn/presets/updown.yaml's Up-Down\n(LSTMs 1024, embedding 1024, "
                   "additive attention 512)", lambda: load_config("updown").model,
                   "LSTM states, region projections"),
}


def main() -> None:
    args = parse_args(__doc__, repeats=5, extra=lambda parser: parser.add_argument(
        "--kind", choices=sorted(KINDS), default="transformer", help="the captioner to decode with"))
    torch.set_num_threads(1)
    torch.manual_seed(0)
    vocab, batch, regions, beam, steps = 10201, sized(args, 10, 2), 50, 5, sized(args, 20, 5)
    kind = KINDS[args.kind]
    model = build_captioner(kind.config(), vocab).eval()
    inputs = random_batch(batch, regions, 1, 2048, vocab)
    regions_in = {k: inputs[k] for k in ("features", "boxes", "region_mask")}
    results = {}

    def run(use_cache: bool) -> None:
        model.use_cache = use_cache
        results[use_cache] = beam_search(model, regions_in, bos=BOS, eos=EOS, beam_size=beam, max_len=steps)

    times = time_interleaved({"cached": lambda: run(True), "uncached": lambda: run(False)}, args.repeats)
    same = torch.equal(results[True].tokens, results[False].tokens)
    length = results[True].tokens.shape[2]
    cached, uncached = statistics.median(times["cached"]), statistics.median(times["uncached"])
    paired = paired_ratio(times["uncached"], times["cached"])
    body = f"""Beam {beam}, max {steps} steps (ran {length}), batch {batch}, {regions} regions x 2048-d, {kind.description},
vocabulary {vocab}; `torch.set_num_threads(1)`, {args.repeats} interleaved runs each, medians.
torch {torch.__version__}, {platform.processor() or platform.machine()}.

| decoding | median time (s) | all runs (s) |
|---|---|---|
| cached ({kind.cache}) | {cached / 1000:.2f} | {", ".join(f"{t / 1000:.2f}" for t in times["cached"])} |
| uncached (prefix recomputed) | {uncached / 1000:.2f} | {", ".join(f"{t / 1000:.2f}" for t in times["uncached"])} |

Speed-up with the cache: **{uncached / cached:.2f}x** from the medians, {paired:.2f}x
median of the per-round ratios{kind.target}. Identical beams cached vs uncached: {same}."""
    publish(kind.heading, body, args)


if __name__ == "__main__":
    main()
