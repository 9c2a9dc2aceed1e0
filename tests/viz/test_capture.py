"""The attention recorder: weights captured at the model's own calls (decoding included), equal to the hand-computed
softmax on constructed cases, peaking where the construction puts the attention, and nothing left patched."""

from __future__ import annotations

import math

import torch
from registry_cases import BOS, EOS, FEATURE_DIM, PAD, VOCAB, model_inputs, tiny_inputs, tiny_model_config
from torch import nn

from vlattn.attention import AttentionDims, MultiHeadAttention
from vlattn.config import Spec
from vlattn.decoding import greedy_decode
from vlattn.models import build_captioner
from vlattn.viz import AttentionRecorder


def identity_attention(d: int = 4) -> MultiHeadAttention:
    """One head, W_q = W_k = W_v = W_o = I, no biases: logits q.k / sqrt(d)."""
    attention = MultiHeadAttention(AttentionDims(d, 1))
    with torch.no_grad():
        for linear in (attention.q_proj, attention.k_proj, attention.v_proj, attention.out_proj):
            linear.weight.copy_(torch.eye(d))
            linear.bias.zero_()
    return attention.eval()


def test_weights_are_the_softmax_of_the_call_and_the_result_is_unchanged() -> None:
    attention = identity_attention()
    query = torch.tensor([[[1.0, 0, 0, 0]]])  # (1, 1, 4)
    keys = torch.zeros(1, 5, 4)
    keys[0, 2, 0] = 6.0  # key 2 aligned with the query: logit 6 / sqrt(4) = 3, the others 0
    plain = attention(query, keys, keys).out
    with AttentionRecorder(nn.ModuleDict({"site": attention})) as recorder:
        result = attention(query, keys, keys)
    assert result.weights is None  # the caller did not ask for them
    torch.testing.assert_close(result.out, plain)
    (call,) = recorder.calls
    expected = torch.tensor([1.0, 1.0, math.exp(3.0), 1.0, 1.0])
    assert call.site == "site" and call.kind == "attention"
    torch.testing.assert_close(call.value, (expected / expected.sum()).view(1, 1, 1, 5))
    assert "attend" not in vars(attention)  # restored


def test_greedy_decoding_records_each_cross_site_once_per_step() -> None:
    torch.manual_seed(0)
    model = build_captioner(tiny_model_config("transformer"), VOCAB, pad_id=PAD).eval()
    inputs = model_inputs(tiny_inputs(batch=2, regions=6))  # image 1 has one padded region
    before = greedy_decode(model, inputs, bos=BOS, eos=EOS, max_len=5)
    with AttentionRecorder(model) as recorder:
        tokens = greedy_decode(model, inputs, bos=BOS, eos=EOS, max_len=5)
    assert torch.equal(tokens, before)
    sites = [s for s in recorder.sites("attention") if ".cross." in s]
    assert sites == ["decoder.layers.0.cross.attention", "decoder.layers.1.cross.attention"]
    for site in sites:
        calls = recorder.of("attention", site)
        assert len(calls) == tokens.shape[1]  # one call per decoding step
        for call in calls:
            assert call.value.shape == (2, 2, 1, 6)  # (images, heads, one query per image, regions)
            torch.testing.assert_close(call.value.sum(-1), torch.ones(2, 2, 1))
            assert (call.value[1, :, :, 5] == 0).all()  # the padded region gets no weight
    assert not any(name in vars(m) for m in model.modules() for name in ("attend", "forward", "gates", "trace"))


def test_a_dominant_region_peaks_in_the_top_down_attention() -> None:
    """Up-Down's additive attention with W_va reading feature 0 only and w_a > 0: the region whose feature 0 is
    largest gets most of the weight at every word."""
    torch.manual_seed(0)
    config = tiny_model_config("updown", decoder_cross_attention=Spec("additive"),
                               options={"embed_dim": 10, "attention_dim": 8})
    model = build_captioner(config, VOCAB, pad_id=PAD).eval()
    attention = model.attention
    with torch.no_grad():
        attention.key_proj.weight.zero_()
        attention.key_proj.weight[:, 0] = 1.0
        attention.key_proj.bias.zero_()
        attention.query_proj.weight.zero_()
        attention.query_proj.bias.zero_()
        attention.score.weight.fill_(1.0)
    inputs = model_inputs(tiny_inputs(batch=1, regions=6))
    inputs["features"] = torch.zeros(1, 6, FEATURE_DIM)
    inputs["features"][0, 3, 0] = 3.0  # region 3 dominates: tanh(3) * 8 against 0 for the others
    with AttentionRecorder(model) as recorder:
        greedy_decode(model, inputs, bos=BOS, eos=EOS, max_len=4)
    calls = recorder.of("attention", "attention")
    assert calls
    for call in calls:
        weights = call.value[0, 0, 0]  # (regions,)
        assert int(weights.argmax()) == 3 and float(weights[3]) > 0.99


