"""VQA preprocessing for MCAN-style models: question words, soft targets equal to the official accuracy of each
candidate, answer/word vocabularies, splits read from several files, unanswerable questions counted, images
without features named, the question-only (zero image) ablation, GloVe-format word vectors."""

from __future__ import annotations

import gzip
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from vlattn.data.features import RegionFeatures, open_store, write_npz_dir
from vlattn.data.vocab import Vocabulary
from vlattn.data.vqa import (
    Annotation,
    AnswerVocabulary,
    Question,
    VQADataset,
    build_question_vocabulary,
    collate_vqa,
    load_split,
    normalize_answer,
    question_tokens,
    vqa_accuracy,
    write_annotations,
    write_questions,
)
from vlattn.data.word_vectors import read_word_vectors
from vlattn.errors import DataError


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("What color is the cube?", ["what", "color", "is", "the", "cube"]),
        ("What's the man-made object/thing?", ["whats", "the", "man", "made", "object", "thing"]),
        ('Is the "cat" (left) #1; or: 2.5*3, !', ["is", "the", "cat", "left", "1", "or", "253"]),
        ("  HOW   many\tdogs?? ", ["how", "many", "dogs"]),
        ("It's 3/4-full", ["its", "3", "4", "full"]),
    ],
)  # fmt: skip
def test_mcan_question_words(text: str, words: list[str]) -> None:
    assert question_tokens(text) == words


def test_soft_scores_are_the_official_accuracy_of_each_candidate() -> None:
    """For every candidate among the human answers, its soft target equals vqa_accuracy(candidate, answers),
    computed independently by the leave-one-out average; for 10 humans the MCAN table 0/.3/.6/.9/1."""
    vocab = AnswerVocabulary(["yes", "no", "2", "red", "blue"])
    assert vocab.soft_scores(["yes"] * 1 + ["no"] * 9) == pytest.approx({0: 0.3, 1: 1.0})
    assert vocab.soft_scores(["yes"] * 2 + ["maybe"] * 8) == pytest.approx({0: 0.6})
    assert vocab.soft_scores(["yes"] * 3 + ["no"] * 4 + ["red"] * 3) == pytest.approx({0: 0.9, 1: 1.0, 3: 0.9})
    rng = random.Random(0)
    pool = ["yes", "no", "2", "two", "red", "Red.", "blue", "green"]
    for _ in range(200):
        answers = [rng.choice(pool) for _ in range(rng.choice([3, 9, 10]))]
        # targets count normalised answers (MCAN's prep_ans), so compare with normalised humans: the official
        # script skips normalisation when all humans agree verbatim ("Red." x 10 scores "red" 0)
        humans = [normalize_answer(answer) for answer in answers]
        scores = vocab.soft_scores(answers)
        assert scores
        for index, score in scores.items():
            assert score == pytest.approx(vqa_accuracy(vocab.itos[index], humans))


def test_answer_vocabulary_min_count_counts_normalised_answers() -> None:
    answers = ["Yes"] * 9 + ["yes."] + ["two"] * 5 + ["2"] * 4 + ["red"] * 8 + ["the cat"] * 9
    vocab = AnswerVocabulary.build(answers, min_count=9)
    assert vocab.itos == ["yes", "2", "cat"]  # 10, 9 (two -> 2), 9; red (8) is out


def write_split(root: Path, name: str, image_ids: list[int], answers: list[list[str]] | None, first_qid: int) -> None:
    questions = [Question(first_qid + k, image, f"What is {k}?") for k, image in enumerate(image_ids)]
    write_questions(root / f"q_{name}.json", questions, data_subtype=name)
    if answers is not None:
        annotations = [Annotation(q.question_id, q.image_id, "what is", "other", a[0], a)
                       for q, a in zip(questions, answers)]
        write_annotations(root / f"a_{name}.json", annotations, data_subtype=name)


def test_split_from_several_files_and_without_annotations(tmp_path: Path) -> None:
    write_split(tmp_path, "train2014", [1, 2], [["cat"] * 10, ["dog"] * 10], 10)
    write_split(tmp_path, "val2014", [3], [["cat"] * 10], 20)
    write_split(tmp_path, "test2015", [4], None, 30)
    files = lambda names, kind: [tmp_path / f"{kind}_{n}.json" for n in names]  # noqa: E731
    both = load_split("train", files(["train2014", "val2014"], "q"), files(["train2014", "val2014"], "a"))
    assert [q.question_id for q in both.questions] == [10, 11, 20] and set(both.annotations) == {10, 11, 20}
    test = load_split("test", files(["test2015"], "q"), files(["test2015"], "a"))
    assert test.annotations is None and test.sources == files(["test2015"], "q")
    with pytest.raises(DataError, match="annotation file missing for split 'train'") as err:
        load_split("train", files(["train2014", "test2015"], "q"), files(["train2014", "test2015"], "a"))
    assert "a_test2015.json" in str(err.value)
    with pytest.raises(DataError, match=r"question id also in .*q_train2014.json") as err:
        load_split("train", files(["train2014", "train2014"], "q"), files(["train2014", "train2014"], "a"))
    assert "question 10" in str(err.value)


def store_with(tmp_path: Path, image_ids: list[int], regions: int = 3) -> object:
    items = [(i, RegionFeatures(np.full((regions, 4), float(i), dtype=np.float32),
                                np.tile(np.array([[1, 2, 5, 6]], dtype=np.float32), (regions, 1)), 10, 10))
             for i in image_ids]  # fmt: skip
    write_npz_dir(tmp_path / "feats", items, overwrite=True)
    return open_store(tmp_path / "feats")


