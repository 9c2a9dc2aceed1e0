"""Transformer+CATT (Fig. 5): the in-sample stream is exactly the Transformer, the cross-sample stream reads the
dictionaries at its first layer only, shared layers are one set of modules, the parameters beyond the Transformer
are the dictionaries and the wider classifier, prepare fits both dictionaries; load-time config errors. The generic
model battery (shapes, padding, causality, gradients, cached = uncached decoding, beams) runs on the kind and its
variants in tests/models/test_model_registry.py."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from registry_cases import FEATURE_DIM, PAD, VOCAB, model_inputs, tiny_inputs, tiny_model_config

from vlattn.attention import MultiHeadAttention, Site
from vlattn.attention.base import Capabilities
from vlattn.validation import load_valid_config, valid_config
from vlattn.errors import ConfigError
from vlattn.models import build_captioner, check_model_config
from vlattn.training.prepare import prepare_model

K_IMAGE, K_WORD, D = 5, 6, 16


def catt_config(**options):
    return tiny_model_config("catt", options={"image_dictionary": {"size": K_IMAGE}, "word_dictionary": {"size": K_WORD},
                                              **options})


def build(config, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_captioner(config, VOCAB, pad_id=PAD).eval()


def count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_in_sample_stream_is_the_transformer() -> None:
    """With the Transformer's weights, the encoder's IS memory and the decoder's IS half of the fused states are the
    Transformer's encoder memory and decoder states: CATT only adds a stream."""
    catt, transformer = build(catt_config()), build(tiny_model_config("transformer"), seed=3)
    weights = {k: v for k, v in transformer.state_dict().items() if k != "decoder.output.weight"}  # (V, d) vs (V, 2d)
    missing, unexpected = catt.load_state_dict(weights, strict=False)
    assert not unexpected and sorted(missing) == ["decoder.dictionary.entries", "decoder.output.weight",
                                                  "encoder.dictionary.entries"]
    inputs, tokens = model_inputs(tiny_inputs()), tiny_inputs()["tokens"]
    memories = catt.memories(inputs)
    torch.testing.assert_close(memories["regions"].states, transformer.memories(inputs)["regions"].states)
    fused = catt.decoder.hidden(tokens, memories)  # (B, T, 2d): [Z^; X^]
    torch.testing.assert_close(fused[..., :D], transformer.decoder.hidden(tokens, transformer.memories(inputs)))


def test_dictionaries_reach_only_the_cross_sample_stream() -> None:
    model = build(catt_config())
    inputs, tokens = model_inputs(tiny_inputs()), tiny_inputs()["tokens"]
    before = model.memories(inputs)
    fused = model.decoder.hidden(tokens, before)
    with torch.no_grad():
        model.encoder.dictionary.entries.normal_()
        model.decoder.dictionary.entries.normal_()
    after = model.memories(inputs)
    torch.testing.assert_close(after["regions"].states, before["regions"].states)
    assert not torch.allclose(after["cross_sample"].states, before["cross_sample"].states)
    changed = model.decoder.hidden(tokens, after)
    torch.testing.assert_close(changed[..., :D], fused[..., :D])
    assert not torch.allclose(changed[..., D:], fused[..., D:])
    # the CS stream has the sample's length after its first layer: (B, L, N, d)
    assert after["cross_sample"].states.shape == after["regions"].states.shape


def test_shared_streams_are_one_set_of_layers() -> None:
    shared, separate = build(catt_config()), build(catt_config(share=False))
    assert shared.encoder.cross_sample is None and shared.decoder.cross_sample is None
    assert not any("cross_sample" in name for name, _ in shared.named_parameters())
    layers = count(shared.encoder.layers) + count(shared.decoder.layers)
    assert count(separate) == count(shared) + layers
    assert all(a is not b for a, b in zip(separate.encoder.layers, separate.encoder.cross_sample))