def test_mechanism_extras_are_recorded() -> None:
    """M2's gates per level, SLA's every unit, CATT's two streams, GSA's geometric bias."""
    torch.manual_seed(0)
    inputs = model_inputs(tiny_inputs(batch=1, regions=6))
    m2 = build_captioner(tiny_model_config("m2", encoder_self_attention=Spec("memory", {"slots": 5})), VOCAB,
                         pad_id=PAD).eval()
    with AttentionRecorder(m2) as recorder:
        greedy_decode(m2, inputs, bos=BOS, eos=EOS, max_len=3)
    gates = recorder.of("gates")
    assert gates and gates[0].value.shape[0] == 2  # one gate per encoder level (2 layers)
    memory = recorder.of("attention", "encoder.layers.0.self_attn")[0].value
    assert memory.shape == (1, 2, 6, 6 + 5)  # the regions attend the regions, then the memory slots
    steps = len(recorder.of("gates", "decoder.layers.0.cross"))  # one gate call per layer and step
    assert steps >= 1 and len(gates) == 2 * steps  # two decoder layers
    # the meshed site attends each of the 2 encoder levels in turn: two calls per decoding step
    assert len(recorder.of("attention", "decoder.layers.0.cross.attention")) == 2 * steps
    sla = build_captioner(tiny_model_config("updown", decoder_cross_attention=Spec("sla", {"units": 3}),
                                            options={"embed_dim": 10, "attention_dim": 8}), VOCAB, pad_id=PAD).eval()
    with AttentionRecorder(sla) as recorder:
        greedy_decode(sla, inputs, bos=BOS, eos=EOS, max_len=3)
    units = recorder.of("units")
    assert units and units[0].value.shape[:2] == (3, 1)
    torch.testing.assert_close(units[0].value.sum(-1), torch.ones(units[0].value.shape[:-1]))
    catt = build_captioner(tiny_model_config("catt", options={"image_dictionary": {"size": 5},
                                                               "word_dictionary": {"size": 6}}), VOCAB,
                           pad_id=PAD).eval()
    with AttentionRecorder(catt) as recorder:
        greedy_decode(catt, inputs, bos=BOS, eos=EOS, max_len=3)
    streams = recorder.of("streams")
    assert streams and streams[0].value.shape[0] == 2 and (streams[0].value >= 0).all()
    gsa = build_captioner(tiny_model_config("transformer", encoder_self_attention=Spec("gsa")), VOCAB,
                          pad_id=PAD).eval()
    with AttentionRecorder(gsa) as recorder:
        greedy_decode(gsa, inputs, bos=BOS, eos=EOS, max_len=2)
    geometry = recorder.of("geometry")
    assert geometry and geometry[0].value.shape == (1, 2, 6, 6)


def test_calls_are_grouped_by_decoding_step() -> None:
    torch.manual_seed(0)
    model = build_captioner(tiny_model_config("transformer"), VOCAB, pad_id=PAD).eval()
    with AttentionRecorder(model) as recorder:
        tokens = greedy_decode(model, model_inputs(tiny_inputs(batch=1, regions=6)), bos=BOS, eos=EOS, max_len=4)
    assert len(recorder.steps) == tokens.shape[1]
    for index in range(len(recorder.steps)):
        sites = [c.site for c in recorder.step_calls(index)]
        # each step: both decoder layers' self- and cross-attention, once each
        assert sorted(sites) == sorted(f"decoder.layers.{i}.{s}" for i in (0, 1) for s in ("self_attn", "cross.attention"))
    assert "step" not in vars(model)
