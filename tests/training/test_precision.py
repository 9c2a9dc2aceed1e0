"""Mixed precision and compilation (vlattn/precision.py): bf16/fp16 autocast of decoding and training steps on
the CPU against float32, the fp16 loss scaler in the training state, and compiled layers equal to eager ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from registry_cases import BOS, EOS, ModelCase, model_inputs, tiny_inputs

from vlattn import tasks
from vlattn.decoding import beam_search
from vlattn.errors import ConfigError
from vlattn.models import model_kind
from vlattn.precision import autocast, compile_layers
from vlattn.shipped_presets import names
from vlattn.training.checkpoint import load_checkpoint
from vlattn.validation import load_valid_config
from tests.slow import SLOW_SCALE
from tests.training.conftest import tiny_config

CPU = torch.device("cpu")


@pytest.mark.parametrize("kind", ["transformer", "m2"])
def test_bf16_autocast_runs_the_model_in_bf16_close_to_fp32(kind: str) -> None:
    model, inputs = ModelCase(kind).build(), tiny_inputs()
    reference = model(model_inputs(inputs), inputs["tokens"]).log_softmax(-1)
    with torch.no_grad(), autocast("bf16", CPU):
        logits = model(model_inputs(inputs), inputs["tokens"])
        beams = beam_search(model, model_inputs(inputs), bos=BOS, eos=EOS, beam_size=2, max_len=5)
    assert logits.dtype == torch.bfloat16  # the output layer ran under autocast
    torch.testing.assert_close(logits.float().log_softmax(-1), reference, atol=0.1, rtol=0.05)
    # the best beam's score under bf16 is the fp32 model's score of that caption, to bf16 precision
    tokens = beams.tokens[:, 0]
    prefix = torch.cat([torch.full_like(tokens[:, :1], BOS), tokens[:, :-1]], 1)
    per_token = model(model_inputs(inputs), prefix).log_softmax(-1).gather(2, tokens[..., None]).squeeze(2)
    torch.testing.assert_close(beams.log_probs[:, 0].float(), per_token * (beams.log_probs[:, 0] != 0), atol=0.1, rtol=0.05)


def first_loss(run: Path) -> float:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return next(r["loss"] for r in records if r["kind"] == "train")


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_training_under_autocast_matches_fp32_first_loss(tiny_data: Path, tmp_path: Path, precision: str) -> None:
    options = ("train.epochs=1", "train.max_steps=2", "model.dropout=0.0")
    tasks.train(tiny_config(tiny_data, *options), tmp_path / "fp32", device="cpu")
    tasks.train(tiny_config(tiny_data, *options, f"train.precision={precision}"), tmp_path / precision, device="cpu")
    assert first_loss(tmp_path / precision) == pytest.approx(first_loss(tmp_path / "fp32"), rel=0.02)
    state = load_checkpoint(tmp_path / precision / "checkpoints" / "last", with_state=True).train_state
    assert ("scaler" in state) == (precision == "fp16")  # the fp16 loss scale resumes with the run
    if precision == "fp16":
        assert state["scaler"]["scale"] > 0


@pytest.mark.slow
def test_compiled_layers_equal_eager_layers() -> None:
    # the reduced size captures the layers' graphs (dynamo) and runs them through AOT autograd; the full size
    # (VLATTN_SLOW_SCALE=1) also generates and compiles inductor's C++ kernels (minutes on this machine)
    backend = "inductor" if SLOW_SCALE >= 1 else "aot_eager"
    model, inputs = ModelCase("m2").build(), tiny_inputs()
    eager = model(model_inputs(inputs), inputs["tokens"])
    eager_beams = beam_search(model, model_inputs(inputs), bos=BOS, eos=EOS, beam_size=2, max_len=3)
    compile_layers(model, backend)
    assert set(model.state_dict()) == set(ModelCase("m2").build().state_dict())  # names unchanged
    torch.testing.assert_close(model(model_inputs(inputs), inputs["tokens"]), eager, atol=1e-5, rtol=1e-5)
    beams = beam_search(model, model_inputs(inputs), bos=BOS, eos=EOS, beam_size=2, max_len=3)
    assert torch.equal(beams.tokens, eager_beams.tokens)
    torch.testing.assert_close(beams.scores, eager_beams.scores, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("preset", names())
def test_kinds_marked_layered_are_the_models_with_a_layer_stack(preset: str) -> None:
    """``ModelKind.layered`` (what the config check reads) agrees with the models built: compilable, or refused."""
    cfg = load_valid_config(preset)
    with torch.device("meta"):
        model = tasks.task_of(cfg.task).create_model(cfg, vocab_size=40, num_answers=7 if cfg.task in ("vqa", "pretraining") else None)
    assert hasattr(model, "backbone_layers") == model_kind(cfg.model.kind, cfg.task).layered
    if not hasattr(model, "backbone_layers"):
        with pytest.raises(ConfigError, match=rf"^compile: {type(model).__name__} has no layer stack to compile$"):
            compile_layers(model)


@pytest.mark.parametrize("key", ["train.compile", "eval.compile"])
def test_compiling_updown_is_refused_before_anything_is_written(vlattn_cli, tmp_path: Path, key: str) -> None:
    code, out, err = vlattn_cli("train", "--config", "updown-demo", "--set", f"{key}=true", "--out",
                                str(tmp_path / "run"))
    assert code == 2 and out == ""
    assert err.strip().endswith(f"{key}: model kind 'updown' has no layer stack to compile (set it to false)")
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "run").exists()
