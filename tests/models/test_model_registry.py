"""Every model kind, and the Transformer with every mechanism at every site that mechanism allows: shapes,
no NaN, padding, causality, gradients to every parameter, state-dict round trip, cached decoding equal to
uncached decoding and to teacher forcing, beam reordering. Plus the Transformer's own checks."""

from __future__ import annotations

import pytest
import torch
from registry_cases import BOS, EOS, FEATURE_DIM, PAD, VOCAB, ModelCase, model_cases, model_inputs, tiny_inputs, tiny_model_config

from vlattn.config import ModelConfig
from vlattn.validation import load_valid_config
from vlattn.attention import reorder_state
from vlattn.decoding import beam_search, forced_decode, greedy_decode, sample
from vlattn.errors import ConfigError
from vlattn.layers import PostNorm, build_feed_forward
from vlattn.models import EncoderLayer, TransformerEncoder, build_captioner, check_model_config
from vlattn.models.encoder import region_projection
from vlattn.attention import build_attention

CASES = model_cases()


@pytest.fixture(params=CASES, ids=[case.id for case in CASES])
def case(request: pytest.FixtureRequest) -> ModelCase:
    return request.param


def logits_of(model, inputs, **changes):
    inputs = {**inputs, **changes}
    return model(model_inputs(inputs), inputs["tokens"])


def test_forward_shape_and_finite(case: ModelCase) -> None:
    model, inputs = case.build(), tiny_inputs()
    logits = logits_of(model, inputs)
    assert logits.shape == (3, 7, VOCAB) and torch.isfinite(logits).all()


def test_padded_regions_change_nothing(case: ModelCase) -> None:
    model, inputs = case.build(), tiny_inputs()
    mask = inputs["region_mask"]
    noisy = inputs["features"] + 50.0 * torch.randn_like(inputs["features"]) * ~mask[..., None]
    odd_boxes = torch.where(mask[..., None], inputs["boxes"], torch.rand_like(inputs["boxes"]))
    torch.testing.assert_close(logits_of(model, inputs, features=noisy, boxes=odd_boxes), logits_of(model, inputs))
    # and the mask is real: the same change without it alters the outputs
    no_mask = torch.ones_like(mask)
    assert not torch.allclose(logits_of(model, inputs, features=noisy, region_mask=no_mask),
                              logits_of(model, inputs, region_mask=no_mask))


def test_no_causal_leak(case: ModelCase) -> None:
    model, inputs = case.build(), tiny_inputs()
    tokens = inputs["tokens"].clone()
    tokens[:, 4:] = torch.randint(3, VOCAB, tokens[:, 4:].shape)
    before, after = logits_of(model, inputs), logits_of(model, inputs, tokens=tokens)
    torch.testing.assert_close(after[:, :4], before[:, :4])
    assert not torch.allclose(after[:, 4:], before[:, 4:])


def test_gradients_reach_every_parameter(case: ModelCase) -> None:
    model, inputs = case.build().train(), tiny_inputs()
    logits_of(model, inputs).logsumexp(-1).sum().backward()
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name


def test_word_embeddings_are_exposed(case: ModelCase) -> None:
    """Data-dependent initialisation (``prepare`` hooks) reads every captioner's word embedding table."""
    embeddings = case.build().word_embeddings
    assert isinstance(embeddings, torch.nn.Embedding) and embeddings.num_embeddings == VOCAB


def test_state_dict_round_trip(case: ModelCase) -> None:
    model, other, inputs = case.build(seed=0), case.build(seed=9), tiny_inputs()
    assert not torch.allclose(logits_of(other, inputs), logits_of(model, inputs))
    other.load_state_dict(model.state_dict())
    torch.testing.assert_close(logits_of(other, inputs), logits_of(model, inputs))


