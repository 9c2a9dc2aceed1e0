"""``eval.packed_output`` (vlattn.layers.packed): the vocabulary projection through oneDNN from a packed weight —
the same function as ``nn.Linear`` (float64 reference), taken only where no gradient is recorded, repacked when the
weight changes, and the same beams as the plain projection for every captioner family."""

from __future__ import annotations

import copy

import pytest
import torch
from tests.models.conftest import BOS, EOS, VOCAB, model_inputs, tiny_captioner, tiny_inputs
from torch import nn

from vlattn.decoding import beam_search, greedy_decode
from vlattn.layers import packed
from vlattn.layers.packed import PackedLinear, use_packed_output
from vlattn.models.transformer import OutputBuffers

needs_onednn = pytest.mark.skipif(not packed.ONEDNN_LINEAR, reason="this torch build has no oneDNN linear")


def reference(x: torch.Tensor, layer: nn.Linear) -> torch.Tensor:
    """x W^T + b in float64."""
    out = x.double() @ layer.weight.double().t()
    return out if layer.bias is None else out + layer.bias.double()


def packed_layer(bias: bool = True, seed: int = 0) -> PackedLinear:
    torch.manual_seed(seed)
    return PackedLinear(64, 300, bias=bias)


@needs_onednn
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(1, 64), (10, 64), (50, 64), (4, 5, 64)])
def test_packed_path_computes_the_linear_map(bias: bool, shape: tuple[int, ...]) -> None:
    layer, x = packed_layer(bias), torch.randn(*shape)
    with torch.no_grad():
        assert layer.packs(x)
        out = layer(x)
    assert out.shape == (*shape[:-1], 300) and layer._packed is not None  # the packed weight was built and used
    assert torch.allclose(out.double(), reference(x, layer), rtol=1e-5, atol=1e-5)


@needs_onednn
def test_packed_path_under_inference_mode_and_for_a_strided_input() -> None:
    layer, x = packed_layer(), torch.randn(8, 128)[:, ::2]  # (8, 64), not contiguous
    with torch.inference_mode():
        out = layer(x)
    assert torch.allclose(out.double(), reference(x, layer), rtol=1e-5, atol=1e-5)


def test_gradients_take_nn_linear_path() -> None:
    """With a gradient to record the layer is nn.Linear: its output and gradients are nn.Linear's bit for bit."""
    layer, x = packed_layer(), torch.randn(6, 64, requires_grad=True)
    plain = nn.Linear(64, 300)
    plain.load_state_dict(layer.state_dict())
    assert not layer.packs(x)
    out, expected = layer(x), plain(x)
    assert torch.equal(out, expected) and layer._packed is None
    out.square().sum().backward()
    grad_x = x.grad.clone()
    x.grad = None
    expected.square().sum().backward()
    assert torch.equal(grad_x, x.grad) and torch.equal(layer.weight.grad, plain.weight.grad)
    assert torch.equal(layer.bias.grad, plain.bias.grad)


def test_falls_back_outside_float32_cpu_without_autocast() -> None:
    layer = packed_layer()
    with torch.no_grad():
        assert not layer.packs(torch.randn(3, 64, dtype=torch.float64))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert not layer.packs(torch.randn(3, 64))
            assert layer(torch.randn(3, 64)).dtype == torch.bfloat16  # autocast's linear, as nn.Linear


@needs_onednn
def test_repacks_after_the_weight_changes() -> None:
    """An optimiser step or a loaded state dict changes the weight in place: the next call uses the new weight."""
    layer, x = packed_layer(), torch.randn(5, 64)
    with torch.no_grad():
        before = layer(x)
        layer.weight.mul_(-2.0)  # in place, same storage
        after = layer(x)
    assert torch.allclose(after.double(), reference(x, layer), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(before, after)
    other = packed_layer(seed=1)
    layer.load_state_dict(other.state_dict())
    with torch.no_grad():
        assert torch.allclose(layer(x).double(), reference(x, other), rtol=1e-5, atol=1e-5)


@needs_onednn
def test_repacks_for_a_new_parameter_and_copies_leave_the_packed_weight_behind() -> None:
    layer, x = packed_layer(), torch.randn(5, 64)
    with torch.no_grad():
        layer(x)
        layer.weight = nn.Parameter(torch.randn(300, 64))  # another Parameter (its storage may reuse the address)
        assert torch.allclose(layer(x).double(), reference(x, layer), rtol=1e-5, atol=1e-5)
        copied = copy.deepcopy(layer)  # the packed weight is an opaque oneDNN tensor: not copied, rebuilt
        assert copied._packed is None and torch.equal(copied(x), layer(x))


def test_swap_keeps_parameters_and_state_dict() -> None:
    model = tiny_captioner(seed=2, tie_embeddings=True)
    state = copy.deepcopy(model.state_dict())
    weight = model.decoder.output.weight
    use_packed_output(model, True)
    swapped = [name for name, module in model.named_modules() if isinstance(module, PackedLinear)]
    assert swapped == ["decoder.output"]
    assert model.decoder.output.weight is weight  # the same Parameter: tied to the word embedding still
    assert model.state_dict().keys() == state.keys()
    assert all(torch.equal(model.state_dict()[k], v) for k, v in state.items())
    assert use_packed_output(tiny_captioner(), False).decoder.output.__class__ is nn.Linear


@needs_onednn
@pytest.mark.parametrize("overrides", [{}, {"kind": "m2"}, {"kind": "updown"}, {"kind": "catt"}])
def test_same_beams_as_the_plain_projection(overrides: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tokens identical, log-probs to float rounding, beam search and greedy; the Transformer family's packed
    steps still write into the search's reused (R, V) buffers."""
    buffered = []
    original = OutputBuffers.log_softmax
    monkeypatch.setattr(OutputBuffers, "log_softmax",
                        lambda self, output, hidden: buffered.append(isinstance(output, PackedLinear))
                        or original(self, output, hidden))
    model = tiny_captioner(seed=4, **overrides)
    fast = use_packed_output(copy.deepcopy(model), True)
    inputs = model_inputs(tiny_inputs(batch=3, seed=5))
    calls = []
    output = next(m for m in fast.modules() if isinstance(m, PackedLinear))
    output.register_forward_hook(lambda module, args, out: calls.append(module.packs(args[0])))
    with torch.no_grad():
        plain_beams = beam_search(model, inputs, bos=BOS, eos=EOS, beam_size=3, max_len=8)
        fast_beams = beam_search(fast, inputs, bos=BOS, eos=EOS, beam_size=3, max_len=8)
        plain_greedy = greedy_decode(model, inputs, bos=BOS, eos=EOS, max_len=8)
        fast_greedy = greedy_decode(fast, inputs, bos=BOS, eos=EOS, max_len=8)
    assert output.out_features == VOCAB and calls and all(calls)  # every step went through the packed path
    assert torch.equal(plain_beams.tokens, fast_beams.tokens)
    assert torch.allclose(plain_beams.log_probs, fast_beams.log_probs, atol=1e-5)
    assert torch.equal(plain_greedy, fast_greedy)
    assert any(buffered) == (overrides.get("kind") != "updown")
