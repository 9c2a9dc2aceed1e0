"""The `vlattn` command end to end on tiny data: train, eval --json, caption, profile, and one-line errors."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from vlattn.cli import app
from vlattn.config import config_to_dict
from vlattn.errors import VlattnError
from vlattn.layers import packed
from tests.training.conftest import make_tiny_data, tiny_config

runner = CliRunner()


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    root = tmp_path_factory.mktemp("cli")
    data = make_tiny_data(root / "data")
    config = root / "tiny.yaml"
    config.write_text(yaml.safe_dump(config_to_dict(tiny_config(data))))
    run = root / "run"
    result = runner.invoke(app, ["train", "--config", str(config), "--out", str(run), "--set", "train.epochs=1",
                                 "--device", "cpu"])
    assert result.exit_code == 0, result.output
    return data, config, run


def test_train_prints_stage_summary(trained: tuple[Path, Path, Path]) -> None:
    _, _, run = trained
    assert (run / "checkpoints" / "best" / "model.safetensors").is_file()
    assert yaml.safe_load((run / "config.yaml").read_text())["train"]["epochs"] == 1


def test_eval_json_and_outputs(trained: tuple[Path, Path, Path]) -> None:
    data, _, run = trained
    result = runner.invoke(app, ["eval", "--checkpoint", str(run), "--split", "test", "--json", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["split"] == "test" and report["images"] == 6
    assert {"Bleu_4", "ROUGE_L", "CIDEr"} <= set(report["scores"])
    assert "SPICE" in report["unavailable"] or "SPICE" in report["scores"]
    predictions = json.loads((run / "eval" / "test_predictions.json").read_text())
    assert sorted(p["image_id"] for p in predictions) == list(range(130, 136))
    assert all(isinstance(p["caption"], str) for p in predictions)
    assert json.loads((run / "eval" / "test_metrics.json").read_text())["scores"] == report["scores"]


def test_caption_selected_ids(trained: tuple[Path, Path, Path]) -> None:
    data, _, run = trained
    result = runner.invoke(app, ["caption", "--checkpoint", str(run), "--features", str(data / "features"),
                                 "--ids", "101", "--ids", "103", "--beam-size", "1", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [r["image_id"] for r in rows] == [101, 103]


@pytest.mark.skipif(not packed.ONEDNN_LINEAR, reason="this torch build has no oneDNN linear")
def test_packed_output_flag_decodes_through_the_packed_projection(
    trained: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """--packed-output turns eval.packed_output on for the run (the saved config has it off), --plain-output off;
    the captions are the same either way, and eval's predictions are the captions."""
    data, _, run = trained
    packs: list[int] = []
    original = packed.PackedWeight.weight
    monkeypatch.setattr(packed.PackedWeight, "weight", lambda self, layer: packs.append(1) or original(self, layer))
    captions = {}
    for flag in ("--packed-output", "--plain-output"):
        packs.clear()
        result = runner.invoke(app, ["caption", "--checkpoint", str(run), "--features", str(data / "features"),
                                     "--device", "cpu", flag])
        assert result.exit_code == 0, result.output
        captions[flag] = {row["image_id"]: row["caption"] for row in json.loads(result.stdout)}
        assert bool(packs) == (flag == "--packed-output")
    assert captions["--packed-output"] == captions["--plain-output"]
    packs.clear()
    result = runner.invoke(app, ["eval", "--checkpoint", str(run), "--json", "--device", "cpu", "--packed-output"])
    assert result.exit_code == 0, result.output
    assert packs
    predictions = json.loads((run / "eval" / "test_predictions.json").read_text())
    assert {p["image_id"]: p["caption"] for p in predictions} == {
        i: captions["--plain-output"][i] for i in range(130, 136)}