def test_cached_steps_equal_uncached_and_teacher_forcing(case: ModelCase) -> None:
    model, inputs = case.build(), tiny_inputs()
    tokens = inputs["tokens"]
    teacher = logits_of(model, inputs).log_softmax(-1)  # (B, T, V)
    cached, uncached = model.encode(model_inputs(inputs)), model.encode(model_inputs(inputs), use_cache=False)
    assert cached.cache is not None and uncached.cache is None
    for t in range(1, tokens.shape[1] + 1):
        with_cache, cached = model.step(tokens[:, :t], cached)
        without, uncached = model.step(tokens[:, :t], uncached)
        torch.testing.assert_close(with_cache, without)
        torch.testing.assert_close(with_cache, teacher[:, t - 1])


@pytest.mark.parametrize("beam_size", [1, 3])
def test_cached_decoding_equals_uncached(case: ModelCase, beam_size: int) -> None:
    model, inputs = case.build(), model_inputs(tiny_inputs())
    results = {}
    for use_cache in (True, False):
        model.use_cache = use_cache
        results[use_cache] = (
            greedy_decode(model, inputs, bos=BOS, eos=EOS, max_len=8),
            beam_search(model, inputs, bos=BOS, eos=EOS, beam_size=beam_size, max_len=8),
        )
    torch.testing.assert_close(results[True][0], results[False][0])
    for field in ("tokens", "log_probs", "scores"):
        torch.testing.assert_close(getattr(results[True][1], field), getattr(results[False][1], field))


