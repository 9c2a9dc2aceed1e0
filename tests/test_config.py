"""Configs: YAML round-trip, overrides, unknown keys and wrong types rejected with the key named."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from vlattn import shipped_presets as presets
from vlattn.config import (Config, DataConfig, EvalConfig, ModelConfig, Spec, TrainConfig, config_to_dict,
                           merge_mappings, save_config)
from vlattn.errors import ConfigError
from vlattn.validation import load_valid_config

PRESETS = presets.names()


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


@pytest.mark.parametrize("name", PRESETS)
def test_shipped_presets_load_by_name(name: str) -> None:
    """Every preset loads by its name, carries a one-line description, and survives a save/load round trip."""
    cfg = load_valid_config(name)
    assert isinstance(cfg, Config)
    description = presets.describe()[name]
    assert description and "\n" not in description and len(description) <= 120
    assert yaml.safe_load(presets.text(name))["description"] == description


def test_the_presets_ship_in_the_package() -> None:
    """The presets live beside the code (package data), not in a checkout's top-level configs/."""
    import vlattn

    folder = Path(vlattn.__file__).parent / "presets"
    assert sorted(p.stem for p in folder.glob("*.yaml")) == PRESETS
    assert {"demo", "vqa-demo", "m2", "transformer", "vqa-mcan"} <= set(PRESETS)


def test_names_and_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reference without directory part or suffix is a preset name; anything else is a file. A file named like a
    preset in the working directory does not shadow the preset."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m2").write_text("model: {d_model: 8}\n")
    assert load_valid_config("m2").model.d_model == 512
    (tmp_path / "mine.yaml").write_text("base: m2\nmodel: {d_model: 256}\n")
    assert load_valid_config("mine.yaml").model.d_model == 256
    with pytest.raises(ConfigError, match=r"^nosuch: no preset of that name \(presets: .*demo.*m2"):
        load_valid_config("nosuch")
    with pytest.raises(ConfigError, match="mine: no preset"):
        load_valid_config("mine")


