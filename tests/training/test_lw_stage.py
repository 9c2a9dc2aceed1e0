"""LW-Transformer training (issue 12): the captioning XE stage and the VQA train stage run at the sqrt(k)-scaled
rate of Sec. IV-C, the SCST stage at its rate as given."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.training.conftest import make_tiny_vqa_data, tiny_config, tiny_vqa_config
from vlattn import tasks

GROUP_WISE = [f"model.{site}={{name: gmha, options: {{groups: 2}}}}"
              for site in ("encoder_self_attention", "decoder_self_attention", "decoder_cross_attention")]
GROUP_WISE += ["model.feed_forward={name: gffn, options: {groups: 2}}", "train.lr_scaling=sqrt_groups",
               "train.schedule={name: constant, options: {lr: 1.0e-3}}", "train.epochs=1", "train.max_steps=2"]
LW = [*GROUP_WISE, "train.scst_schedule={name: constant, options: {lr: 1.0e-4}}", "train.scst_epochs=1",
      "train.val_max_images=2"]


def logged_rates(run: Path) -> list[float]:
    return [r["lr"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if r["kind"] == "train"]


def test_xe_rate_is_scaled_by_sqrt_k_and_scst_rate_is_not(tiny_data: Path, tmp_path: Path) -> None:
    cfg = tiny_config(tiny_data, *LW)
    tasks.train(cfg, tmp_path / "xe", device="cpu")
    assert logged_rates(tmp_path / "xe") == [pytest.approx(1e-3 * math.sqrt(2))] * 2
    tasks.train(cfg, tmp_path / "scst", stage="scst", init=tmp_path / "xe", device="cpu")
    assert logged_rates(tmp_path / "scst") == [pytest.approx(1e-4)]  # 24 images: one SCST batch


def test_vqa_rate_is_scaled_by_sqrt_k(tmp_path: Path) -> None:
    cfg = tiny_vqa_config(make_tiny_vqa_data(tmp_path / "data", images=12), *GROUP_WISE)
    tasks.train(cfg, tmp_path / "vqa", device="cpu")
    assert logged_rates(tmp_path / "vqa") == [pytest.approx(1e-3 * math.sqrt(2))] * 2