def test_forced_decoding_retraces_the_best_beam(case: ModelCase) -> None:
    """Stepping through the best beam's caption gives its words' log-probabilities (those beam search recorded, and
    those of one teacher-forced forward pass) and, at length penalty 0, its score."""
    model, inputs = case.build(), model_inputs(tiny_inputs())
    beams = beam_search(model, inputs, bos=BOS, eos=EOS, beam_size=3, max_len=8, length_penalty=0.0)
    best = beams.tokens[:, 0]  # (B, L)
    forced = forced_decode(model, inputs, best, bos=BOS, eos=EOS, pad=PAD)
    length = forced.tokens.shape[-1]
    assert torch.equal(forced.tokens[:, 0], best[:, :length]) and bool((best[:, length:] == PAD).all())
    torch.testing.assert_close(forced.log_probs[:, 0], beams.log_probs[:, 0, :length], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(forced.log_probs[:, 0].sum(-1), beams.scores[:, 0], atol=1e-5, rtol=1e-5)
    tokens = forced.tokens[:, 0]
    prefix = torch.cat([torch.full_like(tokens[:, :1], BOS), tokens[:, :-1]], dim=1)
    teacher = model(inputs, prefix).log_softmax(-1).gather(2, tokens[..., None]).squeeze(2)  # (B, L)
    after_eos = (tokens == EOS).long().cumsum(1) - (tokens == EOS).long() > 0
    torch.testing.assert_close(forced.log_probs[:, 0], teacher.masked_fill(after_eos, 0.0), atol=1e-5, rtol=1e-5)


class Recompute:
    """The reference decoder: one full teacher-forced forward per step over the whole prefix, with every row's
    image inputs copied per row (no cache, no per-image sharing: the layout before issue 17)."""

    def __init__(self, model) -> None:
        self.model = model

    def encode(self, inputs):
        return dict(inputs)

    def step(self, tokens, state):
        return self.model(state, tokens)[:, -1].log_softmax(-1), state

    def reorder(self, state, index):
        return reorder_state(state, index)


def test_decoders_equal_a_full_recompute_per_step(case: ModelCase) -> None:
    model, inputs = case.build(), model_inputs(tiny_inputs())
    reference = Recompute(model)
    kwargs = {"bos": BOS, "eos": EOS, "max_len": 6}
    beams, expected = (beam_search(m, inputs, beam_size=3, **kwargs) for m in (model, reference))
    assert torch.equal(beams.tokens, expected.tokens)
    torch.testing.assert_close(beams.scores, expected.scores)
    torch.testing.assert_close(beams.log_probs, expected.log_probs)
    assert torch.equal(greedy_decode(model, inputs, **kwargs), greedy_decode(reference, inputs, **kwargs))
    drawn, drawn_expected = (
        sample(m, inputs, num_samples=2, generator=torch.Generator().manual_seed(3), **kwargs) for m in (model, reference)
    )
    assert torch.equal(drawn.tokens, drawn_expected.tokens)
    torch.testing.assert_close(drawn.log_probs, drawn_expected.log_probs)


@pytest.mark.parametrize("case", [c for c in CASES if not c.sites],
                         ids=lambda c: c.id)
def test_gradients_of_decoding_equal_a_full_recompute(case: ModelCase) -> None:
    # SCST differentiates the beams' and samples' log-probs: the cache appends by concatenation under autograd.
    # In float64: in float32 the two summation orders differ by ~1e-5 on some gradients (CATT's fused classifier)
    model = case.build().double()
    inputs = {name: x.double() if x.is_floating_point() else x for name, x in model_inputs(tiny_inputs()).items()}
    grads = []
    for generator in (model, Recompute(model)):
        beams = beam_search(generator, inputs, bos=BOS, eos=EOS, beam_size=2, max_len=5, grad=True)
        drawn = sample(generator, inputs, bos=BOS, eos=EOS, num_samples=2, max_len=5,
                       generator=torch.Generator().manual_seed(3))
        model.zero_grad()
        (beams.log_probs.sum() + drawn.log_probs.sum()).backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for cached, recomputed in zip(*grads, strict=True):
        torch.testing.assert_close(cached, recomputed)


def test_reorder_follows_rows_within_images(case: ModelCase) -> None:
    # two rows per image with different histories, then rows chosen among their own image's rows (as beam
    # search does): every row's next log-probs are those of its own prefix under teacher forcing
    model, inputs = case.build(), tiny_inputs()
    images, tokens = inputs["tokens"].shape[0], inputs["tokens"]
    other = torch.cat([tokens[:, :1], torch.randint(3, VOCAB, tokens[:, 1:].shape, generator=torch.Generator().manual_seed(5))], 1)
    histories = torch.stack([tokens, other], 1).flatten(0, 1)  # (2B, T): row 2i = image i's tokens, 2i + 1 = other
    state = model.encode(model_inputs(inputs))
    _, state = model.step(tokens[:, :1], state)
    state = model.reorder(state, torch.arange(images).repeat_interleave(2))
    for t in range(2, 4):
        _, state = model.step(histories[:, :t], state)
    index = torch.tensor([1, 0, 2, 2, 5, 4])  # swap image 0's rows, duplicate image 1's first, swap image 2's
    state = model.reorder(state, index)
    log_probs, _ = model.step(histories[index, :4], state)
    repeated = {key: value.repeat_interleave(2, 0) for key, value in model_inputs(inputs).items()}
    expected = model(repeated, histories).log_softmax(-1)[index, 3]
    torch.testing.assert_close(log_probs, expected)
    with pytest.raises(ValueError, match="its own image"):
        model.reorder(state, torch.tensor([2, 3, 0, 1, 4, 5]))  # images 0 and 1 swapped


# --- the Transformer's own checks ---------------------------------------------------------------------------------


def tiny_captioner(**overrides):
    torch.manual_seed(0)
    return build_captioner(tiny_model_config(**overrides), VOCAB, pad_id=PAD).eval()


def test_sinusoidal_positions_are_not_saved() -> None:
    assert not any("positions" in key for key in tiny_captioner().state_dict())


def test_output_layer_options() -> None:
    tied = tiny_captioner(tie_embeddings=True, output_bias=False)
    assert tied.decoder.output.weight is tied.decoder.embed.weight and tied.decoder.output.bias is None
    untied = tiny_captioner()
    assert untied.decoder.output.weight is not untied.decoder.embed.weight
    assert untied.decoder.output.bias is not None


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"kind": "nope"}, r"model\.kind: unknown model kind 'nope'; valid names: .*transformer"),
        ({"options": {"x": 1}}, r"unknown config key model\.options\.x"),
        ({"encoder_self_attention": {"name": "nope"}}, r"model\.encoder_self_attention: unknown attention mechanism"),
        ({"decoder_self_attention": {"name": "additive"}}, r"model\.decoder_self_attention: attention 'additive' is not allowed"),
        ({"feed_forward": {"name": "nope"}}, r"model\.feed_forward: unknown feed-forward 'nope'"),
        ({"num_heads": 3}, r"model\.encoder_self_attention: attention 'mha' d_model 16 is not divisible by num_heads 3"),
        ({"dropout": 1.0}, r"model\.dropout: must be < 1\.0"),
        ({"d_model": 0}, r"model\.d_model: must be >= 1"),
    ],
)
def test_config_errors_name_the_key_at_load_time(overrides, message) -> None:
    data = {"model": {"kind": "transformer", "d_model": 16, "num_heads": 2, **overrides}}
    from vlattn.validation import valid_config

    with pytest.raises(ConfigError, match=message):
        valid_config(data)


