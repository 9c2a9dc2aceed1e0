"""Decoding only the images still in progress (vlattn.decoding.active): the same beams, samples and log-probs
(and gradients) as decoding every image to the end, with the finished images' rows no longer computed."""

from __future__ import annotations

import pytest
import torch
from registry_cases import SITE_OPTIONS
from tests.models.conftest import BOS, EOS, PAD, model_inputs, tiny_captioner, tiny_inputs

from vlattn.config import Spec
from vlattn.decoding import beam_search, greedy_decode, sample
from vlattn.decoding.active import ActiveImages
from vlattn.layers.rows import image_rows
from vlattn.models import UpDownCaptioner

A, B, V = 3, 4, 5


class Countdown(torch.nn.Module):
    """A crafted generator: image i ends after ``ends[i]`` words. Before that, its rows prefer A (0.5) over B
    (0.3) and EOS (0.2, except at the last word: 0.96); a learnable bias ``shift`` (V,) is added to every
    log-probability, so the log-probs carry gradients. Records the rows it computes at each step."""

    def __init__(self, ends: list[int]) -> None:
        super().__init__()
        self.ends = torch.tensor(ends)
        self.shift = torch.nn.Parameter(torch.zeros(V))
        self.rows: list[int] = []

    def encode(self, inputs):
        return {"ends": self.ends.clone(), "group": 1}

    def step(self, tokens, state):
        self.rows.append(tokens.shape[0])
        ends = state["ends"].repeat_interleave(tokens.shape[0] // state["ends"].shape[0])  # (R,)
        last = tokens.shape[1] >= ends  # (R,) the next word is the image's last
        probs = torch.full((tokens.shape[0], V), 1e-3)
        probs[:, A], probs[:, B], probs[:, EOS] = 0.5, 0.3, 0.2
        probs[last, A], probs[last, B], probs[last, EOS] = 0.02, 0.02, 0.96
        return (probs / probs.sum(-1, keepdim=True)).log() + self.shift, state

    def reorder(self, state, index):
        return state

    def select_images(self, state, images):
        return {"ends": state["ends"][images], "group": state["group"]}


def test_image_rows() -> None:
    assert image_rows(torch.tensor([0, 2]), 3).tolist() == [0, 1, 2, 6, 7, 8]


def test_beam_search_skips_finished_images_with_the_same_beams_and_gradients() -> None:
    inputs = {"features": torch.zeros(3, 1, 1)}
    full_model, active_model = Countdown([2, 6, 3]), Countdown([2, 6, 3])
    full = beam_search(full_model, inputs, bos=BOS, eos=EOS, beam_size=2, max_len=8, grad=True)
    fast = beam_search(ActiveImages(active_model, EOS), inputs, bos=BOS, eos=EOS, beam_size=2, max_len=8, grad=True)
    assert torch.equal(full.tokens, fast.tokens)
    assert torch.allclose(full.log_probs, fast.log_probs) and torch.allclose(full.scores, fast.scores)
    full.log_probs.sum().backward()
    fast.log_probs.sum().backward()
    assert torch.allclose(full_model.shift.grad, active_model.shift.grad)
    # beams of image i end by word ends[i]: all 3 images x 2 beams are computed until image 0 has ended (after
    # 2 words), then images 1 and 2 until image 2 has (3 words), then image 1 alone
    assert full_model.rows == [3] + [6] * (len(full_model.rows) - 1)
    steps = len(active_model.rows)
    assert steps == len(full_model.rows) and active_model.rows[:4] == [3, 6, 4, 2]
    assert active_model.rows[4:] == [2] * (steps - 4)


def test_sampling_and_greedy_skip_finished_images_with_the_same_results() -> None:
    inputs = {"features": torch.zeros(3, 1, 1)}
    greedy = greedy_decode(Countdown([4, 1, 2]), inputs, bos=BOS, eos=EOS, max_len=8)
    assert torch.equal(greedy_decode(ActiveImages(Countdown([4, 1, 2]), EOS), inputs, bos=BOS, eos=EOS, max_len=8),
                       greedy)
    assert greedy.tolist() == [[A, A, A, EOS], [EOS, PAD, PAD, PAD], [A, EOS, PAD, PAD]]
    # the same random draws: the finished images' rows draw from zeros (uniform) instead of their frozen rows, and
    # multinomial takes one draw per row either way
    full_model, active_model = Countdown([2, 5, 3]), Countdown([2, 5, 3])
    first = sample(full_model, inputs, bos=BOS, eos=EOS, num_samples=3, max_len=8,
                   generator=torch.Generator().manual_seed(0))
    second = sample(ActiveImages(active_model, EOS), inputs, bos=BOS, eos=EOS, num_samples=3, max_len=8,
                    generator=torch.Generator().manual_seed(0))
    assert torch.equal(first.tokens, second.tokens) and torch.allclose(first.log_probs, second.log_probs)
    assert sum(active_model.rows) < sum(full_model.rows)  # some image ended before the last one (rows dropped)


UPDOWN_CATT = {"kind": "updown", "decoder_cross_attention": Spec("catt_additive", SITE_OPTIONS["catt_additive"])}
UPDOWN_SLA = {"kind": "updown", "decoder_cross_attention": Spec("sla", {"units": 3, "position": "boxes"})}


def ends_early(model: torch.nn.Module, inputs: dict, eos_bias: float) -> bool:
    """With ``eos_bias`` added to EOS's logit, some image's beams all end before others' (an image is dropped
    while the search goes on)."""
    output = model.output if isinstance(model, UpDownCaptioner) else model.decoder.output
    with torch.no_grad():
        output.bias[EOS] += eos_bias
        tokens = beam_search(model, inputs, bos=BOS, eos=EOS, beam_size=3, max_len=12).tokens
        output.bias[EOS] -= eos_bias
    lengths = (tokens != PAD).sum(-1).amax(-1)  # (B,) the image's longest beam
    return bool((tokens == EOS).any(-1).all(-1).any()) and int(lengths.min()) < int(lengths.max())


@pytest.mark.parametrize("overrides, seed", [
    ({}, 3), ({}, 4), ({"kind": "updown"}, 3), ({"kind": "updown"}, 4), (UPDOWN_CATT, 3), (UPDOWN_SLA, 3),
])
def test_beam_search_with_gradients_is_unchanged(overrides: dict, seed: int) -> None:
    """Transformer, Up-Down (LSTM rows selected by image, regions and the top-down compute-once cache by image),
    Up-Down + CATT (its dictionary cache kept) and Up-Down + SLA: the same beams, log-probs and gradients with
    finished images dropped. The EOS bias that makes some images end before others is searched for, not tuned to
    one set of random weights."""
    torch.manual_seed(0)
    model, inputs = tiny_captioner(seed=seed, **overrides), model_inputs(tiny_inputs(batch=4, seed=2))
    eos_bias = next((b / 20 for b in range(100) if ends_early(model, inputs, b / 20)), None)
    assert eos_bias is not None, "no EOS bias up to 5 ends some images before others"
    with torch.no_grad():
        (model.output if isinstance(model, UpDownCaptioner) else model.decoder.output).bias[EOS] += eos_bias
    full = beam_search(model, inputs, bos=BOS, eos=EOS, beam_size=3, max_len=12, grad=True)
    grads_full = torch.autograd.grad(full.log_probs.sum(), list(model.parameters()), allow_unused=True)
    fast = beam_search(ActiveImages(model, EOS), inputs, bos=BOS, eos=EOS, beam_size=3, max_len=12, grad=True)
    grads_fast = torch.autograd.grad(fast.log_probs.sum(), list(model.parameters()), allow_unused=True)
    lengths = (full.tokens != PAD).sum(-1).amax(-1)  # (B,) the image's longest beam
    assert int(lengths.min()) < int(lengths.max())  # images were dropped while others went on
    assert torch.equal(full.tokens, fast.tokens)
    assert torch.allclose(full.log_probs, fast.log_probs, atol=1e-6)
    for a, b in zip(grads_full, grads_fast):
        assert (a is None) == (b is None) and (a is None or torch.allclose(a, b, atol=1e-6))
