"""The synthetic set from its pixels: the ``synth`` extractor on the rendered images reproduces the stored grid
features, and a run trained on them captions (and answers about) an image file as it does its stored features."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from vlattn.cli import app
from vlattn.config import config_to_dict
from vlattn.data.features import open_store
from vlattn.data.features.record import store_extractor
from vlattn.training.checkpoint import load_checkpoint
from tests.pixels.conftest import GRID


def test_synth_extraction_reproduces_the_stored_grid_features(synth_set: Path, tmp_path: Path, vlattn_cli) -> None:
    out = tmp_path / "again"
    code, stdout, stderr = vlattn_cli("features", "extract", "--images", str(synth_set / "images"), "--out", str(out),
                                      "--extractor", "synth", "--weights", str(synth_set), "--set", f"grid={GRID}",
                                      "--batch", "7", "--no-progress", "--device", "cpu")
    assert code == 0, stderr
    assert "30 images (30 extracted, 0 already there, 0 failed)" in stdout
    stored, again = open_store(synth_set / "grid_features"), open_store(out)
    assert stored.ids() == again.ids() == list(range(1, 31))
    for image_id in stored.ids():
        a, b = stored.get(image_id), again.get(image_id)
        np.testing.assert_array_equal(a.boxes, b.boxes)
        assert (a.width, a.height) == (b.width, b.height) == (48, 48)
        # both stores hold float16: equal, or one float16 step apart where float32 rounding straddled a boundary
        np.testing.assert_allclose(a.features, b.features, rtol=2 ** -10, atol=2 ** -24)
    ours, theirs = store_extractor(out), store_extractor(synth_set / "grid_features")
    assert ours["weights"]["sha256"] == theirs["weights"]["sha256"]
    assert ours["settings"] == theirs["settings"] == {"grid": GRID, "image_size": 48}
    assert Path(ours["weights"]["path"]) == Path(theirs["weights"]["path"]) == (synth_set / "extractor.safetensors").resolve()


def train(config: dict, run: Path) -> Path:
    """``vlattn train`` of ``config`` into ``run``."""
    path = run.parent / f"{run.name}.yaml"
    path.write_text(yaml.safe_dump(config))
    result = CliRunner().invoke(app, ["train", "--config", str(path), "--out", str(run), "--device", "cpu"])
    assert result.exit_code == 0, result.output
    return run


def caption_config(root: Path, features: str, dim: int) -> dict:
    from vlattn.validation import load_valid_config

    return config_to_dict(load_valid_config(None, [
        f"data.root={root}", f"data.features={features}", "data.vocab_min_count=1", "data.max_regions=10",
        f"model.feature_dim={dim}", "model.d_model=32", "model.num_heads=2", "model.d_ff=64", "model.encoder_layers=1",
        "model.decoder_layers=1", "train.epochs=2", "train.batch_size=16", "eval.beam_size=1", "eval.batch_size=8",
    ]))


def vqa_config(root: Path, features: str, dim: int) -> dict:
    from vlattn.validation import load_valid_config

    return config_to_dict(load_valid_config(None, [
        "task=vqa", "model.kind=mcan", f"data.root={root}", f"data.features={features}", "data.vocab_min_count=1",
        "data.max_regions=10", "data.answer_min_count=1", f"model.feature_dim={dim}", "model.d_model=32",
        "model.num_heads=2", "model.d_ff=64", "model.encoder_layers=1", "model.decoder_layers=1",
        "model.options.word_dim=16", "train.epochs=1", "train.batch_size=16", "eval.batch_size=16",
    ]))


@pytest.fixture(scope="module")
def grid_runs(synth_set: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    runs = tmp_path_factory.mktemp("synth-runs")
    captioner = train(caption_config(synth_set, "grid_features", 16), runs / "caption")
    answerer = train(vqa_config(synth_set, "grid_features", 16), runs / "vqa")
    return captioner, answerer


def test_runs_record_the_extractor_of_their_features(grid_runs: tuple[Path, Path], synth_set: Path) -> None:
    for run in grid_runs:
        for name in ("best", "last"):
            assert load_checkpoint(run / "checkpoints" / name).extractor == store_extractor(synth_set / "grid_features")


def test_caption_of_a_rendered_image_is_the_caption_of_its_features(grid_runs: tuple[Path, Path], synth_set: Path,
                                                                    vlattn_cli) -> None:
    run = grid_runs[0]
    ids = [25, 28, 30]
    code, stdout, stderr = vlattn_cli("caption", "--checkpoint", str(run), "--features",
                                      str(synth_set / "grid_features"), *[f"--ids={i}" for i in ids], "--device", "cpu")
    assert code == 0, stderr
    from_store = [row["caption"] for row in json.loads(stdout)]
    files = [synth_set / "images" / f"synth_{i:06d}.png" for i in ids]
    code, stdout, stderr = vlattn_cli("caption", "--checkpoint", str(run), *[f"--images={f}" for f in files],
                                      "--device", "cpu")
    assert code == 0, stderr
    rows = json.loads(stdout)
    assert [row["file"] for row in rows] == [str(f) for f in files]
    assert [row["caption"] for row in rows] == from_store


def test_answer_about_a_rendered_image_is_the_answer_about_its_features(grid_runs: tuple[Path, Path], synth_set: Path,
                                                                        vlattn_cli) -> None:
    run, question = grid_runs[1], "what color is the circle?"
    code, stdout, stderr = vlattn_cli("answer", "--checkpoint", str(run), "--features", str(synth_set / "grid_features"),
                                      "--image-id", "27", "--question", question, "--json", "--device", "cpu")
    assert code == 0, stderr
    from_store = json.loads(stdout)
    code, stdout, stderr = vlattn_cli("answer", "--checkpoint", str(run), "--image",
                                      str(synth_set / "images" / "synth_000027.png"), "--question", question, "--json",
                                      "--device", "cpu")
    assert code == 0, stderr
    from_file = json.loads(stdout)
    assert [a["answer"] for a in from_file["answers"]] == [a["answer"] for a in from_store["answers"]]
    assert [a["score"] for a in from_file["answers"]] == pytest.approx([a["score"] for a in from_store["answers"]],
                                                                       abs=1e-3)


def test_a_run_on_simulated_detections_refuses_image_files(synth_set: Path, tmp_path: Path, vlattn_cli) -> None:
    run = train({**caption_config(synth_set, "features", 16), "train": {"epochs": 1}}, tmp_path / "run")
    code, stdout, stderr = vlattn_cli("caption", "--checkpoint", str(run), "--images",
                                      str(synth_set / "images" / "synth_000001.png"), "--device", "cpu")
    assert code == 2 and stdout == ""
    assert stderr.count("\n") == 1 and "'synth-detections', which vlattn cannot run on pixels" in stderr
