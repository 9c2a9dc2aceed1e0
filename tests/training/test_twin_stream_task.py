"""The twin-stream SLA model and its stacked-attention baseline through the VQA task, by configuration only
(``model.kind: twin_stream``): ``vlattn train`` and ``vlattn eval`` on the tiny VQA data (the official accuracy
of both), GloVe initialisation through the shared question encoder's prepare hook, ``vlattn profile`` (the two
streams are the backbone). A grid store of other sizes is a row of docs/errors.md."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from vlattn.cli import app
from vlattn.config import config_to_dict
from vlattn.tasks.vqa import TRAIN
from vlattn.training.prepare import prepare_model
from tests.training.conftest import make_tiny_vqa_data, tiny_vqa_config

runner = CliRunner()
TWIN = ["model.kind=twin_stream", "model.d_model=16", "model.dropout=0.0", "model.options.word_dim=16",
        "model.options.lstm_dim=16", "model.options.fusion_dim=32", "model.options.features=raw"]


def twin_config(root: Path, attention: str, *extra: str):
    """The tiny VQA config with the twin-stream model of ``attention`` units (T = 2)."""
    return tiny_vqa_config(root, *TWIN, f"model.options.attention.name={attention}",
                           "model.options.attention.options.units=2", *extra, stack=False)


def write(path: Path, cfg) -> Path:
    path.write_text(yaml.safe_dump(config_to_dict(cfg)))
    return path


@pytest.fixture(scope="module")
def vqa_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_vqa_data(tmp_path_factory.mktemp("tinyvqa") / "data")


@pytest.mark.parametrize("attention", ["sla", "stacked"])
def test_train_and_eval_through_the_vqa_task(attention: str, vqa_data: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    config = write(tmp_path / "c.yaml", twin_config(vqa_data, attention, "train.epochs=8", "train.schedule.options.lr=0.01"))
    result = runner.invoke(app, ["train", "--config", str(config), "--out", str(run), "--device", "cpu"])
    assert result.exit_code == 0, result.output
    evaluated = runner.invoke(app, ["eval", "--checkpoint", str(run), "--split", "val", "--json", "--device", "cpu"])
    assert evaluated.exit_code == 0, evaluated.output
    report = json.loads(evaluated.stdout)
    assert Path(report["results"]).name == "vqa_OpenEnded_mscoco_val_twin_stream_results.json"
    assert set(report["perAnswerType"]) == {"other", "yes/no"}
    assert report["overall"] >= 90  # one-hot colour and shape features: both models learn them


def test_word_vectors_through_the_shared_question_encoder(vqa_data: Path, tmp_path: Path) -> None:
    glove = tmp_path / "vectors.txt"
    glove.write_text("color " + " ".join(str(v) for v in range(16)) + "\n")
    cfg = twin_config(vqa_data, "sla", f"model.word_vectors={glove}")
    torch.manual_seed(0)
    data = TRAIN.load_data(cfg, None)
    model = TRAIN.build_model(cfg, data)
    notes = prepare_model(model, lambda: data.prepare_resources(model, cfg.train.seed))
    assert notes == [f"question (word vectors for 1 of {len(data.words) - 4} words from vectors.txt)"]
    assert model.word_embeddings.weight[data.words.stoi["color"]].tolist() == list(map(float, range(16)))


def test_profile_counts_the_two_streams_as_the_backbone(vqa_data: Path, tmp_path: Path) -> None:
    config = write(tmp_path / "c.yaml", twin_config(vqa_data, "sla"))
    result = runner.invoke(app, ["profile", "--config", str(config), "--json", "--batch", "2", "--repeats", "1",
                                 "--regions", "5", "--length", "4", "--answers", "7", "--vocab-size", "30"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    parameters = report["parameters"]
    assert report["backbone"]["parameters"] == parameters["visual"] + parameters["textual"] > 0
    assert parameters["classifier"] == (64 * 32 + 32) + (32 * 7 + 7)  # FC 2F -> F, classifier F -> C
    assert report["backbone"]["madds_per_sample"] > 0

