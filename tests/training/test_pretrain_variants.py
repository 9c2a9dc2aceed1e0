"""LXMERT+CATT and LW-LXMERT through the pretraining task on the synthetic set: the dictionaries fitted by k-means
over the pretraining data (regions of its images, the WordPiece counts of its captions and questions), the heads
reading the concatenated streams (2d), the pretrained run as the --init of VQA fine-tuning of the same variant;
the full-size pretraining presets (lxmert-catt-pretrain, lw-lxmert-pretrain) build the paper's models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vlattn.cli import app
from vlattn.config import load_config
from vlattn.data.synth import generate
from vlattn.models import without_initialisation
from vlattn.models.profile import backbone_parameters
from vlattn.tasks.pretraining import build_model

runner = CliRunner()
TINY = ["model.feature_dim=8", "model.d_model=16", "model.num_heads=2", "model.d_ff=32", "model.encoder_layers=1",
        "model.decoder_layers=1", "model.options.object_layers=1", "model.max_positions=32", "train.epochs=1",
        "train.batch_size=16", "train.log_every=1", "data.max_regions=8", "eval.batch_size=32"]
VARIANTS = {
    "lxmert-catt": ["model.kind=lxmert_catt", "model.options.image_dictionary.size=6",
                    "model.options.word_dictionary.size=5"],
    "lw-lxmert": [*(f"model.{site}={{name: gmha, options: {{groups: 2}}}}" for site in
                    ("encoder_self_attention", "decoder_self_attention", "decoder_cross_attention")),
                  "model.feed_forward={name: gffn, options: {groups: 2}}"],
}


def sets(*items: str) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


@pytest.fixture(scope="module")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(tmp_path_factory.mktemp("variants") / "synth", images=40, seed=6, feature_dim=8,
                    extractor_epochs=1, val_size=10, test_size=4)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_variant_pretrains_and_fine_tunes_from_it(synth: Path, tmp_path: Path, variant: str) -> None:
    overrides = [f"data.root={synth}", *TINY, *VARIANTS[variant]]
    pretrained = tmp_path / "pretrain"
    result = runner.invoke(app, ["train", "--config", "lxmert-pretrain-demo", "--out", str(pretrained), "--device", "cpu",
                                 *sets(*overrides)])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in (pretrained / "metrics.jsonl").read_text().splitlines()]
    if variant == "lxmert-catt":
        prepared = next(r["modules"] for r in records if r["kind"] == "prepare")
        assert "backbone.encoder.image_dictionary" in prepared and "backbone.encoder.word_dictionary" in prepared
    run = tmp_path / "vqa"
    result = runner.invoke(app, ["train", "--config", "vqa-lxmert-demo", "--init", str(pretrained), "--out", str(run),
                                 "--device", "cpu", *sets(*overrides)])
    assert result.exit_code == 0, result.output


def test_heads_read_the_concatenated_streams() -> None:
    cfg = load_config("lxmert-pretrain-demo", [*TINY, *VARIANTS["lxmert-catt"]])
    model = build_model(cfg, 30, 5)
    assert model.backbone.output_dim == 32
    assert model.heads.words.transform[0].in_features == model.heads.regions.transform[0].in_features == 32
    assert model.heads.words.transform[0].out_features == model.heads.matching.in_features == 16


@pytest.mark.parametrize(("preset", "kind", "backbone"), [("lxmert-catt-pretrain", "lxmert_catt", 181_928_448),
                                                          ("lw-lxmert-pretrain", "lxmert", 100_932_480)])
def test_full_size_pretraining_presets(preset: str, kind: str, backbone: int) -> None:
    cfg = load_config(preset)
    assert cfg.task == "pretraining" and cfg.model.kind == kind
    with without_initialisation():
        model = build_model(cfg, 30522, 9500)
    assert backbone_parameters(model) == backbone  # LXMERT+CATT shares its layers: LXMERT's backbone
