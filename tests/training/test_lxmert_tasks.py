"""LXMERT's three fine-tuning tasks end to end on the synthetic set written by `vlattn data synth` (VQA v2,
GQA and NLVR2 layouts and a WordPiece vocab.txt), each from its preset (vqa-lxmert, gqa-lxmert, nlvr2-lxmert)
with a tiny model: `vlattn train` (the warm-up-linear schedule over the run's steps), `vlattn eval` (the
task's predictions file and metrics recomputed here from it)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import vlattn
from vlattn.cli import app
from vlattn.config import load_config
from vlattn.data.features import open_store
from vlattn.data.gqa import load_gqa_split
from vlattn.data.nlvr2 import load_statements, nlvr2_metrics
from vlattn.data.synth import generate
from vlattn.data.wordpiece import WordPieceVocabulary
from vlattn.errors import ConfigError
from vlattn.tasks.nlvr2 import NLVR2, load_nlvr2_data

runner = CliRunner()
TINY = ["--set", "model.feature_dim=8", "--set", "model.d_model=16", "--set", "model.num_heads=2",
        "--set", "model.d_ff=32", "--set", "model.encoder_layers=1", "--set", "model.decoder_layers=1",
        "--set", "model.options.object_layers=1", "--set", "model.max_positions=32", "--set", "train.epochs=2",
        "--set", "train.batch_size=8", "--set", "train.log_every=1", "--set", "data.max_regions=8",
        "--set", "eval.batch_size=16", "--set", "train.schedule.options.lr=1.0e-3"]


@pytest.fixture(scope="module")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(tmp_path_factory.mktemp("lxmert") / "synth", images=48, seed=3, feature_dim=8,
                    extractor_epochs=1, val_size=12, test_size=4)


def train_and_eval(preset: str, synth: Path, run: Path, *extra: str) -> dict:
    result = runner.invoke(app, ["train", "--config", preset, "--out", str(run), "--device", "cpu",
                                 "--set", f"data.root={synth}", *TINY, *extra])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if r["kind"] == "train"]
    rates = [r["lr"] for r in steps]
    # warm-up over the first tenth of the run's steps, then a linear decay (the last step's rate is the smallest)
    assert max(rates) == pytest.approx(1e-3, rel=0.2) and rates[-1] < max(rates) and rates.index(max(rates)) < len(rates) // 2
    assert sum(r["kind"] == "val" for r in records) == 2
    result = runner.invoke(app, ["eval", "--checkpoint", str(run), "--split", "val", "--device", "cpu", "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_synthetic_set_has_the_lxmert_layouts(synth: Path) -> None:
    vocab = WordPieceVocabulary.from_file(synth / "vocab.txt")
    statements = load_statements(synth / "nlvr2" / "train.json")
    questions = json.loads((synth / "vqa" / "questions_train.json").read_text())["questions"]
    for text in [s.sentence for s in statements] + [q["question"] for q in questions]:
        assert "[UNK]" not in vocab.tokenize(text)  # every synthetic text splits into known pieces
    gqa = load_gqa_split("train", [synth / "gqa" / "train_balanced_questions.json"])
    assert [q.question_id for q in gqa.questions] == [q["question_id"] for q in questions]
    assert {a.answer_type for a in gqa.annotations.values()} == {"verify", "query"}
    pairs = {}
    for s in statements:  # one sentence per (set, sentence), judged on two image pairs
        pairs.setdefault(s.identifier.rsplit("-", 2)[0] + s.identifier[-2:], set()).add(s.images)
    assert pairs and all(len(images) == 2 for images in pairs.values())
    assert {s.label for s in statements} == {0, 1}


def test_vqa_fine_tuning_runs_end_to_end(synth: Path, tmp_path: Path) -> None:
    report = train_and_eval("vqa-lxmert", synth, tmp_path / "vqa", "--set", "data.questions=vqa/questions_{split}.json",
                            "--set", "data.annotations=vqa/annotations_{split}.json",
                            "--set", "data.vqa_splits={train: [train], val: [val], test: [test]}",
                            "--set", "data.answer_min_count=1")
    assert report["task"] == "vqa" and 0.0 <= report["overall"] <= 100.0
    assert set(report["perAnswerType"]) == {"yes/no", "number", "other"}
    results = json.loads(Path(report["results"]).read_text())
    assert len(results) == report["questions"] and {"question_id", "answer"} == set(results[0])


def test_gqa_fine_tuning_runs_end_to_end(synth: Path, tmp_path: Path) -> None:
    report = train_and_eval("gqa-lxmert", synth, tmp_path / "gqa", "--set", "data.questions=gqa/{split}_balanced_questions.json",
                            "--set", "data.vqa_splits={train: [train], val: [val], test: [test]}")
    assert report["task"] == "vqa" and report["format"] == "gqa"
    assert set(report["perAnswerType"]) == {"verify", "query"}  # structural types
    assert set(report["perQuestionType"]) <= {"attr", "cat", "obj", "rel"}  # semantic types
    predictions = json.loads(Path(report["results"]).read_text())
    truth = {key: record["answer"] for key, record in
             json.loads((synth / "gqa" / "val_balanced_questions.json").read_text()).items()}
    assert {p["questionId"] for p in predictions} == set(truth)
    exact = 100.0 * sum(p["prediction"] == truth[p["questionId"]] for p in predictions) / len(predictions)
    assert report["overall"] == pytest.approx(exact, abs=0.01)  # GQA's exact match


def test_nlvr2_fine_tuning_runs_end_to_end(synth: Path, tmp_path: Path) -> None:
    report = train_and_eval("nlvr2-lxmert", synth, tmp_path / "nlvr2", "--set", "data.questions=nlvr2/{split}.json",
                            "--set", "data.vqa_splits={train: [train], val: [val], test: [test]}")
    assert report["task"] == "nlvr2"
    with open(report["results"], newline="") as handle:
        predicted = {row[0]: int(row[1] == "True") for row in csv.reader(handle)}
    statements = load_statements(synth / "nlvr2" / "val.json")
    assert set(predicted) == {s.identifier for s in statements}
    expected = nlvr2_metrics(predicted, statements)
    assert report["accuracy"] == pytest.approx(expected["accuracy"]) and report["consistency"] == pytest.approx(expected["consistency"])
    assert report["consistency"] <= report["accuracy"]
    with pytest.raises(ConfigError, match="a nlvr2 checkpoint; vlattn.load serves captioning, vqa models"):
        vlattn.load(tmp_path / "nlvr2")


def test_nlvr2_metrics_hand_computed() -> None:
    from vlattn.data.nlvr2 import Statement

    statements = [Statement(f"dev-{s}-{p}-{k}", (1, 2), "x", 1) for s in (0, 1) for k in (0, 1) for p in (0, 1)]
    predictions = {s.identifier: 1 for s in statements}
    predictions["dev-0-1-0"] = 0  # one pair of sentence (0, 0) wrong
    predictions["dev-1-0-1"] = predictions["dev-1-1-1"] = 0  # both pairs of sentence (1, 1) wrong
    metrics = nlvr2_metrics(predictions, statements)
    assert metrics == {"accuracy": 100.0 * 5 / 8, "consistency": 100.0 * 2 / 4}


def test_nlvr2_profile_reports_the_pair_model(synth: Path) -> None:
    result = runner.invoke(app, ["profile", "--config", "nlvr2-lxmert", *TINY, "--regions", "5",
                                 "--length", "6", "--vocab-size", "40", "--batch", "2", "--repeats", "1", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    d = 16  # the pair head: Linear(2d, 2d), LayerNorm(2d), Linear(2d, 2)
    assert report["shapes"]["images"] == 2
    assert report["parameters"]["head"] == (2 * d * 2 * d + 2 * d) + 2 * (2 * d) + (2 * d * 2 + 2) == 1186
    assert report["backbone"]["madds_per_sample"] > 0 and report["flops"]["judge_batch"] > 0


def test_create_model_from_the_nlvr2_preset() -> None:
    model = vlattn.create_model("nlvr2-lxmert", vocab_size=40, d_model=16, num_heads=2, d_ff=32, encoder_layers=1,
                                decoder_layers=1)
    assert model.images == 2 and model.head[-1].out_features == 2 and model.encoder.words.word.num_embeddings == 40
    with pytest.raises(ConfigError, match="num_answers: an NLVR2 model has 2 outputs"):
        vlattn.create_model("nlvr2-lxmert", vocab_size=40, num_answers=5)


VQA_FILES = ["--set", "data.questions=vqa/questions_{split}.json", "--set", "data.annotations=vqa/annotations_{split}.json",
             "--set", "data.vqa_splits={train: [train], val: [val], test: [test]}", "--set", "data.answer_min_count=1"]


def test_lxmert_catt_fine_tunes_with_kmeans_dictionaries(synth: Path, tmp_path: Path) -> None:
    """vqa-lxmert-catt end to end: the fresh run's prepare step fits both dictionaries by k-means (the image one
    over the synthetic regions, the word one over the WordPiece table weighted by the questions' pieces)."""
    run = tmp_path / "catt"
    report = train_and_eval("vqa-lxmert-catt", synth, run, *VQA_FILES,
                            "--set", "model.options.image_dictionary.size=6", "--set", "model.options.word_dictionary.size=5")
    assert report["task"] == "vqa" and 0.0 <= report["overall"] <= 100.0
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    prepared = next(r["modules"] for r in records if r["kind"] == "prepare")
    assert "encoder.word_dictionary" in prepared and "encoder.image_dictionary" in prepared


