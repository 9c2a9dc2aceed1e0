"""The Python PTB tokenizer, and its agreement with the Java one on caption text."""

from __future__ import annotations

import pytest

from metrics.corpora import CAPTIONS
from vlattn.metrics.tokenizer import PTBTokenizer, java_tokenizer_jar


@pytest.mark.parametrize(
    ("caption", "expected"),
    [
        ("A dog's toy, on the table.", "a dog 's toy on the table"),
        ("They can't go; it isn't 10:30 yet!", "they ca n't go it is n't 10:30 yet"),
        ("A black-and-white T.V. costs $1,000.", "a black-and-white t.v. costs $ 1,000"),
        ("Two men (one in a hat)", "two men -lrb- one in a hat -rrb-"),
        ("Mr. Smith's dog... is sleeping?", "mr. smith 's dog is sleeping"),
        ('A sign that says "STOP".', "a sign that says stop"),
        ("", ""),
    ],
)
def test_python_backend(caption: str, expected: str) -> None:
    assert PTBTokenizer("python").tokenize({0: [caption]}) == {0: [expected]}


def test_layout_and_dict_captions() -> None:
    out = PTBTokenizer("python").tokenize({7: ["A Cat.", {"caption": "A dog!"}], 3: ["x"]})
    assert out == {7: ["a cat", "a dog"], 3: ["x"]}


def test_unknown_backend() -> None:
    with pytest.raises(ValueError, match="python"):
        PTBTokenizer("perl")


@pytest.mark.skipif(java_tokenizer_jar()[0] is None, reason="Java PTB tokenizer unavailable")
def test_python_matches_java_on_captions() -> None:
    captions = {i: [c] for i, c in enumerate(CAPTIONS)}
    java = PTBTokenizer("java").tokenize(captions)
    python = PTBTokenizer("python").tokenize(captions)
    mismatches = {CAPTIONS[i]: (java[i], python[i]) for i in captions if java[i] != python[i]}
    assert not mismatches
