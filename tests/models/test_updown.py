"""The Up-Down captioner's own checks (the registry battery covers shapes, padding, causality, gradients, state
dict, cached = uncached decoding and reordering for it with every top-down mechanism): Eq. 2-7 against a
reference written out by hand, the self-critical variant's layer structure, the top-down site's refusals, the
compute-once cache, SCST through it, and the presets."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from registry_cases import BOS, EOS, FEATURE_DIM, PAD, VOCAB, model_inputs, tiny_inputs, tiny_model_config
from torch import nn

from vlattn.attention import StaticKVCache, build_attention
from vlattn.attention.catt import AdditiveCausalAttention
from vlattn.config import Spec
from vlattn.validation import load_valid_config, valid_config
from vlattn.decoding import beam_search, greedy_decode
from vlattn.errors import ConfigError
from vlattn.models import UpDownCaptioner, build_captioner
from vlattn.models.profile import flops_decode_step, trainable
from vlattn.training.scst import scst_objective


def updown(seed: int = 0, **overrides) -> UpDownCaptioner:
    torch.manual_seed(seed)
    overrides.setdefault("decoder_cross_attention", Spec("additive"))
    overrides.setdefault("options", {"embed_dim": 10, "attention_dim": 8})
    return build_captioner(tiny_model_config("updown", **overrides), VOCAB, pad_id=PAD).eval()


def lstm_cell(cell: nn.LSTMCell, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """An LSTM step written out: gates i, f, g, o (torch's order)."""
    gates = x @ cell.weight_ih.T + cell.bias_ih + h @ cell.weight_hh.T + cell.bias_hh
    i, f, g, o = gates.chunk(4)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


def test_teacher_forcing_follows_equations_2_to_7() -> None:
    """x1 = [h2, mean of the real regions, W_e w]; h1 = LSTM1; v_hat = sum softmax(w_a tanh(W_va v + W_ha h1)) v;
    h2 = LSTM2([v_hat, h1]); logits = W_p h2 + b_p — one image and one word at a time."""
    model, inputs = updown(), tiny_inputs()
    attention = model.attention
    with torch.no_grad():
        logits = model(model_inputs(inputs), inputs["tokens"])
        for b in range(3):
            v = inputs["features"][b, inputs["region_mask"][b]]  # (n, D) real regions only
            v_bar = v.mean(0)
            h1 = c1 = h2 = c2 = torch.zeros(16)
            for t, word in enumerate(inputs["tokens"][b]):
                h1, c1 = lstm_cell(model.attention_lstm, torch.cat([h2, v_bar, model.embed.weight[word]]), h1, c1)
                scores = attention.score(torch.tanh(attention.key_proj(v) + attention.query_proj(h1))).squeeze(-1)
                v_hat = torch.softmax(scores, 0) @ v
                h2, c2 = lstm_cell(model.language_lstm, torch.cat([v_hat, h1]), h2, c2)
                torch.testing.assert_close(logits[b, t], model.output(h2))


def self_critical_count(vocab_rows: int, embed: int, hidden: int, attention: int, features: int) -> int:
    """self-critical.pytorch's UpDownModel, layer by layer (AttModel.py): embed, fc_embed, att_embed, logit,
    ctx2att, core.att_lstm, core.lang_lstm, core.attention.h2att, core.attention.alpha_net."""
    lstm = lambda inputs: 4 * hidden * (inputs + hidden) + 2 * 4 * hidden  # noqa: E731 (LSTMCell: two biases)
    return (
        vocab_rows * embed
        + 2 * (features * hidden + hidden)
        + hidden * vocab_rows + vocab_rows
        + hidden * attention + attention
        + lstm(embed + 2 * hidden)
        + lstm(2 * hidden)
        + hidden * attention + attention
        + attention + 1
    )


def test_self_critical_variant_has_the_layers_of_self_critical_pytorch() -> None:
    model = updown(options={"variant": "self_critical", "embed_dim": 10, "attention_dim": 8})
    assert trainable(model) == self_critical_count(VOCAB, 10, 16, 8, FEATURE_DIM)
    assert model.attention.out_dim == 16  # attention over the embedded regions (size M)
    # ReLU after the word embedding: a negative embedding row acts as zeros
    with torch.no_grad():
        model.embed.weight[5] = -1.0
        model.embed.weight[6] = -2.0
        inputs = tiny_inputs()
        first = model(model_inputs(inputs), torch.full((3, 1), 5))
        torch.testing.assert_close(first, model(model_inputs(inputs), torch.full((3, 1), 6)))


def test_box_input_and_tied_output() -> None:
    model = updown(box_input=True, tie_embeddings=True, options={"embed_dim": 16, "attention_dim": 8})
    assert model.output.weight is model.embed.weight
    assert model.attention.key_proj.in_features == FEATURE_DIM + 5
    inputs = tiny_inputs()
    moved = inputs["boxes"].roll(1, dims=1)
    assert not torch.allclose(model(model_inputs({**inputs, "boxes": moved}), inputs["tokens"]),
                              model(model_inputs(inputs), inputs["tokens"]))


@pytest.mark.parametrize(("variant", "zero_channels"), [("paper", 5), ("self_critical", 0)])
def test_catt_dictionary_with_box_input(variant: str, zero_channels: int) -> None:
    """BUTD+CATT with box channels: over the raw regions (paper) the image dictionary keeps the feature width and
    zero box channels, so k-means can fit it over the training regions; over the embedded regions (self_critical)
    the site's keys have no box channels and the entries their full width. The boxes reach IS-ATT only."""
    site = Spec("catt_additive", {"dictionary": {"size": 4}})
    model = updown(box_input=True, decoder_cross_attention=site,
                   options={"variant": variant, "embed_dim": 10, "attention_dim": 8})
    dictionary = model.attention.dictionary
    key_dim = FEATURE_DIM + 5 if variant == "paper" else 16
    assert dictionary.zero_channels == zero_channels
    assert dictionary.entries.shape == (4, key_dim - zero_channels) and dictionary().shape == (4, key_dim)
    assert not dictionary()[:, key_dim - zero_channels:].any()
    assert model.language_lstm.input_size == 2 * key_dim + 16  # [Z^; X^; h^1]
    inputs = tiny_inputs()
    with torch.no_grad():
        logits = model(model_inputs(inputs), inputs["tokens"])
        state = model.encode(model_inputs(inputs))
        for t in range(inputs["tokens"].shape[1]):
            log_probs, state = model.step(inputs["tokens"][:, : t + 1], state)
            torch.testing.assert_close(log_probs, logits[:, t].log_softmax(-1))


@pytest.mark.parametrize(
    ("variant", "overrides", "attention", "words"),
    [
        ("paper", {}, 0.0, None),  # the paper and the Caffe code: no dropout on the weights or the words
        ("self_critical", {}, 0.0, 0.1),  # self-critical.pytorch: model.dropout after the word embedding
        ("paper", {"attention_dropout": 0.3, "embedding_dropout": 0.2}, 0.3, 0.2),
        ("self_critical", {"embedding_dropout": 0.0}, 0.0, 0.0),
    ],
)
def test_attention_and_embedding_dropout_options(variant, overrides, attention, words) -> None:
    model = updown(dropout=0.1, options={"variant": variant, "embed_dim": 10, "attention_dim": 8}, **overrides)
    assert model.attention.dropout == attention
    word_dropouts = [m.p for m in model.word_input.modules() if isinstance(m, nn.Dropout)]
    assert word_dropouts == ([] if words is None else [words])


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ({"decoder_cross_attention": {"name": "mha"}},
         r"model\.decoder_cross_attention: the Up-Down top-down site needs a mechanism that takes queries of another size"),
        ({"decoder_cross_attention": {"name": "sla", "options": {"units": 0}}},
         r"model\.decoder_cross_attention\.options\.units: must be >= 1"),
        ({"tie_embeddings": True}, r"model\.tie_embeddings: the output layer \(16\) and the word embedding"),
        ({"options": {"variant": "caffe"}}, r"model\.options\.variant: 'caffe' is not one of: paper, self_critical"),
    ],
)
def test_config_errors_name_the_key(model, message) -> None:
    data = {"kind": "updown", "d_model": 16, "decoder_cross_attention": {"name": "additive"},
            "options": {"embed_dim": 8, "attention_dim": 8}}
    with pytest.raises(ConfigError, match=message):
        valid_config({"model": {**data, **model}})