def test_parameters_beyond_the_transformer() -> None:
    """Shared: the dictionaries (K_img x D_feature + K_word x d) and the classifier's half over X^ (V x d for concat;
    the 2d x d + d projection for concat_linear)."""
    transformer = count(build(tiny_model_config("transformer")))
    dictionaries = K_IMAGE * FEATURE_DIM + K_WORD * D
    assert count(build(catt_config())) == transformer + dictionaries + VOCAB * D
    assert count(build(catt_config(fusion="concat_linear"))) == transformer + dictionaries + 2 * D * D + D
    boxes = tiny_model_config("transformer", box_input=True)
    catt_boxes = replace(catt_config(fusion="concat_linear"), box_input=True)
    assert count(build(catt_boxes)) == count(build(boxes)) + dictionaries + 2 * D * D + D  # entries stay D-d


def test_full_size_preset_parameters() -> None:
    """vlattn/presets/catt.yaml (6+6, d=512, dictionaries of 500) against the Transformer of the same shape, on the meta
    device; vocabulary 10201."""
    cfg = load_valid_config("catt")
    with torch.device("meta"):
        catt = build_captioner(cfg.model, 10201)
        transformer = build_captioner(replace(cfg.model, kind="transformer", options={}), 10201)
    assert count(catt) - count(transformer) == 500 * 2048 + 500 * 512 + 10201 * 512


def test_prepare_fits_both_dictionaries(tmp_path: Path) -> None:
    """k-means over the training regions (image) and over the word embeddings weighted by training counts (word):
    with more entries than used words, every used word's embedding is an entry."""
    from tests.training.conftest import make_tiny_data, tiny_config
    from vlattn.tasks import captioning

    cfg = tiny_config(make_tiny_data(tmp_path / "data"), "model.kind=catt",
                      "model.options.image_dictionary.size=7", "model.options.word_dictionary.size=30")
    data = captioning.stage_data(cfg, None)

    def prepared(seed: int) -> torch.nn.Module:
        torch.manual_seed(seed)
        model = captioning.stage_model(cfg, data)
        names = prepare_model(model, lambda: data.prepare_resources(model, seed))
        assert names == ["encoder.dictionary", "decoder.dictionary"]
        return model

    model = prepared(1)
    regions = torch.from_numpy(data.store.get(100).features.copy())  # one-hot colour/shape regions and noise regions
    image = model.encoder.dictionary.entries
    assert image.shape == (7, regions.shape[1]) and image.max() > 0.1  # no longer the U(0, 0.01) start
    used = data.prepare_resources(model, 1).word_counts > 0
    words = {tuple(row) for row in model.word_embeddings.weight[used].tolist()}
    assert {tuple(row) for row in model.decoder.dictionary.entries.tolist()} == words
    torch.testing.assert_close(prepared(1).encoder.dictionary.entries, image, rtol=0, atol=0)
    assert not torch.equal(prepared(2).encoder.dictionary.entries, image)


def test_vocabulary_cap_makes_the_word_dictionary_the_embedding_table(tmp_path: Path) -> None:
    """``word_dictionary.cap: vocabulary`` on the tiny data (a 500-entry dictionary, fewer words): one entry per
    vocabulary row, equal to the word embeddings after ``prepare`` (no copies weighted by frequency)."""
    from tests.training.conftest import make_tiny_data, tiny_config
    from vlattn.tasks import captioning

    cfg = tiny_config(make_tiny_data(tmp_path / "data"), "model.kind=catt", "model.options.image_dictionary.size=7",
                      "model.options.word_dictionary.size=500", "model.options.word_dictionary.cap=vocabulary")
    data = captioning.stage_data(cfg, None)
    model = captioning.stage_model(cfg, data)
    vocabulary = model.word_embeddings.weight.shape[0]
    assert vocabulary < 500 and model.decoder.dictionary.entries.shape == (vocabulary, cfg.model.d_model)
    prepare_model(model, lambda: data.prepare_resources(model, 0))
    torch.testing.assert_close(model.decoder.dictionary.entries, model.word_embeddings.weight, rtol=0, atol=0)


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ({"options": {"image_dictionary": {"cap": "vocabulary"}}},
         r"model\.options\.image_dictionary\.cap: 'vocabulary' applies to a model's word dictionary"),
        ({"encoder_layers": 0}, r"model\.encoder_layers: Transformer\+CATT needs at least one encoder layer"),
        ({"tie_embeddings": True}, r"model\.tie_embeddings: with fusion 'concat' the classifier reads 2 x d_model"),
        ({"options": {"share": "maybe"}}, r"model\.options\.share: expected bool"),
        ({"options": {"image_dictionary": {"size": 0}}}, r"model\.options\.image_dictionary\.size: must be >= 1"),
        ({"options": {"word_dictionary": {"init": "file"}}}, r"model\.options\.word_dictionary\.path: init 'file' needs"),
        ({"options": {"dictionary": {}}}, r"unknown config key model\.options\.dictionary"),
    ],
)
def test_config_errors_name_the_key_at_load_time(model, message) -> None:
    with pytest.raises(ConfigError, match=message):
        valid_config({"model": {"kind": "catt", "d_model": 16, "num_heads": 2, **model}})


