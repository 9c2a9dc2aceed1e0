"""The Transformer captioner over every registered attention mechanism: shapes, padding, causality,
gradients, checkpoints, and cached steps equal to uncached ones."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from conftest import FEATURE_DIM, PAD, VOCAB, tiny_captioner, tiny_config, tiny_inputs

from vlattn.attention import build_attention
from vlattn.config import ModelConfig, load_config
from vlattn.errors import ConfigError
from vlattn.models import build_captioner
from vlattn.models.encoder import TransformerEncoder


def logits_of(model, inputs, **changes):
    inputs = {**inputs, **changes}
    return model(inputs["features"], inputs["boxes"], inputs["region_mask"], inputs["tokens"])


def test_forward_shape(attention_name: str) -> None:
    model, inputs = tiny_captioner(attention_name), tiny_inputs()
    assert logits_of(model, inputs).shape == (3, 7, VOCAB)
    assert model.encoder(inputs["features"], inputs["region_mask"]).shape == (3, 2, 6, 16)


def test_padded_regions_change_nothing(attention_name: str) -> None:
    model, inputs = tiny_captioner(attention_name), tiny_inputs()
    mask = inputs["region_mask"]
    noisy = inputs["features"] + 50.0 * torch.randn_like(inputs["features"]) * ~mask[..., None]
    memory = model.encoder(inputs["features"], mask)
    noisy_memory = model.encoder(noisy, mask)
    real = mask[:, None, :, None].expand_as(memory)
    torch.testing.assert_close(noisy_memory[real], memory[real])
    torch.testing.assert_close(logits_of(model, inputs, features=noisy), logits_of(model, inputs))
    # and the mask is real: the same change without it alters the real regions' outputs
    no_mask = torch.ones_like(mask)
    assert not torch.allclose(model.encoder(noisy, no_mask)[0, :, :3], model.encoder(noisy, mask)[2, :, :3])
    assert not torch.allclose(model.encoder(noisy, no_mask)[2], noisy_memory[2])


def test_no_causal_leak(attention_name: str) -> None:
    model, inputs = tiny_captioner(attention_name), tiny_inputs()
    tokens = inputs["tokens"].clone()
    tokens[:, 4:] = torch.randint(3, VOCAB, tokens[:, 4:].shape)
    before, after = logits_of(model, inputs), logits_of(model, inputs, tokens=tokens)
    torch.testing.assert_close(after[:, :4], before[:, :4])
    assert not torch.allclose(after[:, 4:], before[:, 4:])


def test_gradients_reach_every_parameter(attention_name: str) -> None:
    model, inputs = tiny_captioner(attention_name).train(), tiny_inputs()
    logits_of(model, inputs).logsumexp(-1).sum().backward()
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name


def test_state_dict_round_trip(attention_name: str) -> None:
    model, other, inputs = tiny_captioner(attention_name), tiny_captioner(attention_name, seed=9), tiny_inputs()
    assert not torch.allclose(logits_of(other, inputs), logits_of(model, inputs))
    other.load_state_dict(model.state_dict())
    torch.testing.assert_close(logits_of(other, inputs), logits_of(model, inputs))
    assert not any("positions" in key for key in model.state_dict())


def test_cached_steps_equal_uncached_and_teacher_forcing(attention_name: str) -> None:
    model, inputs = tiny_captioner(attention_name), tiny_inputs()
    args = (inputs["features"], inputs["boxes"], inputs["region_mask"])
    tokens = inputs["tokens"]
    teacher = logits_of(model, inputs).log_softmax(-1)  # (B, T, V)
    cached, uncached = model.encode(*args), model.encode(*args, use_cache=False)
    assert "cache" in cached and "cache" not in uncached
    for t in range(1, tokens.shape[1] + 1):
        with_cache, cached = model.step(tokens[:, :t], cached)
        without, uncached = model.step(tokens[:, :t], uncached)
        torch.testing.assert_close(with_cache, without)
        torch.testing.assert_close(with_cache, teacher[:, t - 1])


def test_reorder_follows_rows() -> None:
    model, inputs = tiny_captioner(), tiny_inputs()
    tokens = inputs["tokens"]
    state = model.encode(inputs["features"], inputs["boxes"], inputs["region_mask"])
    for t in range(1, 4):
        _, state = model.step(tokens[:, :t], state)
    index = torch.tensor([2, 0, 0])
    state = model.reorder(state, index)
    log_probs, _ = model.step(tokens[index, :4], state)
    expected = logits_of(model, inputs).log_softmax(-1)[index, 3]
    torch.testing.assert_close(log_probs, expected)


def test_output_layer_options() -> None:
    tied = tiny_captioner(tie_embeddings=True, output_bias=False)
    assert tied.decoder.output.weight is tied.decoder.embed.weight and tied.decoder.output.bias is None
    untied = tiny_captioner()
    assert untied.decoder.output.weight is not untied.decoder.embed.weight
    assert untied.decoder.output.bias is not None


def test_builder_errors() -> None:
    with pytest.raises(ConfigError, match="valid kinds: .*transformer"):
        build_captioner(ModelConfig(kind="nope"), VOCAB)
    with pytest.raises(ConfigError, match="takes no options"):
        build_captioner(tiny_config(options={"x": 1}), VOCAB)
    with pytest.raises(KeyError, match="valid names"):
        build_captioner(tiny_config("nope"), VOCAB)


def test_encoder_layer_outputs_and_bias() -> None:
    torch.manual_seed(0)
    encoder = TransformerEncoder(FEATURE_DIM, 16, 32, 3, 0.0, partial(build_attention, "mha", d_model=16, num_heads=2))
    encoder.eval()
    inputs = tiny_inputs()
    memory = encoder(inputs["features"], inputs["region_mask"])
    assert memory.shape == (3, 3, 6, 16)
    biased = encoder(inputs["features"], inputs["region_mask"], bias=torch.randn(3, 2, 6, 6))
    assert not torch.allclose(biased, memory)


def test_full_size_parameter_count() -> None:
    """3+3 layers, d=512, vocab 10201: the M2 decomposition without memory slots and meshing gates."""
    cfg = ModelConfig(output_bias=False)
    model = build_captioner(cfg, 10201, pad_id=PAD)
    encoder = sum(p.numel() for p in model.encoder.parameters())
    decoder = sum(p.numel() for p in model.decoder.parameters())
    assert encoder == 10_630_144 - 122_880  # M2 encoder minus its memory slots
    assert decoder == 27_781_120 - 3 * 3 * (1024 * 512 + 512)  # M2 decoder minus 3 gates in each of 3 layers


def test_preset_builds() -> None:
    cfg = load_config("configs/transformer.yaml", ["model.d_model=32", "model.num_heads=2", "model.d_ff=64"])
    model = build_captioner(cfg.model, 50)
    assert len(model.encoder.layers) == cfg.model.encoder_layers == len(model.decoder.layers)