@pytest.mark.parametrize("mechanism", ["additive", "sla"])
def test_cached_decoding_projects_the_regions_once(mechanism: str) -> None:
    model = updown(decoder_cross_attention=Spec(mechanism))
    inputs = model_inputs(tiny_inputs())
    calls = []
    project = model.attention.project_key_value
    model.attention.project_key_value = lambda key, value: calls.append(key.shape[0]) or project(key, value)
    cached = beam_search(model, inputs, bos=BOS, eos=EOS, beam_size=3, max_len=6)
    assert calls == [3]  # once, for the three images, before the state is expanded to beams
    model.use_cache = False
    uncached = beam_search(model, inputs, bos=BOS, eos=EOS, beam_size=3, max_len=6)
    assert len(calls) > 6  # re-projected at every step
    torch.testing.assert_close(cached.tokens, uncached.tokens)
    torch.testing.assert_close(cached.scores, uncached.scores)


def test_scst_trains_through_beam_search() -> None:
    """SCST (M2's beam variant) runs unchanged: a differentiable beam search over the cached state."""
    model = updown(decoder_cross_attention=Spec("sla")).train()
    vocab = type("Vocab", (), {"BOS": BOS, "EOS": EOS, "PAD": PAD})()
    reward = lambda tokens, ids: tokens.float().sum(1)  # noqa: E731 (differs between beams)
    objective = scst_objective(reward=reward, vocab=vocab, sampling="beam", baseline="mean", num_samples=3, max_len=6)
    batch = {**model_inputs(tiny_inputs()), "image_ids": torch.arange(3)}
    loss, logs = objective(model, batch)
    loss.backward()
    assert torch.isfinite(loss) and "reward" in logs
    assert model.attention.units[0].key_proj.weight.grad.abs().sum() > 0
    assert greedy_decode(model.eval(), model_inputs(tiny_inputs()), bos=BOS, eos=EOS, max_len=5).shape[0] == 3


