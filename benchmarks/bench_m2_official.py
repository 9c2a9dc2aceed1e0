"""M2 side by side with the released code on the same weights: a random state dict in the released
layout at the released size (vocabulary 10201, d=512, 8 heads, m=40, 3+3 layers, 2048-d regions, 55 position
rows) is imported, and vlattn's teacher-forced log-probabilities and beam search (beam 5, 20 steps) are compared
with the independent re-implementation of the released forward pass in ``tests/m2_released.py`` — with every
paper-reading option (vlattn's M2 before the official options), with all official options, and with all but one
of them, so each difference is attributed. Written to benchmarks/RESULTS.md ("## M2 official vs released code").
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import torch
from results import parse_args, publish, sized

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from m2_released import random_released_state, released_beam_search, released_log_probs  # noqa: E402

from vlattn.decoding import beam_search  # noqa: E402
from vlattn.importers.m2_official import map_state_dict  # noqa: E402
from vlattn.models import build_captioner  # noqa: E402

SPECIALS = ["<unk>", "<pad>", "<bos>", "<eos>"]
R_PAD, R_BOS, R_EOS = 1, 2, 3
PAPER = {"residual": "paper", "positions": "sinusoidal", "padding": "regions"}


def until_eos(tokens: torch.Tensor, eos: int = 2) -> list[int]:
    """The words of a generated row up to and including its first EOS (vlattn ids)."""
    words = tokens.tolist()
    return words[: words.index(eos) + 1] if eos in words else words


def variants() -> dict[str, dict[str, str]]:
    """Option sets compared: all paper, all official, and all official but one."""
    rows = {"all paper options": dict(PAPER), "all official options": {}}
    for key, value in PAPER.items():
        rows[f"official except {key}: {value}"] = {key: value}
    return rows


def main() -> None:
    args = parse_args(__doc__, repeats=1)
    torch.set_num_threads(1)
    vocab, d_model, d_ff, d_in = sized(args, 10201, 1001), sized(args, 512, 128), sized(args, 2048, 256), sized(args, 2048, 256)
    images, regions, heads = sized(args, 10, 3), 50, 8
    state = random_released_state(vocab=vocab, d_model=d_model, d_ff=d_ff, d_in=d_in, slots=40, layers=3, seed=0)
    words = SPECIALS + [f"w{i}" for i in range(vocab - 4)]
    imported = map_state_dict(state, words, heads=heads)
    order = torch.tensor([imported.vocab.stoi[w] for w in words])  # released id -> vlattn id

    generator = torch.Generator().manual_seed(1)
    counts = torch.randint(10, regions + 1, (images,), generator=generator)  # real regions per image
    mask = torch.arange(regions)[None, :] < counts[:, None]
    features = torch.randn(images, regions, d_in, generator=generator).relu() * mask[..., None]
    inputs = {"features": features, "boxes": torch.zeros(images, regions, 4), "region_mask": mask}
    lengths = torch.randint(8, 17, (images,), generator=generator)
    tokens = torch.randint(4, vocab, (images, 20), generator=generator)
    tokens[:, 0] = R_BOS
    for row, n in enumerate(lengths.tolist()):
        tokens[row, n], tokens[row, n + 1 :] = R_EOS, R_PAD
    real = tokens != R_PAD  # positions compared
    reference = released_log_probs(state, features, tokens, pad=R_PAD, heads=heads)  # features padded to 50 already
    ref_beams = released_beam_search(state, features, bos=R_BOS, eos=R_EOS, pad=R_PAD, heads=heads, out_size=1)

    table = []
    for name, changes in variants().items():
        cfg = imported.config.model
        options = {**cfg.options, **changes}
        model = build_captioner(dataclasses.replace(cfg, options=options), len(words), pad_id=0).eval()
        model.load_state_dict(imported.state, strict=changes.get("positions") != "sinusoidal")
        with torch.no_grad():
            ours = model(inputs, order[tokens]).log_softmax(-1)[..., order]  # released word order
            beams = beam_search(model, inputs, bos=1, eos=2, beam_size=5, max_len=20, pad=0)
        diff = (ours - reference).abs()[real]  # (positions, V)
        top = (ours.argmax(-1) == reference.argmax(-1))[real].float().mean().item()
        expected = order[ref_beams.words[:, 0]]  # (B, 20) vlattn ids
        same = [until_eos(beams.tokens[b, 0]) == until_eos(expected[b]) for b in range(images)]
        table.append(f"| {name} | {diff.max().item():.2e} | {diff.mean().item():.2e} | {100 * top:.1f}% | "
                     f"{sum(same)}/{images} |")
    body = f"""Random weights in the released state-dict layout at {'the released size' if not args.quick else 'a reduced size'}
(vocabulary {vocab}, d={d_model}, 8 heads, FFN {d_ff}, m=40, 3+3 layers, {d_in}-d regions, 55 position rows;
non-zero biases and LayerNorm parameters), imported with `vlattn import-checkpoint`'s mapping; {images} images with
10-50 real regions zero-padded to 50 (as the released loader pads), captions of 8-16 words + EOS + padding.
Reference: `tests/m2_released.py`, an independent re-implementation of the released forward pass and beam search.
Log-probability differences over all {int(real.sum())} non-padding positions x {vocab} words; top-1 = the most
likely word agrees; beams = the best beam (beam 5, 20 steps) is the released one up to its EOS.

| vlattn options (same weights) | max abs diff log p | mean abs diff | top-1 agrees | best beam identical |
|---|---|---|---|---|
{chr(10).join(table)}

The memory slots are used with the released scale (`init: official` of the memory attention) in every row; `init`
(model-wide) only decides fresh weights and dropout is off in evaluation, so neither changes these figures."""
    publish("M2 official vs released code", body, args)


if __name__ == "__main__":
    main()