def test_base_chain_is_merged_key_by_key(tmp_path: Path) -> None:
    """``base`` resolves presets and files (relative to the referring file); the child's keys win, mappings merge,
    lists replace; a Spec or model that changes its name/kind does not inherit the base's options."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "parent.yaml").write_text(
        "base: demo\ndata: {vocab_splits: [train, val]}\ntrain: {schedule: {options: {warmup: 10}}}\n")
    child = tmp_path / "child.yaml"
    child.write_text("base: sub/parent.yaml\ndata: {vocab_splits: [val]}\n"
                     "model: {kind: m2, encoder_self_attention: {name: memory, options: {slots: 4}}}\n")
    cfg = load_valid_config(child)
    demo = load_valid_config("demo")
    assert cfg.model.d_model == demo.model.d_model == 128  # from demo, two levels up
    assert cfg.data.vocab_splits == ["val"]  # lists replace
    assert cfg.train.schedule.name == "noam" and cfg.train.schedule.options == {"scale": 0.5, "warmup": 10}
    assert cfg.model.kind == "m2" and cfg.model.options == {}  # demo's (transformer) options are not inherited
    assert cfg.model.encoder_self_attention.options == {"slots": 4}
    assert merge_mappings({"a": {"name": "x", "options": {"p": 1}, "q": 2}}, {"a": {"name": "y"}}) == \
        {"a": {"name": "y", "q": 2}}
    assert merge_mappings({"a": {"name": "x", "options": {"p": 1}}}, {"a": {"options": {"r": 2}}}) == \
        {"a": {"name": "x", "options": {"p": 1, "r": 2}}}


@pytest.mark.parametrize(("text", "message"), [
    ("base: [demo]\n", r"bad\.yaml: base: expected a preset name"),
    ("base: nope.yaml\n", r"nope\.yaml: config file not found"),
    ("base: nosuch\n", r"nosuch: no preset of that name"),
    ("base: demo\nmodel: {d_modle: 3}\n", r"bad\.yaml: unknown config key model\.d_modle"),
])
def test_base_errors_are_named(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "bad.yaml").write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_valid_config(tmp_path / "bad.yaml")


def test_base_cycles_are_refused(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("base: b.yaml\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\n")
    with pytest.raises(ConfigError, match=r"a\.yaml: base chain .*a\.yaml -> .*b\.yaml -> .*a\.yaml is a cycle"):
        load_valid_config(tmp_path / "a.yaml")


@pytest.mark.parametrize(("build", "message"), [
    (lambda: ModelConfig(dropout=2.0), r"^config key model\.dropout: must be < 1\.0, got 2\.0$"),
    (lambda: ModelConfig(encoder_self_attention="mha"), r"^config key model\.encoder_self_attention: expected a Spec"),
    (lambda: ModelConfig(d_model="big"), r"^config key model\.d_model: expected int, got 'big'$"),
    (lambda: TrainConfig(val_decoding="sample"), r"^config key train\.val_decoding: 'sample' is not one of"),
    (lambda: TrainConfig(adam_betas=[0.9]), r"^config key train\.adam_betas: expected two numbers"),
    (lambda: dataclasses.replace(EvalConfig(), beam_size=0), r"^config key eval\.beam_size: must be >= 1, got 0$"),
    (lambda: Config(model=DataConfig()), r"^config key model: expected a ModelConfig"),
    (lambda: Spec("mha", options=[1]), r"^Spec mha options: expected a mapping"),
])
def test_configs_built_by_hand_are_validated_as_yaml_is(build, message: str) -> None:
    """A config section constructed in Python (or changed by dataclasses.replace) is checked as a loaded one, with
    the same one-line message naming the key as the YAML path gives."""
    with pytest.raises(ConfigError, match=message):
        build()


def test_hand_built_and_loaded_configs_agree() -> None:
    assert ModelConfig(dropout=0).dropout == 0.0 and isinstance(ModelConfig(dropout=0).dropout, float)
    with pytest.raises(ConfigError) as from_yaml:
        load_valid_config(None, ["model.dropout=2.0"])
    assert str(from_yaml.value) == "config: config key model.dropout: must be < 1.0, got 2.0"


@pytest.mark.parametrize(("preset", "override", "message"), [
    ("vqa-demo", "eval.beam_size=3", r"never read by task 'vqa' \(stages: train\): eval\.beam_size \(remove them\)$"),
    ("vqa-demo", "train.scst_epochs=2", r"task 'vqa' \(stages: train\): train\.scst_epochs"),
    ("vqa-demo", "data.karpathy=x.json", r"task 'vqa' \(stages: train\): data\.karpathy"),
    ("demo", "data.questions=q_{split}.json", r"task 'captioning' \(stages: xe, scst\): data\.questions"),
    ("demo", "train.bce_reduction=mean", r"task 'captioning' \(stages: xe, scst\): train\.bce_reduction"),
    ("demo", "data.zero_image=false", r"data\.zero_image"),  # named by the override, at its default
    ("updown", "model.d_ff=64", r"never read by model kind 'updown': model\.d_ff"),
])
def test_keys_nothing_reads_are_refused_naming_them(preset: str, override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as refused:
        load_valid_config(preset, [override])
    assert "\n" not in str(refused.value)


def test_unread_keys_in_files_are_refused_unless_left_at_their_defaults(tmp_path: Path) -> None:
    """A user's file may be a full dump (`vlattn config show`, a run's config.yaml): its keys at their defaults are
    not checked; one set to another value that nothing reads is refused."""
    dump = tmp_path / "dump.yaml"
    dump.write_text(yaml.safe_dump(config_to_dict(load_valid_config("vqa-demo"))))  # every key, eval.beam_size included
    assert config_to_dict(load_valid_config(dump)) == config_to_dict(load_valid_config("vqa-demo"))
    edited = tmp_path / "edited.yaml"
    edited.write_text("base: vqa-demo\neval: {beam_size: 4}\nmodel: {max_positions: 10}\n")
    with pytest.raises(ConfigError, match=r"edited\.yaml: config keys never read by model kind 'mcan' or task 'vqa' "
                                          r"\(stages: train\): model\.max_positions, eval\.beam_size \(remove them\)"):
        load_valid_config(edited)


def test_every_config_key_is_read_by_some_task_or_kind() -> None:
    """No dead keys: each key of the sections is read by a model kind, a task or a stage."""
    from vlattn.models import MODELS
    from vlattn.tasks import TASKS

    read = {f"model.{key}" for kind in MODELS.values() for key in kind.reads}
    for task in TASKS.values():
        read |= task.reads | {key for stage in task.stages.values() for key in stage.reads()}
    sections = {"model": ModelConfig, "data": DataConfig, "train": TrainConfig, "eval": EvalConfig}
    every = {f"{name}.{f.name}" for name, cls in sections.items() for f in dataclasses.fields(cls)}
    assert every - read == set() and read - every == set()