REDUCED = ["model.d_model=32", f"model.feature_dim={FEATURE_DIM}", "model.options.embed_dim=16", "model.options.attention_dim=8"]


def test_catt_demo_preset_is_the_demo_with_catt_at_the_top_down_site() -> None:
    """vlattn/presets/updown-catt-demo.yaml: vlattn/presets/updown-demo.yaml except the top-down site (BUTD+CATT, 100 entries);
    the extra parameters are the dictionary (100 x 512, no box channels), CS-ATT's own additive attention and the
    language LSTM's input widened by one attended vector (517 channels)."""
    demo, catt = load_valid_config("updown-demo"), load_valid_config("updown-catt-demo")
    assert replace(catt.model, decoder_cross_attention=demo.model.decoder_cross_attention) == demo.model
    assert (catt.data, catt.train, catt.eval) == (demo.data, demo.train, demo.eval)
    assert catt.model.decoder_cross_attention.name == "catt_additive"
    base, model = build_captioner(demo.model, 40), build_captioner(catt.model, 40)
    regions, lstm = 512 + 5, 256
    additive = trainable(build_attention("additive", d_model=128, query_dim=lstm, key_dim=regions))
    assert trainable(model) - trainable(base) == 100 * 512 + additive + 4 * lstm * regions


@pytest.mark.parametrize("preset", ["updown", "updown-sla", "updown-catt"])
def test_presets_build(preset: str) -> None:
    cfg = load_valid_config(preset, REDUCED)
    model = build_captioner(cfg.model, 40)
    assert isinstance(model, UpDownCaptioner)
    assert len(getattr(model.attention, "units", [])) == (3 if "sla" in preset else 0)


def test_butd_catt_preset_is_up_down_with_one_causal_attention_module() -> None:
    """vlattn/presets/updown-catt.yaml (supplementary Sec. 9) at reduced widths: IS-ATT additive over the regions and an
    unshared additive CS-ATT over 1000 dictionary entries in the region space, both outputs into the language LSTM
    (input 2D + M); one teacher-forced pass gives finite log-probabilities."""
    cfg = load_valid_config("updown-catt", REDUCED)
    model = build_captioner(cfg.model, VOCAB, pad_id=PAD)
    attention = model.attention
    assert isinstance(attention, AdditiveCausalAttention) and attention.cross_sample is not None
    assert tuple(attention.dictionary.entries.shape) == (1000, FEATURE_DIM)
    assert model.language_lstm.input_size == 2 * FEATURE_DIM + 32
    inputs = tiny_inputs()
    logits = model.eval()(model_inputs(inputs), inputs["tokens"])
    assert logits.shape == (*inputs["tokens"].shape, VOCAB) and torch.isfinite(logits).all()


