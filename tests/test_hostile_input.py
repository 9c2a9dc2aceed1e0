"""Hostile input gives one line naming the file, option or key, exit status 2, never a traceback: config sizes and
nesting, ``--set`` values, ``vlattn profile`` shapes, training states on resume, a diverging loss, lone
surrogates in JSON, ``import-checkpoint`` destinations and pickle payloads (docs/errors.md)."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
import torch

from tests.test_bad_input import one_line
from vlattn.config import MAX_LAYERS
from vlattn.errors import ConfigError
from vlattn.models import build_captioner, check_model_config
from vlattn.models.footprint import check_footprint, model_bytes
from vlattn.validation import load_valid_config

DEMO = "demo"  # the shipped preset


# --- config sizes ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("override", "named"), [
    ("model.max_positions=1000000000", "model.max_positions: must be <= 65536"),
    ("model.encoder_layers=1000000000", f"model.encoder_layers: must be <= {MAX_LAYERS}"),
    ("model.d_model=9223372036854775808", "model.d_model: 9223372036854775808 is outside the 64-bit integer range"),
    ("data.num_workers=1000000000", "data.num_workers: must be <= 256"),
    ("model.encoder_self_attention={name: memory, options: {slots: 100000000}}",
     "model.encoder_self_attention.options.slots: must be <= 65536"),
    ("train.grad_clip=.inf", "train.grad_clip: expected a finite number, got inf"),
    ("train.seed=-1", "train.seed: must be >= 0"),
])
def test_sizes_are_bounded_when_a_config_loads(override: str, named: str) -> None:
    with pytest.raises(ConfigError, match=named.replace(".", r"\.").replace("(", r"\(")):
        load_valid_config(DEMO, [override])


def test_weights_beyond_memory_are_refused_before_allocation() -> None:
    """d = d_ff = 2^16 with 8 layers: 8 x 12 x 2^32 float32 parameters, ~1.5 TiB, far beyond any test machine;
    refused from the meta-device structure, naming the key furthest above its default."""
    sets = ["model.d_model=65536", "model.d_ff=65536", "model.encoder_layers=4", "model.decoder_layers=4"]
    with pytest.raises(ConfigError, match=r"preset demo: model\.d_model=65536: the model's weights need .* GiB, more "
                                          r"than the .* GiB of memory available \(largest tensor: .* \(65536, 65536\)\)"):
        load_valid_config(DEMO, sets)


def test_footprint_is_the_exact_size_of_the_weights() -> None:
    """The meta-device count equals the bytes of the real model's parameters and buffers, and the check refuses
    one byte below it."""
    cfg = load_valid_config(DEMO)
    meta = check_model_config(cfg.model, vocab_size=30)
    real = build_captioner(cfg.model, 30)
    expected = sum(t.numel() * t.element_size() for t in [*real.parameters(), *real.buffers()])
    assert model_bytes(meta) == expected
    check_footprint(meta, cfg.model, available=expected)
    with pytest.raises(ConfigError, match="more than the"):
        check_footprint(meta, cfg.model, available=expected - 1)


def test_positions_table_is_not_allocated_while_validating() -> None:
    """max_positions x d_model = 2^16 x 2^12 floats (1 GiB) of sinusoidal table: only a shape on the meta device."""
    cfg = load_valid_config(DEMO, ["model.max_positions=65536", "model.d_model=4096", "model.num_heads=8"])
    buffers = dict(check_model_config(cfg.model).named_buffers())
    assert any(tuple(b.shape) == (65536, 4096) for b in buffers.values())
    assert all(b.device.type == "meta" for b in buffers.values())


# --- --set values and nesting ------------------------------------------------------------------------------------


def test_set_value_with_a_yaml_syntax_error(vlattn_cli) -> None:
    code, _, err = vlattn_cli("profile", "--config", DEMO, "--set", "train.adam_betas=[0.9, 0.98")
    assert code == 2 and one_line(err)
    assert "override 'train.adam_betas=[0.9, 0.98': the value is not valid YAML at line 1 column 11" in err


@pytest.mark.parametrize("depth", [40, 5000])
@pytest.mark.parametrize("where", ["yaml", "json", "set"])
def test_deeply_nested_input(tmp_path: Path, vlattn_cli, depth: int, where: str) -> None:
    nested = "[" * depth + "]" * depth
    if where == "set":
        code, _, err = vlattn_cli("profile", "--config", DEMO, "--set", f"model.options={nested}")
        named = "override 'model.options=[[[["
    else:
        path = tmp_path / f"deep.{where}"
        path.write_text(f'{{"model": {{"options": {nested}}}}}' if where == "json" else f"model: {nested}\n")
        code, _, err = vlattn_cli("profile", "--config", str(path))
        named = f"deep.{where}: "
    assert code == 2 and one_line(err) and named in err and "nested more than 32 levels deep" in err


def test_override_is_shortened_in_the_message(vlattn_cli) -> None:
    code, _, err = vlattn_cli("profile", "--config", DEMO, "--set", "model.kind=[" + "x" * 5000)
    assert code == 2 and one_line(err) and len(err) < 400


# --- vlattn profile shapes ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("option", "value", "message"), [
    ("--batch", "0", "--batch must be between 1 and 65536, got 0"),
    ("--repeats", "0", "--repeats must be between 1 and 10000, got 0"),
    ("--regions", "-1", "--regions must be between 1 and 65536, got -1"),
    ("--length", "0", "--length must be between 1 and 65536, got 0"),
    ("--vocab-size", "4", "--vocab-size must be between 5 and 4194304, got 4"),
    ("--answers", "0", "--answers must be between 1 and 4194304, got 0"),
])
def test_profile_shapes_out_of_range(vlattn_cli, option: str, value: str, message: str) -> None:
    code, _, err = vlattn_cli("profile", "--config", DEMO, option, value)
    assert code == 2 and one_line(err) and message in err


def test_profile_activation_beyond_memory(vlattn_cli) -> None:
    code, _, err = vlattn_cli("profile", "--config", DEMO, "--batch", "65536", "--regions", "65536")
    assert code == 2 and one_line(err) and "--batch 65536 with --regions 65536" in err and "GiB of memory" in err


# --- resume from a damaged training state ------------------------------------------------------------------------


class Payload:
    """Unpickling this would run ``os.system``: a weights_only load must refuse it by name."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.mark.parametrize("damage", ["truncated", "garbage", "payload", "list", "no loop"])
