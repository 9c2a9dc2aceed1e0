"""`vlattn catt dictionary`: k-means dictionaries written next to the data, reproducible for a seed, refused over an
existing file, loaded by a training run through `init: file`; one-line errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from typer.testing import CliRunner

from vlattn.catt.files import read_dictionary
from vlattn.cli import app
from vlattn.config import config_to_dict
from vlattn.errors import DataError, VlattnError
from vlattn.data.features import open_store
from tests.training.conftest import DIM, make_tiny_data, make_tiny_vqa_data, tiny_config, tiny_vqa_config

runner = CliRunner()


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_data(tmp_path_factory.mktemp("catt-cli") / "data")


def dictionary(*args: str):
    return runner.invoke(app, ["--threads", "1", "catt", "dictionary", *args])


def user_error(*args: str) -> str:
    """The message of the input error the command stops with (``vlattn.cli.main`` prints it as one line, exit 2)."""
    result = dictionary(*args)
    assert isinstance(result.exception, VlattnError), result.output
    return str(result.exception)


def test_image_dictionary_next_to_the_data(data: Path) -> None:
    result = dictionary("--source", "image", "--size", "4", "--data", str(data), "--set", "data.max_regions=4")
    assert result.exit_code == 0, result.output
    path = data / "catt" / "image-4.npz"
    saved = read_dictionary(path)
    assert saved.entries.shape == (4, DIM)
    assert saved.meta["rows"] == 48 and saved.meta["source"] == "image"  # 24 training images x 2 regions
    # k-means centres of the training regions: inside their bounding box
    store = open_store(data / "features")
    train = np.concatenate([store.get(i).features for i in range(100, 124)])
    assert (saved.entries >= train.min(0) - 1e-6).all() and (saved.entries <= train.max(0) + 1e-6).all()
    # an existing file is kept unless --overwrite; the same seed gives the same entries, another seed others
    assert "image-4.npz: exists; pass --overwrite" in user_error("--source", "image", "--size", "4", "--data", str(data))
    assert dictionary("--source", "image", "--size", "4", "--data", str(data), "--overwrite").exit_code == 0
    np.testing.assert_array_equal(read_dictionary(path).entries, saved.entries)
    other = data / "other.npz"
    assert dictionary("--source", "image", "--size", "4", "--data", str(data), "--seed", "5", "--out", str(other)).exit_code == 0
    assert not np.array_equal(read_dictionary(other).entries, saved.entries)


def test_word_dictionary_from_a_trained_model(data: Path, tmp_path: Path) -> None:
    assert "--checkpoint: a word dictionary clusters a trained model's" in user_error(
        "--source", "word", "--size", "4", "--data", str(data))
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(config_to_dict(tiny_config(data, "train.epochs=1", "train.max_steps=2"))))
    run = tmp_path / "run"
    assert runner.invoke(app, ["train", "--config", str(config), "--out", str(run), "--device", "cpu"]).exit_code == 0
    result = dictionary("--source", "word", "--size", "40", "--config", str(config), "--checkpoint", str(run),
                        "--out", str(tmp_path / "words.npz"))
    assert result.exit_code == 0, result.output
    from safetensors.torch import load_file

    table = load_file(str(run / "checkpoints" / "best" / "model.safetensors"))["decoder.embed.weight"]
    entries = read_dictionary(tmp_path / "words.npz").entries
    assert entries.shape == (40, table.shape[1])
    assert {tuple(r) for r in entries.tolist()} <= {tuple(r) for r in table.tolist()}  # 40 > the used words


def test_training_loads_a_dictionary_file(data: Path, tmp_path: Path) -> None:
    assert dictionary("--source", "image", "--size", "3", "--data", str(data), "--out", str(data / "catt" / "d3.npz")).exit_code == 0
    cfg = tiny_config(data, "model.kind=catt", "model.options.image_dictionary.size=3",
                      "model.options.image_dictionary.init=file", "model.options.image_dictionary.path=catt/d3.npz",
                      "model.options.word_dictionary.size=4", "model.options.word_dictionary.init=random",
                      "train.epochs=1", "train.max_steps=1")
    from vlattn.tasks import captioning
    from vlattn.training.prepare import prepare_model

    data_set = captioning.stage_data(cfg, None)
    model = captioning.stage_model(cfg, data_set)
    start = model.decoder.dictionary.entries.detach().clone()
    prepare_model(model, lambda: data_set.prepare_resources(model, 0))
    np.testing.assert_array_equal(model.encoder.dictionary.entries.detach().numpy(), read_dictionary(data / "catt" / "d3.npz").entries)
    assert torch.equal(model.decoder.dictionary.entries, start)  # random: kept
    cfg.model.options["image_dictionary"]["path"] = "catt/missing.npz"
    model = captioning.stage_model(cfg, data_set)
    with pytest.raises(DataError, match="missing.npz: dictionary file not found"):
        prepare_model(model, lambda: data_set.prepare_resources(model, 0))


def test_bad_input_is_one_line(data: Path, tmp_path: Path) -> None:
    message = user_error("--source", "image", "--size", "1000", "--data", str(data), "--out", str(tmp_path / "x.npz"))
    assert "k-means needs at least 1000 points for 1000 dictionary entries, got 48" in message
    assert not (tmp_path / "x.npz").exists()
    assert "nowhere" in user_error("--source", "image", "--size", "2", "--data", str(tmp_path / "nowhere"))


def test_dictionaries_of_a_vqa_data_set(tmp_path: Path) -> None:
    """The command serves the config's task: with a VQA config, regions of the images with training questions and
    the question words of a trained VQA model."""
    root = make_tiny_vqa_data(tmp_path / "vqa")
    config = tmp_path / "vqa.yaml"
    config.write_text(yaml.safe_dump(config_to_dict(tiny_vqa_config(root, "train.epochs=1", "train.max_steps=2"))))
    result = dictionary("--source", "image", "--size", "5", "--config", str(config))
    assert result.exit_code == 0, result.output
    assert read_dictionary(root / "catt" / "image-5.npz").meta["rows"] == 24 * 2  # 24 training images x 2 regions
    run = tmp_path / "run"
    assert runner.invoke(app, ["train", "--config", str(config), "--out", str(run), "--device", "cpu"]).exit_code == 0
    result = dictionary("--source", "word", "--size", "30", "--config", str(config), "--checkpoint", str(run))
    assert result.exit_code == 0, result.output
    from safetensors.torch import load_file

    table = load_file(str(run / "checkpoints" / "best" / "model.safetensors"))["question.word_embedding.weight"]
    entries = read_dictionary(root / "catt" / "word-30.npz").entries
    assert {tuple(r) for r in entries.tolist()} <= {tuple(r) for r in table.tolist()}  # 30 > the question words
