"""CHAIR_s, CHAIR_i (Rohrbach et al. 2018, Sec. 3) and A@Attr (CATT Table 2) on hand-computed examples; the lexicons
and ground truth of the synthetic set and of CHAIR-format synonym files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vlattn.data.bias import BASIC_COLOURS, bias_source, instance_objects, reference_truth, synthetic_lexicon
from vlattn.errors import DataError
from vlattn.metrics.bias import GENERIC, Lexicon, Truth, bias_scores, read_caption, read_synonyms

SHAPES = synthetic_lexicon()


def test_mentions_of_objects_attributes_modifiers_and_generic_nouns() -> None:
    mentions = read_caption("A small red circle above two big blue squares, and three green objects.", SHAPES)
    assert mentions.objects == ["circle", "square"]
    assert mentions.attributes == [("red", "circle"), ("blue", "square"), ("green", GENERIC)]
    # synonyms and plurals of the generator's lexicon; violet is purple; a colour modifying nothing is not counted
    mentions = read_caption("Disks and a violet rhombus; the box is red", SHAPES)
    assert mentions.objects == ["circle", "diamond", "square"]
    assert mentions.attributes == [("purple", "diamond")]


def test_chair_and_attribute_accuracy_by_hand() -> None:
    truth = {
        1: Truth(frozenset({"circle", "square"}), frozenset({("red", "circle"), ("blue", "square")})),
        2: Truth(frozenset({"star"}), frozenset({("green", "star")})),
        3: Truth(frozenset({"cross"}), frozenset({("white", "cross")})),
    }
    captions = {
        1: "a red circle and a red square and a circle",  # circle mentioned twice: one object; red square is wrong
        2: "a green star next to a yellow triangle",  # triangle hallucinated; yellow triangle is wrong
        3: "two white objects and a black star and a blue diamond",  # two hallucinated; white <any> right
    }
    report = bias_scores(captions, truth, SHAPES)
    # objects per caption: {circle, square}, {star, triangle}, {star, diamond}: 6 mentioned, 3 hallucinated
    assert report.scores["CHAIR_i"] == pytest.approx(3 / 6)
    assert report.scores["CHAIR_s"] == pytest.approx(2 / 3)
    # colour words: red circle (ok), red square (no), green star (ok), yellow triangle (no), white <any> (ok),
    # black star (no), blue diamond (no)
    assert report.scores["A@Attr"] == pytest.approx(3 / 7)
    assert report.attribute_by_object == {GENERIC: [1, 1], "circle": [1, 1], "diamond": [0, 1], "square": [0, 1],
                                          "star": [1, 2], "triangle": [0, 1]}
    assert report.hallucinated == {"diamond": 1, "star": 1, "triangle": 1}
    assert report.counts["captions_hallucinating"] == 2 and report.counts["attributes"] == 7


def test_no_colour_words_means_no_attribute_accuracy_and_missing_truth_is_an_error() -> None:
    truth = {1: Truth(frozenset({"circle"}))}
    report = bias_scores({1: "a circle"}, truth, SHAPES)
    assert report.scores == {"CHAIR_s": 0.0, "CHAIR_i": 0.0}
    with pytest.raises(DataError, match=r"no ground-truth objects for image ids \[2\]"):
        bias_scores({2: "a circle"}, truth, SHAPES)


def test_chair_synonym_files(tmp_path: Path) -> None:
    """CHAIR's format: one object per line, its name first; multi-word synonyms match before their parts; a colour
    word that is also an object names the colour before a noun and the object otherwise."""
    synonyms = tmp_path / "synonyms.txt"
    synonyms.write_text("person, man, woman, people\nteddy bear, teddy bear, teddybear\nbear\ndog, puppy, pup\n"
                        "orange\n")
    lexicon = read_synonyms(synonyms, BASIC_COLOURS)
    mentions = read_caption("Two women hold an orange puppy near a teddy bear, and an orange.", lexicon)
    assert mentions.objects == ["person", "dog", "teddy bear", "orange"]
    assert mentions.attributes == [("orange", "dog")]
    assert read_caption("A grey bear with puppies", lexicon).attributes == [("gray", "bear")]
    synonyms.write_text("dog, puppy\ncat, puppy\n")
    with pytest.raises(DataError, match=r"synonyms.txt: item 'line 2': 'puppy' is a synonym of 'dog' and of 'cat'"):
        read_synonyms(synonyms, BASIC_COLOURS)
    with pytest.raises(DataError, match="synonym file not found"):
        read_synonyms(tmp_path / "nope.txt", BASIC_COLOURS)


def test_real_data_truth_from_references_and_instances(tmp_path: Path) -> None:
    (tmp_path / "synonyms.txt").write_text("person, man, woman\ndog, puppy\ndining table, table\ncat\n")
    instances = {"categories": [{"id": 1, "name": "person"}, {"id": 7, "name": "dining table"}, {"id": 9, "name": "kite"}],
                 "annotations": [{"image_id": 5, "category_id": 7}, {"image_id": 5, "category_id": 9},
                                 {"image_id": 6, "category_id": 1}]}
    (tmp_path / "instances.json").write_text(json.dumps(instances))
    references = {5: ["A man feeds a brown puppy.", "A dog and its owner."], 6: ["A cat sleeping."]}
    source = bias_source("synonyms.txt", ["instances.json"], tmp_path, references)
    assert source.truth[5] == Truth(frozenset({"person", "dog", "dining table", "kite"}), frozenset({("brown", "dog")}))
    assert source.truth[6].objects == {"cat", "person"}
    report = bias_scores({5: "a woman and a black dog at a table", 6: "a dog on a table"}, source.truth, source.lexicon)
    assert report.scores["CHAIR_i"] == pytest.approx(2 / 5) and report.scores["CHAIR_s"] == 0.5
    assert report.scores["A@Attr"] == 0.0  # black dog: the references say brown
    lexicon = read_synonyms(tmp_path / "synonyms.txt", BASIC_COLOURS)
    assert instance_objects(tmp_path / "instances.json", lexicon)[5] == {"dining table", "kite"}
    assert reference_truth({1: ["no objects here"]}, lexicon)[1] == Truth(frozenset(), frozenset())
    (tmp_path / "broken.json").write_text("{}")
    with pytest.raises(DataError, match="broken.json: not a COCO instances file"):
        instance_objects(tmp_path / "broken.json", lexicon)


def test_sources_by_setting(tmp_path: Path) -> None:
    assert "scenes.json is absent" in bias_source("auto", [], tmp_path, {})
    assert "turned off" in bias_source("off", [], tmp_path, {})
    with pytest.raises(DataError, match="scenes.json: scenes file not found"):
        bias_source("synthetic", [], tmp_path, {})


def test_lexicon_prefers_the_longest_phrase() -> None:
    lexicon = Lexicon({("hot", "dog"): "hot dog", ("dog",): "dog"}, {})
    assert read_caption("a hot dog and a dog", lexicon).objects == ["hot dog", "dog"]