def test_resume_from_a_damaged_training_state(tiny_run: Path, tmp_path: Path, vlattn_cli, damage: str) -> None:
    run = shutil.copytree(tiny_run, tmp_path / "run")
    state_file = run / "checkpoints" / "last" / "train_state.pt"
    marker = tmp_path / "executed"
    if damage == "truncated":
        state_file.write_bytes(state_file.read_bytes()[:200])
    elif damage == "garbage":
        state_file.write_bytes(b"\x80\x04not a pickle")
    elif damage == "payload":
        torch.save({"stage": "xe", "loop": Payload(marker)}, state_file)
    elif damage == "list":
        torch.save([1, 2], state_file)
    else:
        state = torch.load(state_file, weights_only=True)
        del state["loop"]
        torch.save(state, state_file)
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    code, _, err = vlattn_cli("train", "--out", str(run), "--resume", "--device", "cpu")
    assert code == 2 and one_line(err) and "train_state.pt" in err, err
    assert "weights_only=False" not in err and "Traceback" not in err
    if damage == "payload":
        assert "holds an object that weights_only loading refuses (posix.system)" in err and not marker.exists()
    after = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert after == before  # a refused resume changes nothing


# --- a diverging loss --------------------------------------------------------------------------------------------


def test_non_finite_loss_is_one_line(tiny_run: Path, tmp_path: Path, vlattn_cli) -> None:
    """A learning rate of 1e30 makes the weights infinite after the first step; the next loss is NaN."""
    code, _, err = vlattn_cli("train", "--config", str(tiny_run.parent / "tiny.yaml"), "--out", str(tmp_path / "r"),
                              "--device", "cpu", "--set", "train.schedule={name: constant, options: {lr: 1.0e+30}}",
                              "--set", "train.epochs=2")
    assert code == 2 and one_line(err), err
    assert "stage 'xe': the loss is nan at step" in err and "lower the learning rate" in err