def test_cached_step_needs_every_token_so_far() -> None:
    model, inputs = updown(), tiny_inputs()
    state = model.encode(model_inputs(inputs))
    _, state = model.step(inputs["tokens"][:, :1], state)
    with pytest.raises(ValueError, match="the state has consumed 1 tokens, so it needs 2, got 3"):
        model.step(inputs["tokens"][:, :3], state)


def test_catt_decoding_step_flops_add_the_cross_sample_attention_and_the_wider_language_lstm() -> None:
    """BUTD+CATT under `vlattn profile`'s FLOP counter (regression: the decoding step's no-grad dictionary view
    made torch's module tracker fail). One cached step costs Up-Down's plus, counted by hand: CS-ATT over the K
    entries (W_q 2 B M A, w 2 B K A, the weighted sum 2 B K D; W_k over the dictionary is cached) and the language
    LSTM's input widened by the D-d X^ (2 B 4M D)."""
    batch, entries, hidden, attention = 3, 7, 16, 8
    shapes = dict(batch=batch, regions=5, length=4, feature_dim=FEATURE_DIM, vocab=VOCAB)
    base = flops_decode_step(updown(), **shapes)
    catt = updown(decoder_cross_attention=Spec("catt_additive", {"dictionary": {"size": entries, "init": "random"}}))
    extra = (2 * batch * hidden * attention + 2 * batch * entries * attention + 2 * batch * entries * FEATURE_DIM
             + 2 * batch * 4 * hidden * FEATURE_DIM)
    assert flops_decode_step(catt, **shapes) == base + extra


def test_catt_projects_the_dictionary_once_per_pass() -> None:
    """CS-ATT's projection of the (sample-independent) dictionary, W_k D, is made once per teacher-forced pass and
    once per decoding, not at every word; the entries' gradients through that one projection equal those of a pass
    that projects at every word."""
    model = updown(decoder_cross_attention=Spec("catt_additive", {"dictionary": {"size": 7, "init": "random"}}))
    cross, inputs = model.attention.cross_sample, tiny_inputs()
    calls = []
    project = cross.project_key_value
    cross.project_key_value = lambda key, value: calls.append(key.shape) or project(key, value)
    model(model_inputs(inputs), inputs["tokens"]).logsumexp(-1).sum().backward()
    assert calls == [(1, 7, FEATURE_DIM)]  # the batch of one, for all 7 words
    once = model.attention.dictionary.entries.grad.clone()
    model.zero_grad()
    regions = model.read_regions(model_inputs(inputs))
    model.output(model.run(inputs["tokens"], regions, StaticKVCache())).logsumexp(-1).sum().backward()  # no CS cache
    assert len(calls) == 1 + inputs["tokens"].shape[1]
    torch.testing.assert_close(model.attention.dictionary.entries.grad, once)
    calls.clear()
    beam_search(model, model_inputs(inputs), bos=BOS, eos=EOS, beam_size=3, max_len=6)
    assert calls == [(1, 7, FEATURE_DIM)]


def test_score_bias_only_in_the_self_critical_layout() -> None:
    """Eq. 3's w_a has no bias (a constant added to every logit cancels in the softmax, so it could never learn);
    self-critical.pytorch's alpha_net has one, so the self_critical variant keeps it, and an explicit option wins."""
    assert updown().attention.score.bias is None
    self_critical = updown(options={"variant": "self_critical", "embed_dim": 10, "attention_dim": 8})
    assert self_critical.attention.score.bias is not None
    explicit = updown(decoder_cross_attention=Spec("additive", {"score_bias": True}))
    assert explicit.attention.score.bias is not None
    # the bias shifts every logit alike: the captions' log-probabilities do not depend on it
    inputs = tiny_inputs()
    before = self_critical(model_inputs(inputs), inputs["tokens"]).log_softmax(-1)
    with torch.no_grad():
        self_critical.attention.score.bias.add_(3.0)
    torch.testing.assert_close(self_critical(model_inputs(inputs), inputs["tokens"]).log_softmax(-1), before)