def test_training_skips_and_counts_unanswerable_evaluation_keeps_them(tmp_path: Path) -> None:
    questions = [Question(1, 1, "What color?"), Question(2, 1, "What shape?"), Question(3, 2, "What size?")]
    annotations = {
        1: Annotation(1, 1, "what color", "other", "red", ["red"] * 10),
        2: Annotation(2, 1, "what shape", "other", "blob", ["blob"] * 6 + ["splat"] * 4),  # no candidate
        3: Annotation(3, 2, "what size", "other", "big", ["big"] * 2 + ["odd"] * 8),
    }
    store, words = store_with(tmp_path, [1, 2]), build_question_vocabulary(questions)
    answers = AnswerVocabulary(["red", "big"])
    train = VQADataset(questions, annotations, store, words, answers, max_regions=5)
    assert [q.question_id for q in train.questions] == [1, 3] and train.skipped == 1
    evaluation = VQADataset(questions, annotations, store, words, answers, max_regions=5, unanswerable="keep")
    assert len(evaluation) == 3 and evaluation.skipped == 0
    batch = collate_vqa([evaluation[i] for i in range(3)])
    torch.testing.assert_close(batch["targets"], torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.0, 0.6]]))


def test_images_without_features_are_named(tmp_path: Path) -> None:
    questions = [Question(1, 1, "What?"), Question(2, 7, "Why?"), Question(3, 9, "How?")]
    store = store_with(tmp_path, [1])
    with pytest.raises(DataError, match=r"2 of 3 images have no region features; first missing ids: \[7, 9\]") as err:
        VQADataset(questions, None, store, build_question_vocabulary(questions), None, max_regions=5)
    assert "feats" in str(err.value)


def test_zero_image_ablation_keeps_the_mask(tmp_path: Path) -> None:
    questions = [Question(1, 1, "What?"), Question(2, 2, "Why?")]
    store, words = store_with(tmp_path, [1, 2], regions=3), build_question_vocabulary(questions)
    plain = VQADataset(questions, None, store, words, None, max_regions=5)
    blind = VQADataset(questions, None, store, words, None, max_regions=5, zero_image=True)
    seen, zeroed = collate_vqa([plain[0], plain[1]]), collate_vqa([blind[0], blind[1]])
    assert seen["features"].abs().sum() > 0 and zeroed["features"].abs().sum() == 0 and zeroed["boxes"].abs().sum() == 0
    assert torch.equal(zeroed["region_mask"], seen["region_mask"]) and torch.equal(zeroed["questions"], seen["questions"])


def test_question_vocabulary_and_truncation(tmp_path: Path) -> None:
    questions = [Question(1, 1, "Is the red-cube left of the ball?"), Question(2, 1, "Is it red?")]
    words = build_question_vocabulary(questions, min_count=2)
    assert words.itos[4:] == ["is", "red", "the"]
    store = store_with(tmp_path, [1])
    item = VQADataset(questions, None, store, words, None, max_regions=5, max_question_len=4)[0]
    assert item["question"] == [words.stoi["is"], words.stoi["the"], words.stoi["red"], Vocabulary.UNK]


# --- word vectors -------------------------------------------------------------------------------------------------


def glove_lines(rows: dict[str, list[float]]) -> str:
    return "".join(f"{word} {' '.join(str(v) for v in values)}\n" for word, values in rows.items())


def test_word_vectors_read_only_vocabulary_words(tmp_path: Path) -> None:
    vocab = Vocabulary(["red", "cube", "ball"])
    text = glove_lines({"the": [9, 9, 9], "red": [1, 2, 3], ". . .": [0, 0, 0], "cube": [4, 5, 6], "red ": [7, 7, 7]})
    text += "cube 0 0 0\n"  # a later duplicate: the first occurrence wins
    (tmp_path / "g.txt").write_text(text)
    vectors = read_word_vectors(tmp_path / "g.txt", vocab, dim=3)
    assert set(vectors) == {vocab.stoi["red"], vocab.stoi["cube"]}
    assert vectors[vocab.stoi["red"]].tolist() == [1, 2, 3] and vectors[vocab.stoi["cube"]].tolist() == [4, 5, 6]
    with gzip.open(tmp_path / "g.txt.gz", "wt") as handle:  # compressed, with a word2vec header
        handle.write("2 3\n" + glove_lines({"ball": [0.5, 0.25, 1], "red": [1, 1, 1]}))
    vectors = read_word_vectors(tmp_path / "g.txt.gz", vocab, dim=3)
    assert vectors[vocab.stoi["ball"]].tolist() == [0.5, 0.25, 1.0] and len(vectors) == 2


@pytest.mark.parametrize(
    ("line", "message"),
    [("red 1 2\n", r"line 2.*expected 3 numbers after the word, got 2"),
     ("red 1 x 3\n", r"line 2.*not a number"), ("red 1 nan 3\n", r"line 2.*NaN or inf")],
)  # fmt: skip
def test_bad_word_vector_lines_are_named(tmp_path: Path, line: str, message: str) -> None:
    (tmp_path / "g.txt").write_text("other 1 2\n" + line)  # a bad line of another word is never parsed
    with pytest.raises(DataError, match=message) as err:
        read_word_vectors(tmp_path / "g.txt", Vocabulary(["red"]), dim=3)
    assert "g.txt" in str(err.value)
    with pytest.raises(DataError, match="word vectors file not found"):
        read_word_vectors(tmp_path / "missing.txt", Vocabulary(["red"]), dim=3)
