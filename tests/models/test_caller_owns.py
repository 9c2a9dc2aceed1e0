"""What a decoding step returns belongs to the caller: a kept step's log-probabilities (or a view of them) are
never written over by a later step — for every captioner in the registry battery, plain and through the opt-in
decoding wrappers, called step by step and through the public decoding functions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from registry_cases import BOS, EOS, ModelCase, model_cases, model_inputs, tiny_inputs
from torch import Tensor

from vlattn.decoding import PackedOutput, beam_search, greedy_decode, sample
from vlattn.decoding.active import ActiveImages
from vlattn.models import MODELS

CASES = model_cases()
CAPTIONER_KINDS = sorted(kind for kind, entry in MODELS.items() if entry.task == "captioning")
WRAPPERS: dict[str, Callable[[Any], Any]] = {
    "plain": lambda model: model,
    "packed": PackedOutput,
    "packed+active": lambda model: ActiveImages(PackedOutput(model), EOS),
}


class Keeper:
    """A generator around ``generator`` that keeps, as a caller might, a view of every step's log-probabilities
    with a copy of their values at the time (the decoders drop the tensor itself before the next step)."""

    def __init__(self, generator: Any) -> None:
        self.generator = generator
        self.kept: list[tuple[Tensor, Tensor]] = []

    def encode(self, inputs: Any) -> Any:
        return self.generator.encode(inputs)

    def step(self, tokens: Tensor, state: Any) -> tuple[Tensor, Any]:
        log_probs, state = self.generator.step(tokens, state)
        view = log_probs[:, 3:]  # (R, V - 3): no special tokens
        self.kept.append((view, view.clone()))
        return log_probs, state

    def reorder(self, state: Any, index: Tensor) -> Any:
        return self.generator.reorder(state, index)

    def check(self) -> None:
        """Every kept view still holds its step's values, and the steps' values differ (so a buffer written over
        by a later step would show)."""
        assert len(self.kept) > 2
        for view, values in self.kept:
            assert torch.equal(view, values)
        assert not torch.equal(self.kept[1][1][:1], self.kept[2][1][:1])


@pytest.mark.parametrize("wrapper", ["plain", "packed"])
@pytest.mark.parametrize("use_cache", [True, False], ids=["cached", "uncached"])
@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_a_kept_step_is_not_overwritten_by_the_next(case: ModelCase, use_cache: bool, wrapper: str) -> None:
    model, inputs = case.build(), tiny_inputs()
    generator, tokens = WRAPPERS[wrapper](model), inputs["tokens"]
    state = model.encode(model_inputs(inputs), use_cache=use_cache)
    kept = []
    with torch.no_grad():
        for t in range(1, 5):
            log_probs, state = generator.step(tokens[:, :t], state)
            kept.append((log_probs[1], log_probs.clone()))  # a view of a row (not the tensor), the values
            del log_probs
    for row, values in kept:
        assert torch.equal(row, values[1])
    assert not torch.equal(kept[0][1], kept[1][1])


@pytest.mark.parametrize("wrapper", list(WRAPPERS))
@pytest.mark.parametrize("kind", CAPTIONER_KINDS)
def test_public_decoding_leaves_what_it_handed_out_alone(kind: str, wrapper: str) -> None:
    """Each step of beam search, greedy decoding and sampling hands out log-probs the next step leaves alone, and
    a search's results are unchanged by the next search with the same generator."""
    model = ModelCase(kind).build(seed=1)
    generator = WRAPPERS[wrapper](model)
    inputs, others = model_inputs(tiny_inputs(seed=2)), model_inputs(tiny_inputs(seed=3))
    kwargs = {"bos": BOS, "eos": EOS, "max_len": 6}
    with torch.no_grad():
        for decode in (
            lambda g, x: beam_search(g, x, beam_size=3, **kwargs),
            lambda g, x: greedy_decode(g, x, **kwargs),
            lambda g, x: sample(g, x, num_samples=2, generator=torch.Generator().manual_seed(4), **kwargs),
        ):
            keeper = Keeper(generator)
            first = decode(keeper, inputs)
            keeper.check()
            held = [t.clone() for t in (first if isinstance(first, tuple) else (first,))]
            decode(generator, others)
            assert all(torch.equal(t, h) for t, h in zip(first if isinstance(first, tuple) else (first,), held))