def test_profile_json(trained: tuple[Path, Path, Path]) -> None:
    _, config, _ = trained
    result = runner.invoke(app, ["profile", "--config", str(config), "--json", "--vocab-size", "50", "--batch", "2",
                                 "--regions", "3", "--length", "4", "--repeats", "1"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    params = report["parameters"]
    assert params["total"] == params["encoder"] + params["decoder"]
    assert report["flops"]["train_step"] > report["flops"]["decode_step"] > 0
    backbone = report["backbone"]
    assert 0 < backbone["parameters"] < params["total"] and backbone["madds_per_sample"] > 0


def test_profile_length_beyond_the_positions_is_one_line() -> None:
    result = _cli("profile", "--config", "demo", "--length", "100", "--repeats", "1")
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "--length 100 needs model.max_positions >= 101" in result.stderr


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vlattn.cli", *args], capture_output=True, text=True, timeout=120)


def test_bad_input_is_one_line_with_exit_2(trained: tuple[Path, Path, Path], tmp_path: Path) -> None:
    _, config, run = trained
    result = _cli("train", "--config", str(config), "--out", str(tmp_path / "r"), "--set", "model.dmodel=3")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]  # one line, no traceback
    assert "model.dmodel" in result.stderr
    result = _cli("eval", "--checkpoint", str(tmp_path / "nowhere"))
    assert result.returncode == 2 and "no checkpoint found" in result.stderr and "nowhere" in result.stderr


def user_error(args: list[str]) -> str:
    """The message of the input error a command stops with (``main`` prints it as one line with exit 2, see
    :func:`test_bad_input_is_one_line_with_exit_2`)."""
    result = runner.invoke(app, args)
    assert isinstance(result.exception, VlattnError), result.output
    return str(result.exception)


def test_stage_must_belong_to_the_task(trained: tuple[Path, Path, Path], tmp_path: Path) -> None:
    _, config, _ = trained
    message = user_error(["train", "--config", str(config), "--out", str(tmp_path / "r"), "--stage", "nope"])
    assert message.startswith("--stage: task 'captioning' has no stage 'nope'; valid: xe (cross-entropy")
    assert not (tmp_path / "r").exists()


def test_a_vocabulary_that_does_not_match_the_weights_is_refused(trained: tuple[Path, Path, Path], tmp_path: Path) -> None:
    data, _, run = trained
    checkpoint = Path(shutil.copytree(run / "checkpoints" / "best", tmp_path / "checkpoint"))
    words = json.loads((checkpoint / "vocab-words.json").read_text())
    words["itos"][4], words["itos"][5] = words["itos"][5], words["itos"][4]  # same size: the weights still load
    (checkpoint / "vocab-words.json").write_text(json.dumps(words))
    for command in (["caption", "--features", str(data / "features"), "--ids", "101"], ["eval"]):
        message = user_error([*command, "--checkpoint", str(checkpoint), "--device", "cpu"])
        assert "vocab-words.json" in message and "vocabulary does not match the weights" in message


def test_a_checkpoint_with_only_vocab_json_has_no_words_vocabulary(trained: tuple[Path, Path, Path], tmp_path: Path) -> None:
    """``vocab.json`` named the vocabulary during development only: such a checkpoint is a one-line error."""
    data, _, run = trained
    new, old = run / "checkpoints" / "best", tmp_path / "old"
    old.mkdir()
    save_file(load_file(str(new / "model.safetensors")), str(old / "model.safetensors"))  # no vocabulary metadata
    shutil.copy(new / "config.json", old / "config.json")
    shutil.copy(new / "vocab-words.json", old / "vocab.json")
    result = runner.invoke(app, ["caption", "--checkpoint", str(old), "--features", str(data / "features"),
                                 "--beam-size", "2", "--device", "cpu"])
    assert result.exit_code != 0 and "checkpoint has no 'words' vocabulary" in str(result.exception)


def test_eval_reports_bias_metrics_with_a_lexicon(trained: tuple[Path, Path, Path], tmp_path: Path) -> None:
    """With the ground-truth scenes of a synthetic set, `vlattn eval` adds CHAIR_s, CHAIR_i and A@Attr, as counted by
    hand from its predictions (each tiny image shows one object; captions say "<colour> <shape>")."""
    from tests.training.conftest import COLOURS, SHAPES

    data, _, run = trained
    copy = tmp_path / "data"
    shutil.copytree(data, copy)
    truth = {100 + i: (COLOURS[i % 4], SHAPES[(i // 4) % 3]) for i in range(36)}
    scenes = [{"image_id": i, "objects": [{"shape": s, "colour": c, "size": "small"}]} for i, (c, s) in truth.items()]
    (copy / "scenes.json").write_text(json.dumps({"info": {}, "images": scenes}))
    result = runner.invoke(app, ["eval", "--checkpoint", str(run), "--split", "test", "--data", str(copy), "--json",
                                 "--device", "cpu"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    predictions = json.loads((run / "eval" / "test_predictions.json").read_text())
    hallucinating = hallucinated = colours = right = mentioned = 0
    for row in predictions:
        words = row["caption"].split()
        colour, shape = truth[row["image_id"]]
        shapes = {w for w in words if w in SHAPES}
        mentioned += len(shapes)
        hallucinated += len(shapes - {shape})
        hallucinating += bool(shapes - {shape})
        for first, second in zip(words, words[1:]):
            if first in COLOURS and second in SHAPES:
                colours += 1
                right += (first, second) == (colour, shape)
    scores = report["scores"]
    assert scores["CHAIR_s"] == pytest.approx(hallucinating / len(predictions))
    assert scores["CHAIR_i"] == pytest.approx(hallucinated / mentioned if mentioned else 0.0)
    assert mentioned and colours and scores["A@Attr"] == pytest.approx(right / colours)
    assert report["bias"]["lexicon"] == "synthetic"
    # without a lexicon the metrics are listed as unavailable, with the reason
    plain = json.loads(runner.invoke(app, ["eval", "--checkpoint", str(run), "--split", "test", "--json",
                                           "--device", "cpu"]).stdout)
    assert "CHAIR_s" not in plain["scores"] and "scenes.json is absent" in plain["unavailable"]["CHAIR"]


def test_config_list_and_show() -> None:
    """`vlattn config list` names every preset with its description; `vlattn config show NAME` prints the resolved
    config (base chain, overrides, defaults), which loads back to the same config."""
    from vlattn import shipped_presets as presets
    from vlattn.validation import load_valid_config, valid_config

    listed = runner.invoke(app, ["config", "list"])
    assert listed.exit_code == 0, listed.output
    lines = listed.output.strip().splitlines()
    assert [line.split()[0] for line in lines] == presets.names()
    assert all(line.split(None, 1)[1] == presets.describe()[line.split()[0]] for line in lines)
    shown = runner.invoke(app, ["config", "show", "m2-demo", "--set", "train.epochs=3"])
    assert shown.exit_code == 0, shown.output
    data = yaml.safe_load(shown.output)
    assert data["model"]["kind"] == "m2" and data["model"]["d_model"] == 128 and data["train"]["epochs"] == 3
    assert "base" not in data and "description" not in data
    assert config_to_dict(valid_config(data)) == config_to_dict(load_valid_config("m2-demo", ["train.epochs=3"]))
    assert "unknown config key model.dmodel" in user_error(["config", "show", "demo", "--set", "model.dmodel=3"])