def test_validation_builds_nothing_real(monkeypatch: pytest.MonkeyPatch) -> None:
    # a large M2 (42 GiB of float32 weights at 100,000 words) validates on the meta device: no weights are
    # allocated; where the memory available is smaller, it is refused from that structure alone
    from vlattn.models import footprint

    cfg = ModelConfig(kind="m2", d_model=4096, d_ff=16384, encoder_layers=12, decoder_layers=12)
    monkeypatch.setattr(footprint, "available_memory", lambda: 1 << 50)
    check_model_config(cfg, 100_000)
    monkeypatch.setattr(footprint, "available_memory", lambda: 1 << 30)
    with pytest.raises(ConfigError, match=r"model\.d_model=4096: the model's weights need 42\.1 GiB, more than the "
                                          r"1\.0 GiB of memory available"):
        check_model_config(cfg, 100_000)


def test_encoder_layers_are_assembled_from_injected_parts() -> None:
    torch.manual_seed(0)
    layers = [
        EncoderLayer(build_attention("mha", d_model=16, num_heads=2), build_feed_forward("plain", 16, 32),
                     PostNorm(16), PostNorm(16))
        for _ in range(3)
    ]
    encoder = TransformerEncoder(region_projection(FEATURE_DIM, 16, 0.0), layers).eval()
    inputs = tiny_inputs()
    memory = encoder(inputs["features"], inputs["boxes"], inputs["region_mask"])
    assert memory.states.shape == (3, 3, 6, 16) and memory.mask is inputs["region_mask"]
    biased = encoder(inputs["features"], inputs["boxes"], inputs["region_mask"], bias=torch.randn(3, 2, 6, 6))
    assert not torch.allclose(biased.states, memory.states)


def test_full_size_parameter_count() -> None:
    """3+3 layers, d=512, vocab 10201: the M2 decomposition without memory slots and meshing gates."""
    model = build_captioner(ModelConfig(output_bias=False), 10201, pad_id=PAD)
    encoder = sum(p.numel() for p in model.encoder.parameters())
    decoder = sum(p.numel() for p in model.decoder.parameters())
    assert encoder == 10_630_144 - 122_880  # M2 encoder minus its memory slots
    assert decoder == 27_781_120 - 3 * 3 * (1024 * 512 + 512)  # M2 decoder minus 3 gates in each of 3 layers


def test_preset_builds() -> None:
    cfg = load_valid_config("transformer", ["model.d_model=32", "model.num_heads=2", "model.d_ff=64"])
    model = build_captioner(cfg.model, 50)
    assert len(model.encoder.layers) == cfg.model.encoder_layers == len(model.decoder.layers)