def test_site_mechanisms_must_allow_the_cross_sample_placement(monkeypatch: pytest.MonkeyPatch) -> None:
    """The encoder's and decoder's self-attention mechanisms also attend from the sample to the dictionary."""
    monkeypatch.setattr(MultiHeadAttention, "capabilities",
                        Capabilities(sites=frozenset({Site.ENCODER_SELF, Site.DECODER_SELF})))
    with pytest.raises(ConfigError, match=r"model\.encoder_self_attention: attention 'mha' is not allowed at cross"):
        check_model_config(catt_config())


def test_catt_mechanism_at_a_transformer_site_needs_the_model_width() -> None:
    config = tiny_model_config("transformer")
    config.decoder_cross_attention.name = "catt"
    with pytest.raises(ConfigError, match=r"model\.decoder_cross_attention: attention 'catt' returns 32-d outputs"):
        check_model_config(config)
    config.decoder_cross_attention.options = {"fusion": "concat_linear", "dictionary": {"size": 3}}
    check_model_config(config)


def test_reordering_beams_gathers_both_streams_and_keeps_the_dictionary_cache() -> None:
    """Memories stay once per image; each stream's self-attention cache follows the rows; the word dictionary's
    layer-1 keys/values (one row, shared by every decoding row) are the same object after reordering."""
    model = build(catt_config())
    inputs = model_inputs(tiny_inputs())
    state = model.encode(inputs)
    images = state.images
    tokens = torch.full((images * 2, 1), 1, dtype=torch.long)  # 2 rows per image
    index = torch.arange(images).repeat_interleave(2)
    state = model.reorder(state, index)
    _, state = model.step(tokens, state)
    dictionary = state.cache[0].cross_sample.self_attention
    assert dictionary.key.shape[0] == 1  # (1, H, K_word, d_k)
    swap = torch.arange(images * 2).view(images, 2).flip(1).reshape(-1)  # swap the two rows of every image
    before = [c.in_sample.self_attention.key.clone() for c in state.cache]
    later = [c.cross_sample.self_attention.key.clone() for c in state.cache[1:]]
    reordered = model.reorder(state, swap)
    assert reordered.memories is state.memories
    assert reordered.cache[0].cross_sample.self_attention is dictionary
    for cache, key in zip(reordered.cache, before, strict=True):
        torch.testing.assert_close(cache.in_sample.self_attention.key, key[swap])
    for cache, key in zip(reordered.cache[1:], later, strict=True):
        torch.testing.assert_close(cache.cross_sample.self_attention.key, key[swap])
    assert reordered.cache[0].in_sample.cross is state.cache[0].in_sample.cross  # cross caches stay per image


def test_dropout_defaults_are_the_transformers_and_options_reach_both_streams() -> None:
    """Unset, Transformer+CATT drops what the Transformer of the same config drops (Eq. 24's layers are Vaswani et
    al.'s: model.dropout on the decoder input, none on the attention weights); model.embedding_dropout sets the
    decoder's input dropout and model.attention_dropout every site's weight dropout in both streams."""
    base = replace(catt_config(), dropout=0.1)
    default, transformer = build(base), build(replace(base, kind="transformer", options={}))
    weights = lambda model: {m.dropout for m in model.modules() if isinstance(m, MultiHeadAttention)}  # noqa: E731
    assert weights(default) == weights(transformer) == {0.0}
    assert default.decoder.dropout.p == transformer.decoder.dropout.p == 0.1
    model = build(replace(base, embedding_dropout=0.3, attention_dropout=0.2))
    assert model.decoder.dropout.p == 0.3
    assert weights(model) == {0.2}
