"""``eval.packed_output``: decoding through :class:`vlattn.decoding.PackedOutput`, whose vocabulary projection runs
as oneDNN's linear on a weight packed once (:class:`vlattn.layers.packed.PackedWeight`) — the same function as
``nn.Linear`` (float64 reference), taken only where no gradient is recorded, repacked when the weight changes, the
model left as it was, and the same beams as the plain projection for every captioner kind."""

from __future__ import annotations

import copy

import pytest
import torch
from tests.models.conftest import BOS, EOS, VOCAB, model_inputs, tiny_captioner, tiny_inputs
from torch import nn

import vlattn
from vlattn.decoding import PackedOutput, beam_search, greedy_decode, sample
from vlattn.decoding.active import ActiveImages
from vlattn.layers import packed
from vlattn.layers.packed import PackedWeight, packs

needs_onednn = pytest.mark.skipif(not packed.ONEDNN_LINEAR, reason="this torch build has no oneDNN linear")
KINDS = [{}, {"kind": "m2"}, {"kind": "updown"}, {"kind": "catt"}]


def reference(x: torch.Tensor, layer: nn.Linear) -> torch.Tensor:
    """x W^T + b in float64."""
    out = x.double() @ layer.weight.double().t()
    return out if layer.bias is None else out + layer.bias.double()


def linear(bias: bool = True, seed: int = 0) -> nn.Linear:
    torch.manual_seed(seed)
    return nn.Linear(64, 300, bias=bias)


@needs_onednn
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(1, 64), (10, 64), (50, 64), (4, 5, 64)])
def test_packed_weight_computes_the_linear_map(bias: bool, shape: tuple[int, ...]) -> None:
    layer, weight, x = linear(bias), PackedWeight(), torch.randn(*shape)
    with torch.no_grad():
        assert packs(layer, x)
        out = weight(layer, x)
    assert out.shape == (*shape[:-1], 300) and weight._packed is not None  # the packed weight was built and used
    assert torch.allclose(out.double(), reference(x, layer), rtol=1e-5, atol=1e-5)


@needs_onednn
def test_packed_weight_under_inference_mode_and_for_a_strided_input() -> None:
    layer, x = linear(), torch.randn(8, 128)[:, ::2]  # (8, 64), not contiguous
    with torch.inference_mode():
        out = PackedWeight()(layer, x)
    assert torch.allclose(out.double(), reference(x, layer), rtol=1e-5, atol=1e-5)


def test_packs_only_where_it_is_the_same_function() -> None:
    layer = linear()
    assert not packs(layer, torch.randn(3, 64, requires_grad=True))  # a gradient to record
    assert not packs(layer, torch.randn(3, 64))  # the weight's gradient
    with torch.no_grad():
        assert packs(layer, torch.randn(3, 64)) == packed.ONEDNN_LINEAR
        assert not packs(layer, torch.randn(3, 64, dtype=torch.float64))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert not packs(layer, torch.randn(3, 64))


@needs_onednn
def test_repacks_after_the_weight_changes() -> None:
    """An optimiser step or a loaded state dict changes the weight in place, or a new Parameter replaces it: the
    next call uses the new weight."""
    layer, weight, x = linear(), PackedWeight(), torch.randn(5, 64)
    with torch.no_grad():
        before = weight(layer, x)
        layer.weight.mul_(-2.0)  # in place, same storage
        after = weight(layer, x)
        assert torch.allclose(after.double(), reference(x, layer), rtol=1e-5, atol=1e-5)
        assert not torch.allclose(before, after)
        other = linear(seed=1)
        layer.load_state_dict(other.state_dict())
        assert torch.allclose(weight(layer, x).double(), reference(x, other), rtol=1e-5, atol=1e-5)
        layer.weight = nn.Parameter(torch.randn(300, 64))  # another Parameter (its storage may reuse the address)
        assert torch.allclose(weight(layer, x).double(), reference(x, layer), rtol=1e-5, atol=1e-5)


def test_gradients_take_the_models_own_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """With gradients recorded the wrapper's step is the model's: the same log-probs and gradients, bit for bit."""
    model, inputs = tiny_captioner(seed=3), model_inputs(tiny_inputs(batch=2, seed=4))
    calls = []
    original = PackedWeight.__call__
    monkeypatch.setattr(PackedWeight, "__call__", lambda self, layer, x: calls.append(1) or original(self, layer, x))
    results = []
    for generator in (model, PackedOutput(model)):
        beams = beam_search(generator, inputs, bos=BOS, eos=EOS, beam_size=2, max_len=5, grad=True)
        model.zero_grad()
        beams.log_probs.sum().backward()
        results.append((beams.log_probs.detach(), [p.grad.clone() for p in model.parameters()]))
    assert not calls
    assert torch.equal(results[0][0], results[1][0])
    assert all(torch.equal(a, b) for a, b in zip(results[0][1], results[1][1], strict=True))


