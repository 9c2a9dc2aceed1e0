"""NG-SAN models: the Sec. 5.1 presets, Table 1's parameter counts by hand, and the "absolute" geometry
baseline of Table 4 (sinusoidal box encoding added to the encoder input)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from tests.models.conftest import tiny_captioner, tiny_inputs

from vlattn.config import config_to_dict
from vlattn.validation import load_valid_config, valid_config
from vlattn.errors import ConfigError
from vlattn.layers.boxes import SinusoidalBoxEncoding
from vlattn.models import build_captioner

PRESETS = ("san", "n-san", "g-san", "ng-san")
ATTENTION = {"san": "mha", "n-san": "nsa", "g-san": "gsa", "ng-san": "ngsa"}


def test_presets_are_sec_5_1_and_differ_only_in_the_encoder_attention() -> None:
    configs = {name: config_to_dict(load_valid_config(name)) for name in PRESETS}
    for name, cfg in configs.items():
        attention = cfg["model"].pop("encoder_self_attention")
        assert attention["name"] == ATTENTION[name]
        assert cfg == configs["san"], name  # everything else is shared
    model, train = configs["san"]["model"], configs["san"]["train"]
    assert (model["encoder_layers"], model["decoder_layers"], model["d_model"], model["num_heads"], model["d_ff"]) == (4, 4, 512, 8, 2048)
    assert model["dropout"] == 0.1 and model["feature_dim"] == 2048 and not model["tie_embeddings"] and model["output_bias"]
    assert train["schedule"] == {"name": "step", "options": {
        "base_lr": 1e-4, "max_lr": 3e-4, "decay_start_epoch": 6, "decay_every": 3, "decay_factor": 0.5}}
    assert train["epochs"] == 15 and train["scst_epochs"] == 15 and configs["san"]["eval"]["beam_size"] == 3
    ngsan = load_valid_config("ng-san").model.encoder_self_attention.options
    assert ngsan["normalize"] == "query" and ngsan["norm"] == "instance" and not ngsan["affine"]
    assert ngsan["phi"] == ["query_dependent"]


@pytest.mark.parametrize(("layers", "paper"), [(1, 18.1), (2, 25.5), (4, 40.2), (6, 54.9)])
def test_san_parameters_match_table_1(layers: int, paper: float) -> None:
    """Untied output with bias, vocabulary 9487, 2048-d regions: Table 1's SAN sizes, and each term by hand."""
    cfg = dataclasses.replace(load_valid_config("san").model, encoder_layers=layers, decoder_layers=layers)
    with torch.device("meta"):
        model = build_captioner(cfg, 9487)
    attention, ffn, norm = 4 * (512 * 512 + 512), 512 * 2048 + 2048 + 2048 * 512 + 512, 2 * 512
    encoder = (2048 * 512 + 512 + norm) + layers * (attention + ffn + 2 * norm)
    decoder = 9487 * 512 + layers * (2 * attention + ffn + 3 * norm) + 512 * 9487 + 9487
    total = sum(p.numel() for p in model.parameters())
    assert sum(p.numel() for p in model.encoder.parameters()) == encoder
    assert total == encoder + decoder
    assert round(total / 1e6, 1) == paper


def test_sinusoidal_box_encoding_by_hand() -> None:
    """Centre x, centre y, width, height (normalised) x 100, each encoded in d/4 channels like word positions:
    PE(p, 2i) = sin(p / 10000^(2i/(d/4))), PE(p, 2i+1) = cos(...)."""
    boxes = torch.tensor([[[0.1, 0.2, 0.5, 0.6]]])  # centre (0.3, 0.4), size 0.4 x 0.4
    encoded = SinusoidalBoxEncoding(16)(boxes)[0, 0]  # 4 channels per quantity: frequencies 1 and 1/100
    expected = []
    for value in (0.3, 0.4, 0.4, 0.4):
        p = 100 * value
        expected += [math.sin(p), math.cos(p), math.sin(p / 100), math.cos(p / 100)]
    torch.testing.assert_close(encoded, torch.tensor(expected))


def test_absolute_box_encoding_makes_the_boxes_matter_without_parameters() -> None:
    inputs = tiny_inputs()
    plain, absolute = tiny_captioner(), tiny_captioner(box_encoding="sinusoidal")
    assert sum(p.numel() for p in absolute.parameters()) == sum(p.numel() for p in plain.parameters())

    def logits(model, boxes):
        return model({"features": inputs["features"], "boxes": boxes, "region_mask": inputs["region_mask"]}, inputs["tokens"])

    moved = inputs["boxes"].flip(1)
    assert not torch.allclose(logits(absolute, inputs["boxes"]), logits(absolute, moved))
    assert torch.equal(logits(plain, inputs["boxes"]), logits(plain, moved))
    real = inputs["region_mask"][..., None]
    padded = torch.where(real, inputs["boxes"], torch.rand_like(inputs["boxes"]))
    torch.testing.assert_close(logits(absolute, padded), logits(absolute, inputs["boxes"]))


def test_box_encoding_errors_name_the_key() -> None:
    with pytest.raises(ConfigError, match=r"model\.box_encoding: 'sinusoidal' needs d_model divisible by 4, got 18"):
        valid_config({"model": {"d_model": 18, "num_heads": 2, "box_encoding": "sinusoidal"}})
    with pytest.raises(ConfigError, match=r"model\.box_encoding: 'learned' is not one of: none, sinusoidal"):
        valid_config({"model": {"box_encoding": "learned"}})