# --- lone surrogates ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tokenizer", ["python", "java"])
@pytest.mark.parametrize("where", ["results", "annotations"])
def test_lone_surrogate_in_a_caption(tmp_path: Path, vlattn_cli, tokenizer: str, where: str) -> None:
    captions = {"results": "a dog runs", "annotations": "a dog runs"}
    captions[where] = "a dog \ud800 runs"
    (tmp_path / "res.json").write_text(json.dumps([{"image_id": 1, "caption": captions["results"]}]))
    (tmp_path / "ann.json").write_text(json.dumps({"images": [{"id": 1}], "annotations": [
        {"image_id": 1, "id": 5, "caption": captions["annotations"]}]}))
    code, _, err = vlattn_cli("score", "--results", str(tmp_path / "res.json"), "--annotations",
                              str(tmp_path / "ann.json"), "--tokenizer", tokenizer, "--metrics", "BLEU")
    item = "[0].caption" if where == "results" else "annotations[0].caption"
    name = "res.json" if where == "results" else "ann.json"
    assert code == 2 and one_line(err) and f"{name}: item '{item}': a string holds a lone UTF-16 surrogate" in err


# --- import-checkpoint -------------------------------------------------------------------------------------------


def test_import_out_under_a_missing_directory_is_checked_first(tmp_path: Path, vlattn_cli) -> None:
    """The destination is refused before the checkpoint is read: a file that is not a checkpoint at all gives the
    destination's error, not the reader's."""
    (tmp_path / "big.pth").write_bytes(b"not a checkpoint")
    (tmp_path / "vocab.txt").write_text("w\n")
    code, _, err = vlattn_cli("import-checkpoint", str(tmp_path / "big.pth"), "--format", "m2-official", "--vocab",
                              str(tmp_path / "vocab.txt"), "--out", str(tmp_path / "no" / "such" / "run"))
    assert code == 2 and one_line(err)
    assert f"run: cannot create the run directory: {tmp_path / 'no' / 'such'} is not an existing directory" in err


@pytest.mark.parametrize("container", ["zip", "bare"])
def test_import_of_a_pickle_payload_names_the_global(tmp_path: Path, vlattn_cli, container: str) -> None:
    marker = tmp_path / "executed"
    payload = {"state_dict": Payload(marker)} if container == "zip" else Payload(marker)
    torch.save(payload, tmp_path / "evil.pth")
    (tmp_path / "vocab.txt").write_text("w\n")
    code, _, err = vlattn_cli("import-checkpoint", str(tmp_path / "evil.pth"), "--format", "m2-official", "--vocab",
                              str(tmp_path / "vocab.txt"), "--out", str(tmp_path / "run"))
    assert code == 2 and one_line(err) and not marker.exists()
    assert "evil.pth: holds an object that weights_only loading refuses (posix.system)" in err
    assert "weights_only=False" not in err and "weights_only` set to `False" not in err
    assert "add_safe_globals" not in err  # never advice to allow a refused global


def test_raw_pickle_protocol_warning_stays_off_stderr(tmp_path: Path) -> None:
    """torch warns about the pickle protocol of a file that is not a zip archive; a real process (pytest would
    catch the warning) shows the error line alone."""
    import pickle
    import subprocess
    import sys

    (tmp_path / "raw.pth").write_bytes(pickle.dumps({"state_dict": {"w": 1}}, protocol=4))
    (tmp_path / "vocab.txt").write_text("w\n")
    result = subprocess.run([sys.executable, "-m", "vlattn.cli", "import-checkpoint", str(tmp_path / "raw.pth"),
                             "--format", "m2-official", "--vocab", str(tmp_path / "vocab.txt"), "--out",
                             str(tmp_path / "run")], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith(f"error: {tmp_path / 'raw.pth'}: not a readable PyTorch checkpoint")


@pytest.mark.parametrize(("base", "message"), [("nan", "base: nan: no preset of that name"),
                                               ("gone.yaml", "base: {dir}/gone.yaml: config file not found")])
def test_a_missing_base_names_the_file_asking_for_it(tmp_path: Path, base: str, message: str) -> None:
    """Found by the config fuzzer: a mutated ``base`` was named without the file that holds it."""
    (tmp_path / "run.yaml").write_text(f"base: {base}\n")
    with pytest.raises(ConfigError, match=re.escape(f"{tmp_path / 'run.yaml'}: " + message.format(dir=tmp_path))):
        load_valid_config(tmp_path / "run.yaml")


def test_lone_surrogate_in_a_config_string() -> None:
    with pytest.raises(ConfigError, match=r"config key data\.karpathy: holds a lone UTF-16 surrogate"):
        load_valid_config(DEMO, ['data.karpathy="a\\ud800.json"'])
