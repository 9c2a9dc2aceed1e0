"""``--resume`` continues a run as it was configured: the run's own config, changed only by ``--set`` (reported),
a ``--config`` checked and otherwise ignored (reported); task, model and data fixed; and a command that fails
leaves every file of the run as it was."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from vlattn import tasks
from vlattn.config import config_to_dict
from vlattn.data.vocab import Vocabulary
from vlattn.errors import ConfigError
from vlattn.training.rundir import Setting, resume_config
from tests.test_bad_input import one_line
from tests.training.conftest import Crash, crash_at_step, tiny_config


@pytest.fixture(scope="module")
def one_epoch(tiny_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("base")
    tasks.train(tiny_config(tiny_data, "train.epochs=1"), root / "run", device="cpu")
    (root / "tiny.yaml").write_text(yaml.safe_dump(config_to_dict(tiny_config(tiny_data, "train.epochs=1"))))
    return root / "run"


@pytest.fixture
def run(one_epoch: Path, tmp_path: Path) -> Path:
    """A copy of a finished one-epoch run (``RUN/../tiny.yaml`` is its config)."""
    shutil.copytree(one_epoch, tmp_path / "run")
    shutil.copy(one_epoch.parent / "tiny.yaml", tmp_path / "tiny.yaml")
    return tmp_path / "run"


def snapshot(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file() and p.name != ".lock"}


def history(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]


def test_set_changes_a_setting_and_is_reported(run: Path, vlattn_cli, caplog: pytest.LogCaptureFixture) -> None:
    code, _, err = vlattn_cli("train", "--out", str(run), "--resume", "--set", "train.epochs=2", "--device", "cpu")
    assert code == 0, err
    assert "resume: train.epochs: 1 -> 2 (--set)" in caplog.text
    assert yaml.safe_load((run / "config.yaml").read_text())["train"]["epochs"] == 2
    assert history(run)[-1]["settings"] == [{"key": "train.epochs", "before": 1, "after": 2, "source": "--set"}]
    val = [r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if r["kind"] == "val"]
    assert [r["epoch"] for r in val] == [0, 1]


def test_a_config_given_on_resume_does_not_replace_the_runs(run: Path, vlattn_cli, caplog: pytest.LogCaptureFixture) -> None:
    other = run.parent / "other.yaml"
    data = yaml.safe_load((run.parent / "tiny.yaml").read_text())
    data["train"].update(epochs=5, batch_size=4)
    other.write_text(yaml.safe_dump(data))
    code, _, err = vlattn_cli("train", "--config", str(other), "--out", str(run), "--resume", "--set", "train.epochs=2",
                              "--device", "cpu")
    assert code == 0, err
    saved = yaml.safe_load((run / "config.yaml").read_text())["train"]
    assert (saved["epochs"], saved["batch_size"]) == (2, 8)  # --set wins; the rest of --config is ignored
    assert "train.batch_size=4 of --config ignored: the run keeps 8 (use --set to change it)" in caplog.text
    assert {(s["key"], s["source"]) for s in history(run)[-1]["settings"]} == {
        ("train.epochs", "--set"), ("train.batch_size", "--config (ignored)")}


@pytest.mark.parametrize("args, message", [
    (["--set", "model.d_model=64"], "cannot resume with model.d_model=64 (--set): the run was trained with 32"),
    (["--set", "data.max_regions=3"], "cannot resume with data.max_regions=3 (--set): the run was trained with 4"),
    (["--set", "train.epochs=many"], "--set: config key train.epochs: expected int, got 'many'"),
    (["--stage", "scst", "--set", "train.epochs=3"], "cannot resume stage 'scst' from a checkpoint of stage 'xe'"),
    (["--config", "{other}"], "cannot resume: --config has model.num_heads=4 but the run was trained with 2"),
])
def test_a_failed_resume_leaves_the_run_as_it_was(run: Path, vlattn_cli, args: list[str], message: str) -> None:
    other = run.parent / "other.yaml"
    other.write_text((run.parent / "tiny.yaml").read_text().replace("num_heads: 2", "num_heads: 4"))
    before = snapshot(run)
    code, _, err = vlattn_cli("train", "--out", str(run), "--resume", "--device", "cpu",
                              *[a.format(other=other) for a in args])
    assert code == 2 and one_line(err) and message in err, err
    assert snapshot(run) == before


def test_a_fresh_start_that_fails_leaves_nothing_behind(tiny_data: Path, tmp_path: Path, vlattn_cli) -> None:
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(config_to_dict(tiny_config(tiny_data))))
    out = tmp_path / "new" / "run"
    code, _, err = vlattn_cli("train", "--config", str(config), "--out", str(out), "--set", "model.feature_dim=32")
    assert code == 2 and "model.feature_dim=32 but the feature store holds 16-d regions" in err
    assert not (tmp_path / "new").exists()


def test_a_fresh_start_refuses_a_directory_that_is_not_a_run(tiny_data: Path, tmp_path: Path, vlattn_cli) -> None:
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(config_to_dict(tiny_config(tiny_data))))
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "config.yaml").write_text("my: notes")
    code, _, err = vlattn_cli("train", "--config", str(config), "--out", str(tmp_path / "home"))
    assert code == 2 and "not a vlattn run directory and not empty (it holds config.yaml)" in err
    assert (tmp_path / "home" / "config.yaml").read_text() == "my: notes"


def test_the_runs_own_vocabulary_must_match_the_weights(run: Path, vlattn_cli) -> None:
    words = Vocabulary.load(run / "vocab-words.json")
    swapped = list(words.itos)
    swapped[5], swapped[6] = swapped[6], swapped[5]
    Vocabulary(swapped[4:]).save(run / "vocab-words.json")
    code, _, err = vlattn_cli("train", "--out", str(run), "--resume", "--set", "train.epochs=2", "--device", "cpu")
    assert code == 2 and one_line(err), err
    assert f"{run}/vocab-words.json: vocabulary does not match the weights of the checkpoint resumed" in err


def test_resume_config_sources(tiny_data: Path) -> None:
    trained = tiny_config(tiny_data)
    saved = tiny_config(tiny_data, "train.epochs=4")  # an earlier resume stopped before its next checkpoint
    given = tiny_config(tiny_data, "train.epochs=4", "train.grad_clip=1.0", "eval.beam_size=3")
    config, settings = resume_config(trained, saved, given, ["eval.beam_size=3", "data.root=/moved"])
    assert (config.train.epochs, config.train.grad_clip, config.eval.beam_size, config.data.root) == (4, 0.0, 3, "/moved")
    assert settings == [
        Setting("data.root", str(tiny_data), "/moved", "--set"),
        Setting("eval.beam_size", 2, 3, "--set"),
        Setting("train.epochs", 2, 4, "config.yaml"),
        Setting("data.root", "/moved", str(tiny_data), "--config (ignored)"),
        Setting("train.grad_clip", 0.0, 1.0, "--config (ignored)"),
    ]
    with pytest.raises(ConfigError, match="cannot resume with model.d_model=64 \\(config.yaml\\)"):
        resume_config(trained, tiny_config(tiny_data, "model.d_model=64"), None, [])
    # a whole section given by --set names every key it changes as --set
    _, settings = resume_config(trained, trained, None, ["train.schedule={name: constant, options: {lr: 0.001}}"])
    assert {s.source for s in settings} == {"--set"} and {s.key for s in settings} >= {"train.schedule.name"}


def test_another_batch_size_mid_epoch_skips_no_sample(tiny_data: Path, tmp_path: Path,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    """72 training captions, batch 8, checkpoint every 4 steps, a crash in step 6: the run resumed with
    ``--set train.batch_size=5`` takes the 40 captions after the first 32 in 8 steps of 5 (not 72 - 4 * 5 after a
    position counted in batches), validates at step 12, then 15 steps for epoch 2."""
    run = tmp_path / "run"
    with crash_at_step(6), pytest.raises(Crash):
        tasks.train(tiny_config(tiny_data, "train.epochs=2", "train.checkpoint_every=4"), run, device="cpu")
    tasks.train(None, run, overrides=["train.batch_size=5"], resume=True, device="cpu")
    assert "resume: train.batch_size: 8 -> 5 (--set)" in caplog.text
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["kind"] == "train"] == list(range(1, 28))
    assert [r["step"] for r in records if r["kind"] == "val"] == [12, 27]
