"""VQA v2 files, official answer normalisation/accuracy, answer vocabulary and the VQA dataset."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from vlattn.data.features import RegionFeatures, open_store, write_npz_dir
from vlattn.data.vocab import Vocabulary
from vlattn.data.vqa import (
    AnswerVocabulary,
    Question,
    VQADataset,
    collate_vqa,
    load_annotations,
    load_questions,
    normalize_answer,
    vqa_accuracy,
    write_annotations,
    write_questions,
)
from vlattn.errors import DataError


def answers_json(texts: list[str]) -> list[dict]:
    return [{"answer": t, "answer_confidence": "yes", "answer_id": k + 1} for k, t in enumerate(texts)]


REAL_QUESTIONS = {
    "info": {}, "task_type": "Open-Ended", "data_type": "mscoco", "data_subtype": "val2014", "license": {},
    "questions": [{"image_id": 42, "question": "What color is the cube?", "question_id": 420},
                  {"image_id": 42, "question": "How many balls?", "question_id": 421},
                  {"image_id": 7, "question": "Is it raining?", "question_id": 70}],
}  # fmt: skip
REAL_ANNOTATIONS = {
    "info": {}, "data_type": "mscoco", "data_subtype": "val2014", "license": {},
    "annotations": [
        {"question_id": 420, "image_id": 42, "question_type": "what color is the", "answer_type": "other",
         "multiple_choice_answer": "red", "answers": answers_json(["red"] * 8 + ["Red!", "dark red"])},
        {"question_id": 421, "image_id": 42, "question_type": "how many", "answer_type": "number",
         "multiple_choice_answer": "2", "answers": answers_json(["2"] * 4 + ["two"] + ["3"] * 2 + ["many"] * 3)},
        {"question_id": 70, "image_id": 7, "question_type": "is it", "answer_type": "yes/no",
         "multiple_choice_answer": "maybe", "answers": answers_json(["maybe"] * 10)},
    ],
}  # fmt: skip


@pytest.fixture()
def files(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "q.json").write_text(json.dumps(REAL_QUESTIONS))
    (tmp_path / "a.json").write_text(json.dumps(REAL_ANNOTATIONS))
    return tmp_path / "q.json", tmp_path / "a.json"


@pytest.mark.parametrize(
    ("raw", "normalised"),
    [
        ("Two", "2"), ("none", "0"), ("ten dogs", "10 dogs"), ("the dog", "dog"), ("A red car.", "red car"),
        ("an apple", "apple"), ("yes!", "yes"), ("3.5", "3.5"), ("t-shirt", "t shirt"), ("black/white", "black white"),
        ("1,000", "1000"), ("hot dog?", "hot dog"), ("well-done !", "well done"), ("dont", "don't"),
        ("isnt", "isn't"), ("whats", "what's"), ("couldnt've", "couldn't've"), ("Yes\n", "yes"), ("(left)", "left"),
        ("red, white", "red white"), ("it's", "it's"), ("wed", "wed"),
    ],
)  # fmt: skip
def test_official_normalisation(raw: str, normalised: str) -> None:
    assert normalize_answer(raw) == normalised


def test_official_accuracy_hand_worked() -> None:
    # 3 of 10 say yes: 3 subsets where a "yes" is left out score 2/3, 7 subsets score 1 -> 0.9
    assert vqa_accuracy("yes", ["yes"] * 3 + ["no"] * 7) == pytest.approx(0.9)
    assert vqa_accuracy("yes", ["yes"] + ["no"] * 9) == pytest.approx(0.3)
    assert vqa_accuracy("yes", ["yes"] * 2 + ["no"] * 8) == pytest.approx(0.6)
    assert vqa_accuracy("no", ["yes"] * 3 + ["no"] * 7) == pytest.approx(1.0)
    assert vqa_accuracy("cat", ["dog"] * 10) == 0.0
    assert vqa_accuracy("Two", ["2"] * 9 + ["3"]) == pytest.approx(1.0)  # normalised: answers differ
    # Official quirk: identical human answers are compared without normalisation.
    assert vqa_accuracy("2", ["two"] * 10) == 0.0


def test_read_real_layout_and_writers_round_trip(files: tuple[Path, Path], tmp_path: Path) -> None:
    questions = load_questions(files[0])
    assert questions[1] == Question(421, 42, "How many balls?")
    annotations = load_annotations(files[1])
    assert annotations[420].answers[8] == "Red!" and annotations[421].answer_type == "number"
    assert annotations[70].confidences == ["yes"] * 10
    write_questions(tmp_path / "q2.json", questions, data_subtype="val2014")
    write_annotations(tmp_path / "a2.json", list(annotations.values()), data_subtype="val2014")
    assert load_questions(tmp_path / "q2.json") == questions
    assert load_annotations(tmp_path / "a2.json") == annotations
    written = json.loads((tmp_path / "a2.json").read_text())
    assert written["annotations"][0]["answers"][9] == {"answer": "dark red", "answer_confidence": "yes", "answer_id": 10}
    assert json.loads((tmp_path / "q2.json").read_text())["task_type"] == "Open-Ended"
    annotations[70].confidences = ["yes"]
    with pytest.raises(DataError, match="differ in length") as err:
        write_annotations(tmp_path / "a3.json", [annotations[70]])
    assert "question 70" in str(err.value) and not (tmp_path / "a3.json").exists()


def test_malformed_files(tmp_path: Path) -> None:
    bad = {"annotations": [{"question_id": 5, "image_id": 1, "multiple_choice_answer": "x", "answers": []}]}
    (tmp_path / "a.json").write_text(json.dumps(bad))
    with pytest.raises(DataError, match="no human answers") as err:
        load_annotations(tmp_path / "a.json")
    assert "a.json" in str(err.value) and "question 5" in str(err.value)
    (tmp_path / "q.json").write_text(json.dumps({"questions": [{"question_id": 9, "question": "why?"}]}))
    with pytest.raises(DataError, match="missing key 'image_id'") as err:
        load_questions(tmp_path / "q.json")
    assert "question 9" in str(err.value)
    (tmp_path / "q.json").write_text('{"questions": [}')
    with pytest.raises(DataError, match="malformed JSON"):
        load_questions(tmp_path / "q.json")


def test_answer_vocabulary_and_soft_scores(files: tuple[Path, Path], tmp_path: Path) -> None:
    answers = ["Red", "red", "2", "two", "2", "blue", "Blue.", "cat", "the red"]
    top = AnswerVocabulary.build(answers, top_k=2)
    assert top.itos == ["2", "red"]  # 2 x3, red x3, blue x2: ties alphabetical
    assert AnswerVocabulary.build(answers, min_count=2).itos == ["2", "red", "blue"]
    assert AnswerVocabulary.build(answers, top_k=2, min_count=3).itos == ["2", "red"]
    assert top.index("Two") == 0 and top.index("cat") is None
    soft = top.soft_scores(["2"] * 4 + ["two"] + ["red"] * 2 + ["many"] * 3)
    assert soft == {0: 1.0, 1: pytest.approx(0.6)}  # 5 humans -> 1; 2 humans -> (8 * 2/3 + 2 * 1/3) / 10
    top.save(tmp_path / "answers.json")
    assert AnswerVocabulary.load(tmp_path / "answers.json").itos == top.itos
    with pytest.raises(DataError, match="top_k or min_count"):
        AnswerVocabulary.build(answers)


def make_dataset(files: tuple[Path, Path], tmp_path: Path, **options) -> VQADataset:
    items = [(i, RegionFeatures(np.full((n, 3), i, dtype=np.float32), np.ones((n, 4), dtype=np.float32), 9, 9))
             for i, n in ((7, 2), (42, 4))]  # fmt: skip
    write_npz_dir(tmp_path / "feats", items, overwrite=True)
    words = Vocabulary(["what", "color", "is", "the", "cube", "how", "many"])
    return VQADataset(
        load_questions(files[0]), load_annotations(files[1]), open_store(tmp_path / "feats"), words,
        AnswerVocabulary(["red", "2", "3"]), max_regions=3, source=files[1], **options,
    )  # fmt: skip


def test_dataset_targets_and_collate(files: tuple[Path, Path], tmp_path: Path) -> None:
    data = make_dataset(files, tmp_path, unanswerable="keep", max_question_len=4)
    assert len(data) == 3
    batch = collate_vqa([data[0], data[1], data[2]])
    assert batch["question_ids"].tolist() == [420, 421, 70] and batch["image_ids"].tolist() == [42, 42, 7]
    assert batch["questions"].tolist() == [[4, 5, 6, 7], [9, 10, 3, 0], [6, 3, 3, 0]]  # balls/it/raining -> UNK
    assert batch["question_mask"].tolist() == [[True] * 4, [True] * 3 + [False], [True] * 3 + [False]]
    # red: 8 exact + "Red!" normalised = 9 -> 1; "2" x4 + "two" -> 1; "3" x2 -> 0.6; "maybe" unknown -> zeros
    expected = torch.tensor([[1, 0, 0], [0, 1, 0.6], [0, 0, 0]], dtype=torch.float32)
    torch.testing.assert_close(batch["targets"], expected)
    assert batch["features"].shape == (3, 3, 3) and batch["region_mask"].sum(dim=1).tolist() == [3, 3, 2]


def test_dataset_items_are_read_from_arrays(files: tuple[Path, Path], tmp_path: Path) -> None:
    """Items come from numpy arrays, not from the per-question objects (which forked DataLoader workers would copy
    page by page): the lists kept for callers can be dropped and every item reads the same."""
    data = make_dataset(files, tmp_path, unanswerable="keep", max_question_len=4)
    before = [data[i] for i in range(len(data))]
    data.questions, data.targets = [], []
    assert len(data) == len(before) == 3
    for item, want in zip([data[i] for i in range(3)], before, strict=True):
        assert item.keys() == want.keys() and item["question"] == want["question"]
        assert (item["question_id"], item["image_id"]) == (want["question_id"], want["image_id"])
        np.testing.assert_array_equal(item["target"], want["target"])


def test_unanswerable_options(files: tuple[Path, Path], tmp_path: Path) -> None:
    assert [q.question_id for q in make_dataset(files, tmp_path).questions] == [420, 421]
    with pytest.raises(DataError, match="no human answer is in the answer vocabulary") as err:
        make_dataset(files, tmp_path, unanswerable="error")
    assert "question 70" in str(err.value) and "a.json" in str(err.value)


def test_question_without_annotation(files: tuple[Path, Path], tmp_path: Path) -> None:
    data = json.loads(files[1].read_text())
    data["annotations"].pop(1)
    files[1].write_text(json.dumps(data))
    with pytest.raises(DataError, match="question has no annotation") as err:
        make_dataset(files, tmp_path)
    assert "question 421" in str(err.value) and "a.json" in str(err.value)