@needs_onednn
def test_the_model_is_left_as_it_was() -> None:
    """No module is swapped and nothing is added to the model: same modules, state dict and parameters; copies
    and pickles of it work after packed decoding (the packed weight, an opaque oneDNN tensor, is the wrapper's)."""
    model = tiny_captioner(seed=2, tie_embeddings=True)
    modules = [(name, type(module)) for name, module in model.named_modules()]
    state = copy.deepcopy(model.state_dict())
    fast = PackedOutput(model)
    with torch.no_grad():
        greedy_decode(fast, model_inputs(tiny_inputs(batch=2)), bos=BOS, eos=EOS, max_len=4)
    assert fast.packed._packed is not None
    assert [(name, type(module)) for name, module in model.named_modules()] == modules
    assert model.output_projection.weight is model.word_embeddings.weight  # tied still
    assert model.state_dict().keys() == state.keys()
    assert all(torch.equal(model.state_dict()[k], v) for k, v in state.items())
    assert torch.equal(copy.deepcopy(model).output_projection.weight, model.output_projection.weight)


def test_refuses_a_model_without_the_split_step() -> None:
    with pytest.raises(TypeError, match="Identity.*output_projection or step_features"):
        PackedOutput(nn.Identity())


@needs_onednn
@pytest.mark.parametrize("overrides", KINDS, ids=lambda o: o.get("kind", "transformer"))
def test_same_beams_as_the_plain_projection(overrides: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tokens identical, log-probs to float rounding: beam search, greedy, and skipping finished images."""
    calls = []
    original = PackedWeight.__call__
    monkeypatch.setattr(PackedWeight, "__call__", lambda self, layer, x: calls.append(packs(layer, x))
                        or original(self, layer, x))
    model = tiny_captioner(seed=4, **overrides)
    fast = PackedOutput(model)
    inputs = model_inputs(tiny_inputs(batch=3, seed=5))
    with torch.no_grad():
        plain_beams = beam_search(model, inputs, bos=BOS, eos=EOS, beam_size=3, max_len=8)
        fast_beams = beam_search(fast, inputs, bos=BOS, eos=EOS, beam_size=3, max_len=8)
        steps = len(calls)
        active_beams = beam_search(ActiveImages(fast, EOS), inputs, bos=BOS, eos=EOS, beam_size=3, max_len=8)
        plain_greedy = greedy_decode(model, inputs, bos=BOS, eos=EOS, max_len=8)
        fast_greedy = greedy_decode(fast, inputs, bos=BOS, eos=EOS, max_len=8)
    assert model.output_projection.out_features == VOCAB
    assert steps == fast_beams.tokens.shape[-1] and all(calls)  # every step of every search went the packed way
    for beams in (fast_beams, active_beams):
        assert torch.equal(plain_beams.tokens, beams.tokens)
        assert torch.allclose(plain_beams.log_probs, beams.log_probs, atol=1e-5)
    assert torch.equal(plain_greedy, fast_greedy)


@needs_onednn
def test_samples_draw_from_the_same_distribution() -> None:
    model = tiny_captioner(seed=6, kind="updown")
    inputs = model_inputs(tiny_inputs(batch=2, seed=7))
    with torch.no_grad():
        drawn = [sample(generator, inputs, bos=BOS, eos=EOS, num_samples=2, max_len=6,
                        generator=torch.Generator().manual_seed(8)) for generator in (model, PackedOutput(model))]
    assert torch.equal(drawn[0].tokens, drawn[1].tokens)
    assert torch.allclose(drawn[0].log_probs, drawn[1].log_probs, atol=1e-5)


@needs_onednn
def test_the_public_captioner_packs_when_its_config_says_so(tiny_run, monkeypatch: pytest.MonkeyPatch) -> None:
    """``vlattn.load(...).caption(...)`` decodes through the wrapper exactly when ``eval.packed_output`` is on: the
    same captions, scores to float rounding."""
    calls = []
    original = PackedWeight.weight
    monkeypatch.setattr(PackedWeight, "weight", lambda self, layer: calls.append(1) or original(self, layer))
    captioner = vlattn.load(tiny_run, device="cpu")
    store = tiny_run.parent / "data" / "features"
    assert not captioner.config.eval.packed_output
    plain = captioner.caption(store=store)
    assert not calls
    captioner.config.eval.packed_output = True
    fast = captioner.caption(store=store)
    assert calls and [c.token_ids for c in fast] == [c.token_ids for c in plain]
    assert [c.score for c in fast] == pytest.approx([c.score for c in plain], abs=1e-4)
