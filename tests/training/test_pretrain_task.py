"""The pretraining task end to end on the synthetic set (`vlattn data synth`: captions, VQA questions, WordPiece
vocab.txt, and a feature store labelling every region with its shape and size-colour class): `vlattn train --config
lxmert-pretrain-demo` (stage pretrain) with a tiny model, its metrics, `vlattn eval` of the pretrained run, the
pretrained run as the `--init` of VQA and NLVR2 fine-tuning (the encoder's weights carried over, a new head), an
exact resume, and the one-line refusals (bad keys, a store without labels, a model that does not match)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from vlattn import tasks
from vlattn.cli import app
from vlattn.config import load_config
from vlattn.data.features import RegionFeatures, open_store, write_memmap
from vlattn.data.features.labels import region_labels
from vlattn.data.synth import generate
from vlattn.data.synth.labels import ATTRIBUTE_NAMES, OBJECT_NAMES
from vlattn.data.wordpiece import WordPieceVocabulary
from vlattn.errors import ConfigError, DataError
from vlattn.tasks.pretrained import load_pretrained
from vlattn.tasks.vqa import TRAIN as VQA_TRAIN
from vlattn.training.checkpoint import load_checkpoint

runner = CliRunner()
TINY = ["model.feature_dim=8", "model.d_model=16", "model.num_heads=2", "model.d_ff=32", "model.encoder_layers=1",
        "model.decoder_layers=1", "model.options.object_layers=1", "model.max_positions=32", "train.epochs=2", "train.batch_size=16",
        "train.log_every=1", "data.max_regions=8", "eval.batch_size=32"]


def sets(*items: str) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


@pytest.fixture(scope="module")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(tmp_path_factory.mktemp("pretrain") / "synth", images=48, seed=5, feature_dim=8,
                    extractor_epochs=1, val_size=12, test_size=4)


@pytest.fixture(scope="module")
def pretrained(synth: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("runs") / "pretrain"
    result = runner.invoke(app, ["train", "--config", "lxmert-pretrain-demo", "--stage", "pretrain", "--out", str(run),
                                 "--device", "cpu", *sets(f"data.root={synth}", *TINY)])
    assert result.exit_code == 0, result.output
    return run


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_synthetic_store_labels_every_region_with_its_object(synth: Path) -> None:
    scenes = json.loads((synth / "scenes.json").read_text())["images"]
    store = open_store(synth / "features")
    for scene in scenes[:10]:
        labels = region_labels(store, scene["image_id"])
        for k, region in enumerate(scene["regions"]):
            obj = scene["objects"][region["object"]] if region["object"] is not None else None
            assert OBJECT_NAMES[labels.objects[k]] == (obj["shape"] if obj else "background")
            assert ATTRIBUTE_NAMES[labels.attributes[k]] == (f"{obj['size']} {obj['colour']}" if obj else "none")
        assert (labels.object_scores == 1).all() and (labels.attribute_scores == 1).all()


def test_pretraining_runs_with_the_four_tasks(pretrained: Path) -> None:
    logged = records(pretrained)
    data = next(r for r in logged if r["kind"] == "data")
    # 32 training images with 5 captions and some questions each; questions carry answers, captions none
    assert data["train_images"] == 32 and 0 < data["train_answered"] < data["train_pairs"]
    steps = [r for r in logged if r["kind"] == "train"]
    for r in steps:
        assert {"words_loss", "matching_loss", "feature_loss", "object_loss", "attribute_loss"} <= set(r)
        # the paper's schedule: image QA only in the last half of the epochs (here the second of two)
        assert ("answers_loss" in r) == (r["epoch"] == 1)
    val = [r for r in logged if r["kind"] == "val"]
    assert len(val) == 2
    for name in ("words", "matching", "objects", "attributes", "answers"):
        assert 0.0 <= val[-1][f"{name}_accuracy"] <= 100.0
    assert val[-1]["minus_loss"] == -val[-1]["loss"]
    saved = load_checkpoint(pretrained)
    assert saved.config.task == "pretraining" and {"words", "answers"} <= set(saved.hashes)
    result = runner.invoke(app, ["eval", "--checkpoint", str(pretrained), "--device", "cpu", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    # validation corrupts the same way every time: the evaluation of the best checkpoint repeats its metrics
    best = max(val, key=lambda r: r["minus_loss"])
    assert report["loss"] == pytest.approx(best["loss"], rel=1e-5)


def test_fine_tuning_starts_from_the_pretrained_encoder(synth: Path, pretrained: Path, tmp_path: Path) -> None:
    cfg = load_config("vqa-lxmert-demo", [f"data.root={synth}", *TINY])
    source = load_checkpoint(pretrained)
    data = VQA_TRAIN.load_data(cfg, source)
    assert data.words.itos == source.vocabulary("words", WordPieceVocabulary.load).itos
    torch.manual_seed(0)
    model = VQA_TRAIN.build_model(cfg, data)
    head = {k: v.clone() for k, v in model.state_dict().items() if k.startswith("head.")}
    load_pretrained(model, source)
    weights = load_file(str(source.path / "model.safetensors"))
    for name, value in model.state_dict().items():
        if name.startswith("head."):  # the fine-tuning head keeps its own initialisation
            assert torch.equal(value, head[name])
        else:
            assert torch.equal(value, weights["backbone." + name]), name
    for preset, extra in (("vqa-lxmert-demo", []), ("nlvr2-lxmert", [
            "data.questions=nlvr2/{split}.json", "data.vqa_splits={train: [train], val: [val], test: [test]}"])):
        run = tmp_path / preset
        result = runner.invoke(app, ["train", "--config", preset, "--init", str(pretrained), "--out", str(run),
                                     "--device", "cpu", *sets(f"data.root={synth}", *TINY, *extra)])
        assert result.exit_code == 0, result.output
        assert sum(r["kind"] == "val" for r in records(run)) == 2


def test_pretraining_resumes_exactly(synth: Path, tmp_path: Path) -> None:
    cfg = load_config("lxmert-pretrain-demo", [f"data.root={synth}", *TINY, "train.pretrain.official=true"])
    tasks.train(cfg, tmp_path / "straight", device="cpu")
    stopped = load_config("lxmert-pretrain-demo", [f"data.root={synth}", *TINY, "train.pretrain.official=true",
                                                   "train.max_steps=5"])
    tasks.train(stopped, tmp_path / "resumed", device="cpu")  # stops inside the second epoch
    tasks.train(None, tmp_path / "resumed", overrides=["train.max_steps=0"], resume=True, device="cpu")
    straight = load_file(str(tmp_path / "straight" / "checkpoints" / "last" / "model.safetensors"))
    resumed = load_file(str(tmp_path / "resumed" / "checkpoints" / "last" / "model.safetensors"))
    assert straight.keys() == resumed.keys()
    assert all(torch.equal(straight[k], resumed[k]) for k in straight)
    # the released reading trains image QA from the first epoch
    assert any("answers_loss" in r and r["epoch"] == 0 for r in records(tmp_path / "straight"))


@pytest.mark.parametrize("items, message", [
    (["train.pretrain.bogus=1"], "unknown config key train.pretrain.bogus"),
    (["train.pretrain.tasks=[words, nope]"], "train.pretrain.tasks"),
    (["train.pretrain.region_masking=mask"], "train.pretrain.region_masking"),
    (["data.question_tokens=words"], "data.question_tokens"),
    (["train.bce_reduction=mean"], "config keys never read by task 'pretraining'"),
])
def test_bad_config_is_refused_naming_the_key(synth: Path, tmp_path: Path, items: list[str], message: str) -> None:
    result = runner.invoke(app, ["train", "--config", "lxmert-pretrain-demo", "--out", str(tmp_path / "run"),
                                 "--device", "cpu", *sets(f"data.root={synth}", *TINY, *items)])
    assert isinstance(result.exception, ConfigError) and message in str(result.exception)
    assert not (tmp_path / "run").exists()


def test_bad_key_through_the_command_is_one_line_exit_2(synth: Path, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "vlattn.cli", "train", "--config", "lxmert-pretrain-demo", "--out",
                           str(tmp_path / "run"), *sets(f"data.root={synth}", "train.pretrain.feature_loss=l1")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "train.pretrain.feature_loss" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "run").exists()


def test_store_without_labels_is_refused_for_the_label_losses(synth: Path, tmp_path: Path) -> None:
    store = open_store(synth / "features")
    plain = tmp_path / "plain"
    write_memmap(plain, ((i, store.get(i)) for i in store.ids()))  # features and boxes only
    base = [f"data.root={synth}", f"data.features={plain}", *TINY]
    result = runner.invoke(app, ["train", "--config", "lxmert-pretrain-demo", "--out", str(tmp_path / "run"),
                                 "--device", "cpu", *sets(*base)])
    assert isinstance(result.exception, DataError) and "no attribute or object classes" in str(result.exception)
    assert str(plain) in str(result.exception)
    result = runner.invoke(app, ["train", "--config", "lxmert-pretrain-demo", "--out", str(tmp_path / "run2"),
                                 "--device", "cpu", *sets(*base, "train.pretrain.visual_losses=[feature]")])
    assert result.exit_code == 0, result.output


def test_init_from_another_size_or_task_is_refused(synth: Path, pretrained: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["train", "--config", "vqa-lxmert-demo", "--init", str(pretrained), "--out",
                                 str(tmp_path / "run"), "--device", "cpu",
                                 *sets(f"data.root={synth}", *TINY, "model.d_model=32")])
    assert isinstance(result.exception, DataError) and "model.safetensors" in str(result.exception)
    words = len(WordPieceVocabulary.from_file(synth / "vocab.txt"))
    assert f"has shape ({words}, 16), the model's encoder.words.word.weight ({words}, 32)" in str(result.exception)
    vqa = tmp_path / "vqa"
    result = runner.invoke(app, ["train", "--config", "vqa-lxmert-demo", "--out", str(vqa), "--device", "cpu",
                                 *sets(f"data.root={synth}", *TINY, "train.epochs=1")])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["train", "--config", "lxmert-pretrain-demo", "--init", str(vqa), "--out",
                                 str(tmp_path / "run2"), "--device", "cpu", *sets(f"data.root={synth}", *TINY)])
    assert isinstance(result.exception, ConfigError) and "a vqa checkpoint" in str(result.exception)


def test_memmap_store_keeps_attributes_beside_classes(tmp_path: Path) -> None:
    def regions(k: int, attributes: bool = True) -> RegionFeatures:
        extra = dict(attributes=np.arange(k) + 10, attribute_scores=np.full(k, 0.5, np.float32)) if attributes else {}
        return RegionFeatures(np.ones((k, 3), np.float32), np.tile(np.float32([0, 0, 4, 4]), (k, 1)), 8, 8,
                              classes=np.arange(k), scores=np.ones(k, np.float32), **extra)

    write_memmap(tmp_path / "s", [(1, regions(2)), (2, regions(3))])
    labels = region_labels(open_store(tmp_path / "s"), 2)
    assert labels.objects.tolist() == [0, 1, 2] and labels.attributes.tolist() == [10, 11, 12]
    assert labels.attribute_scores.tolist() == [0.5] * 3
    with pytest.raises(DataError, match="with and without attributes"):
        write_memmap(tmp_path / "t", [(1, regions(2)), (2, regions(3, attributes=False))])



def test_training_pairs_carry_the_stores_float16_and_validation_pairs_float32(synth: Path) -> None:
    # no region cache: the cache keeps what it holds as float32
    cfg = load_config("lxmert-pretrain-demo", [f"data.root={synth}", *TINY, "data.region_cache_mb=0"])
    data = tasks.pretraining.load_pretrain_data(cfg)
    image_id = data.pairs("train")[0].image_id
    stored = open_store(synth / "features").get_stored(image_id).features
    assert stored.dtype == np.float16
    train, val = data.train_set(), data.dataset("val")
    assert np.array_equal(train[0]["regions"].features, stored)  # the loop widens them (batch_to_device)
    assert train[0]["regions"].features.dtype == np.float16
    assert val[0]["regions"].features.dtype == np.float32  # validation reads them as float32