def test_lw_lxmert_fine_tunes_with_the_scaled_rate(synth: Path, tmp_path: Path) -> None:
    report = train_and_eval("vqa-lw-lxmert", synth, tmp_path / "lw", *VQA_FILES,
                            "--set", "train.schedule.options.lr=7.0710678e-4")  # x sqrt(2) = the 1e-3 of the others
    assert report["task"] == "vqa" and 0.0 <= report["overall"] <= 100.0


def test_nlvr2_training_statements_carry_the_stores_float16_and_validation_float32(synth: Path) -> None:
    # no region cache: the cache keeps what it holds as float32
    cfg = load_config("nlvr2-lxmert", [f"data.root={synth}", "data.questions=nlvr2/{split}.json",
                                       "data.vqa_splits={train: [train], val: [val], test: [test]}",
                                       "data.region_cache_mb=0"])
    data = load_nlvr2_data(cfg.data)
    stored = open_store(synth / "features").get_stored(data.split("train")[0].images[0]).features
    assert stored.dtype == np.float16
    train = NLVR2.stages["train"].train_set(cfg, data)
    assert np.array_equal(train[0]["regions"][0].features, stored)  # the loop widens them (batch_to_device)
    assert train[0]["regions"][0].features.dtype == np.float16
    assert data.dataset("val", labelled=True)[0]["regions"][0].features.dtype == np.float32
