"""The VQA task end to end on a tiny data set in the VQA v2 layout: ``vlattn train`` (skipped questions
counted, both vocabularies in every checkpoint), ``vlattn eval`` (official accuracy table recomputed from the
written results file; a split without annotations gives the results file only), ``vlattn answer``, GloVe
initialisation through the prepare hook, the majority baseline, and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from vlattn.cli import app
from vlattn.config import config_to_dict
from vlattn.validation import valid_config
from vlattn.data.vocab import Vocabulary
from vlattn.data.vqa import Annotation, load_annotations, load_questions
from vlattn.errors import ConfigError
from vlattn.metrics.vqa import vqa_accuracy
from vlattn.tasks.vqa import TRAIN, majority_baseline, majority_by_question_type
from vlattn.training.prepare import prepare_model
from tests.training.conftest import COLOURS, make_tiny_vqa_data, tiny_vqa_config

runner = CliRunner()


@pytest.fixture(scope="module")
def vqa_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_vqa_data(tmp_path_factory.mktemp("tinyvqa") / "data")


def write_config(path: Path, root: Path, *extra: str) -> Path:
    path.write_text(yaml.safe_dump(config_to_dict(tiny_vqa_config(root, *extra))))
    return path


@pytest.fixture(scope="module")
def trained(vqa_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("vqarun") / "run"
    config = write_config(run.parent / "vqa.yaml", vqa_data)
    result = runner.invoke(app, ["train", "--config", str(config), "--out", str(run), "--device", "cpu"])
    assert result.exit_code == 0, result.output
    return run


def test_training_counts_skipped_questions_and_stores_both_vocabularies(trained: Path) -> None:
    best = trained / "checkpoints" / "best"
    assert {"vocab-words.json", "vocab-answers.json", "model.safetensors"} <= {p.name for p in best.iterdir()}
    answers = json.loads((best / "vocab-answers.json").read_text())["answers"]
    assert set(answers) == {*COLOURS, "circle", "square", "star", "yes", "no"}  # "paper" is seen once
    records = [json.loads(line) for line in (trained / "metrics.jsonl").read_text().splitlines()]
    (data,) = [r for r in records if r["kind"] == "data"]
    assert data["train_skipped"] == 1 and data["train_questions"] == 73 and data["answers"] == len(answers)
    val = [r for r in records if r["kind"] == "val"]
    assert len(val) == 10 and {"accuracy", "yes/no", "other"} <= set(val[-1])


def test_eval_table_matches_the_results_file(trained: Path, vqa_data: Path) -> None:
    result = runner.invoke(app, ["eval", "--checkpoint", str(trained), "--split", "val", "--json", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    results = json.loads(Path(report["results"]).read_text())
    assert Path(report["results"]).name == "vqa_OpenEnded_mscoco_val_mcan_results.json"
    annotations = load_annotations(vqa_data / "vqa" / "annotations_val.json")
    assert sorted(row["question_id"] for row in results) == sorted(annotations)
    by_hand = [100 * vqa_accuracy(row["answer"], annotations[row["question_id"]].answers) for row in results]
    assert report["overall"] == pytest.approx(round(sum(by_hand) / len(by_hand), 2))
    yes_no = [acc for row, acc in zip(results, by_hand) if annotations[row["question_id"]].answer_type == "yes/no"]
    assert report["perAnswerType"]["yes/no"] == pytest.approx(round(sum(yes_no) / len(yes_no), 2))
    assert set(report["perQuestionType"]) == {"what color is the", "what shape is", "is it"}
    assert report["overall"] >= 90  # one-hot colour and shape features: the model learns them
    assert report["data_root"] == str(vqa_data.resolve())
    beam = runner.invoke(app, ["eval", "--checkpoint", str(trained), "--beam-size", "3", "--device", "cpu"])
    assert beam.exit_code != 0 and "--beam-size: a VQA model answers by classification" in str(beam.exception)
    packed = runner.invoke(app, ["eval", "--checkpoint", str(trained), "--packed-output", "--device", "cpu"])
    assert packed.exit_code != 0 and "--packed-output: packs a captioner's vocabulary" in str(packed.exception)
    table = runner.invoke(app, ["eval", "--checkpoint", str(trained), "--split", "val", "--device", "cpu"]).stdout
    assert "overall" in table and "what color is the" in table and "results:" in table
    # evaluation keeps the question no candidate answers ("paper"), and counts it
    train = json.loads(runner.invoke(app, ["eval", "--checkpoint", str(trained), "--split", "train", "--json",
                                           "--device", "cpu"]).stdout)
    assert (train["questions"], train["unanswerable"]) == (73, 1) and train["perQuestionType"]["what is"] == 0.0


def test_eval_of_a_split_without_annotations_writes_the_results_file(trained: Path, vqa_data: Path, tmp_path: Path) -> None:
    copy = tmp_path / "data"
    copy.mkdir()
    for item in ("features", "vqa", "dataset.json"):
        (copy / item).symlink_to(vqa_data / item)
    (copy / "vqa").unlink()
    (copy / "vqa").mkdir()
    for name in ("questions_test.json", "questions_train.json", "annotations_train.json"):
        (copy / "vqa" / name).symlink_to(vqa_data / "vqa" / name)
    result = runner.invoke(app, ["eval", "--checkpoint", str(trained), "--split", "test", "--data", str(copy),
                                 "--json", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert "overall" not in report and report["questions"] == len(load_questions(copy / "vqa" / "questions_test.json"))
    assert len(json.loads(Path(report["results"]).read_text())) == report["questions"]


def test_answer_lists_the_top_answers(trained: Path, vqa_data: Path) -> None:
    val = load_annotations(vqa_data / "vqa" / "annotations_val.json")
    colour = next(a for a in val.values() if a.question_type == "what color is the")
    args = ["answer", "--checkpoint", str(trained), "--features", str(vqa_data / "features"),
            "--image-id", str(colour.image_id), "--question", "What color is the shiny object?", "--device", "cpu"]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    reply = json.loads(result.stdout)
    scores = [row["score"] for row in reply["answers"]]
    assert len(scores) == 5 and scores == sorted(scores, reverse=True) and all(0 < s < 1 for s in scores)
    assert reply["answers"][0]["answer"] == colour.multiple_choice_answer
    assert reply["words"] == ["what", "color", "is", "the", "<unk>", "object"]
    text = runner.invoke(app, args).stdout
    assert f"{reply['answers'][0]['score']:.3f}  {colour.multiple_choice_answer}" in text
    missing = runner.invoke(app, [*args[:5], "--image-id", "99999", "--question", "Why?"])
    assert missing.exit_code != 0 and "item 99999: image id not in the feature store" in str(missing.exception)


def test_a_captioning_checkpoint_is_refused(trained: Path, vqa_data: Path) -> None:
    from vlattn.tasks.captioning import caption

    with pytest.raises(ConfigError, match="a vqa checkpoint; captioning needs a captioning model"):
        caption(trained, vqa_data / "features", None)


def test_images_without_features_stop_training_naming_them(vqa_data: Path, tmp_path: Path) -> None:
    data = json.loads((vqa_data / "vqa" / "questions_train.json").read_text())
    data["questions"][5]["image_id"] = 777
    copy = tmp_path / "data"
    (copy / "vqa").mkdir(parents=True)
    (copy / "features").symlink_to(vqa_data / "features")
    (copy / "vqa" / "questions_train.json").write_text(json.dumps(data))
    annotations = json.loads((vqa_data / "vqa" / "annotations_train.json").read_text())
    annotations["annotations"][5]["image_id"] = 777
    (copy / "vqa" / "annotations_train.json").write_text(json.dumps(annotations))
    for name in ("questions_val.json", "annotations_val.json"):
        (copy / "vqa" / name).symlink_to(vqa_data / "vqa" / name)
    config = write_config(tmp_path / "c.yaml", copy)
    result = runner.invoke(app, ["train", "--config", str(config), "--out", str(tmp_path / "run"), "--device", "cpu"])
    assert result.exit_code != 0
    assert "1 of 25 images have no region features; first missing ids: [777]" in str(result.exception)


def test_word_vectors_set_the_embeddings_of_a_fresh_run(vqa_data: Path, tmp_path: Path) -> None:
    glove = tmp_path / "vectors.txt"
    rows = {"color": [float(v) for v in range(16)], "red": [0.5] * 16, "zebra": [9.0] * 16}
    glove.write_text("".join(f"{w} {' '.join(map(str, v))}\n" for w, v in rows.items()))
    cfg = tiny_vqa_config(vqa_data, f"model.word_vectors={glove}")
    torch.manual_seed(0)
    data = TRAIN.load_data(cfg, None)
    model = TRAIN.build_model(cfg, data)
    notes = prepare_model(model, lambda: data.prepare_resources(model, cfg.train.seed))
    words: Vocabulary = data.words
    assert notes == [f"question (word vectors for 2 of {len(words) - 4} words from vectors.txt)"]
    table = model.question.word_embedding.weight
    assert table[words.stoi["color"]].tolist() == rows["color"] and table[words.stoi["red"]].tolist() == rows["red"]
    assert table[words.PAD].abs().sum() == 0
    cfg = tiny_vqa_config(vqa_data, f"model.word_vectors={tmp_path / 'missing.txt'}")
    model = TRAIN.build_model(cfg, data)
    with pytest.raises(Exception, match="missing.txt: word vectors file not found"):
        prepare_model(model, lambda: data.prepare_resources(model, cfg.train.seed))


def test_majority_answer_per_question_type_by_hand() -> None:
    def ann(qid: int, kind: str, answer: str, humans: list[str]) -> Annotation:
        return Annotation(qid, 1, kind, "other" if kind != "is it" else "yes/no", answer, humans)

    train = {1: ann(1, "is it", "yes", []), 2: ann(2, "is it", "No", []), 3: ann(3, "is it", "no", []),
             4: ann(4, "what color", "red", []), 5: ann(5, "what color", "blue", [])}  # fmt: skip
    table, fallback = majority_by_question_type(train)
    assert table == {"is it": "no", "what color": "blue"} and fallback == "no"  # ties alphabetical
    evaluated = {7: ann(7, "is it", "no", ["no"] * 10), 8: ann(8, "what color", "red", ["red"] * 9 + ["blue"]),
                 9: ann(9, "how many", "2", ["2"] * 10)}  # fmt: skip
    report = majority_baseline(train, evaluated)
    # "no" -> 1; "blue" given by 1 of 10 -> 0.3; unseen type -> fallback "no" -> 0
    assert report["overall"] == pytest.approx(round(100 * (1 + 0.3 + 0) / 3, 2))
    assert report["perQuestionType"] == {"how many": 0.0, "is it": 100.0, "what color": 30.0}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"model": {"kind": "transformer"}}, r"model\.kind: 'transformer' is a captioning model, but the config's task is 'vqa'"),
        ({"data": {"vqa_splits": {"train": []}}}, r"data\.vqa_splits\.train: expected a non-empty list of file subtypes"),
        ({"data": {"questions": "q.json"}}, r"data\.questions: the file pattern needs a \{split\} placeholder"),
        ({"train": {"bce_reduction": "max"}}, r"train\.bce_reduction: 'max' is not one of: sum, sum_answers, mean"),
        ({"model": {"kind": "mcan", "encoder_self_attention": {"name": "additive"}}},
         r"model\.encoder_self_attention: attention 'additive' is not allowed at encoder_self sites"),
    ],
)
def test_config_errors_name_the_key(changes: dict, message: str) -> None:
    data = {"task": "vqa", "model": {"kind": "mcan", "d_model": 16, "num_heads": 2}}
    for section, values in changes.items():
        data[section] = {**data.get(section, {}), **values}
    with pytest.raises(ConfigError, match=message):
        valid_config(data)


def test_profile_reports_the_backbone(tmp_path: Path, vqa_data: Path) -> None:
    config = write_config(tmp_path / "c.yaml", vqa_data)
    result = runner.invoke(app, ["profile", "--config", str(config), "--json", "--batch", "2", "--repeats", "1",
                                 "--regions", "5", "--length", "4", "--answers", "7", "--vocab-size", "30"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["shapes"]["answers"] == 7 and report["shapes"]["regions"] == 5
    assert report["backbone"]["parameters"] == report["parameters"]["backbone"] > 0
    assert report["parameters"]["classifier"] == 64 * 7 + 7  # flat_out = 2d = 64
    assert report["flops"]["train_step"] > report["flops"]["answer_batch"] > 0 and report["backbone"]["madds_per_sample"] > 0
