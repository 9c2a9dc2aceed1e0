"""Configs: YAML round-trip, overrides, unknown keys and wrong types rejected with the key named."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from vlattn.config import Config, config_to_dict, save_config
from vlattn.validation import load_valid_config, valid_config
from vlattn.errors import ConfigError

CONFIGS = sorted(Path(__file__).resolve().parent.parent.joinpath("configs").glob("*.yaml"))


def test_overrides_parse_yaml_values() -> None:
    cfg = load_valid_config(None, ["model.d_model=256", "train.schedule.options.warmup=20", "data.vocab_splits=[train, val]",
                             "model.encoder_self_attention.name=memory", "model.encoder_self_attention.options={slots: 40}"])
    assert cfg.model.d_model == 256
    assert cfg.train.schedule.options["warmup"] == 20
    assert cfg.data.vocab_splits == ["train", "val"]
    assert cfg.model.encoder_self_attention.options == {"slots": 40}


@pytest.mark.parametrize(
    ("override", "named"),
    [("model.dmodel=3", "model.dmodel"), ("train.schedule.options.warmpu=3", "train.schedule.options.warmpu"),
     ("train.schedule.warmup=3", "train.schedule.warmup"), ("foo=1", "foo")],
)
def test_unknown_keys_are_named(override: str, named: str) -> None:
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        load_valid_config(None, [override])


def test_wrong_types_are_named() -> None:
    with pytest.raises(ConfigError, match=r"model\.d_model"):
        load_valid_config(None, ["model.d_model=big"])
    with pytest.raises(ConfigError, match=r"model\.tie_embeddings"):
        load_valid_config(None, ["model.tie_embeddings=3"])


def test_int_promotes_to_float_but_bool_is_not_int() -> None:
    cfg = load_valid_config(None, ["train.label_smoothing=0", "train.weight_decay=5e-6"])
    assert isinstance(cfg.train.label_smoothing, float)
    assert cfg.train.weight_decay == 5e-6
    with pytest.raises(ConfigError):
        load_valid_config(None, ["train.epochs=true"])
    with pytest.raises(ConfigError, match=r"train.scst_schedule.options.lr: expected float, got 'fast'"):
        load_valid_config(None, ["train.scst_schedule.options.lr=fast"])


def test_yaml_and_json_round_trip(tmp_path: Path) -> None:
    cfg = load_valid_config(None, ["model.num_heads=4", "eval.beam_size=3"])
    for name in ("c.yaml", "c.json"):
        save_config(cfg, tmp_path / name)
        again = load_valid_config(tmp_path / name)
        assert config_to_dict(again) == config_to_dict(cfg)


def test_missing_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_valid_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [unclosed\n")
    with pytest.raises(ConfigError, match="bad.yaml"):
        load_valid_config(bad)


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_shipped_presets_load(path: Path) -> None:
    cfg = load_valid_config(path)
    assert isinstance(cfg, Config)
    # Every key of the preset is a real config key (config_from_dict rejects the rest) and survives a round trip.
    assert config_to_dict(valid_config(yaml.safe_load(path.read_text()))) == config_to_dict(cfg)
