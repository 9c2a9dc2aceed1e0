"""The Up-Down captioner (with additive and SLA top-down attention) through the captioning task's stages end to end
on tiny data: XE, then SCST from its checkpoint, then evaluation (checkpoints, prepare hooks, decoding)."""

from __future__ import annotations

from pathlib import Path

from tests.training.conftest import DIM
from vlattn import tasks
from vlattn.validation import load_valid_config
from vlattn.tasks import EvalRequest


def updown_config(root: Path, mechanism: str):
    return load_valid_config("updown-demo", [
        f"data.root={root}", "data.vocab_min_count=1", "data.max_regions=4", f"model.feature_dim={DIM}",
        "model.d_model=16", "model.options.embed_dim=8", "model.options.attention_dim=8",
        f"model.decoder_cross_attention.name={mechanism}", "train.epochs=1", "train.batch_size=8",
        "train.scst_epochs=1", "train.scst_batch_size=8", "train.scst_samples=2", "eval.beam_size=2",
        "eval.batch_size=8", "eval.max_len=6",
    ])


def test_updown_trains_with_xe(tiny_data: Path, tmp_path: Path) -> None:
    assert "CIDEr" in tasks.train(updown_config(tiny_data, "additive"), tmp_path / "xe", device="cpu")


def test_updown_sla_trains_with_xe_then_scst_and_evaluates(tiny_data: Path, tmp_path: Path) -> None:
    cfg = updown_config(tiny_data, "sla")
    assert "CIDEr" in tasks.train(cfg, tmp_path / "xe", device="cpu")
    assert "CIDEr" in tasks.train(cfg, tmp_path / "scst", stage="scst", init=tmp_path / "xe", device="cpu")
    report = tasks.evaluate(tmp_path / "scst", EvalRequest(split="test", device="cpu"))
    assert report["images"] == 6 and "CIDEr" in report["scores"]
