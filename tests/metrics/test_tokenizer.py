"""The PTB tokenizer: both backends, caption/line alignment, and token-for-token agreement with the jar."""

from __future__ import annotations

import subprocess

import pytest

from metrics.corpora import CAPTIONS, random_strings, tokenizer_corpus
from tests.slow import scaled
from vlattn.text import LINE_BREAKS
from vlattn.metrics import tokenizer as tokenizer_module
from vlattn.metrics.tokenizer import PTBTokenizer, java_tokenizer_jar

needs_java = pytest.mark.skipif(java_tokenizer_jar()[0] is None, reason="Java PTB tokenizer unavailable")
BACKENDS = ["python", pytest.param("java", marks=needs_java)]


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
@pytest.mark.parametrize("backend", BACKENDS)
def test_examples(backend: str, caption: str, expected: str) -> None:
    assert PTBTokenizer(backend).tokenize({0: [caption]}) == {0: [expected]}


def test_layout_and_dict_captions() -> None:
    out = PTBTokenizer("python").tokenize({7: ["A Cat.", {"caption": "A dog!"}], 3: ["x"]})
    assert out == {7: ["a cat", "a dog"], 3: ["x"]}


def test_unknown_backend() -> None:
    with pytest.raises(ValueError, match="python"):
        PTBTokenizer("perl")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("line_break", list(LINE_BREAKS) + ["\r\n"])
def test_line_breaks_inside_a_caption_keep_captions_on_their_images(backend: str, line_break: str) -> None:
    """The issue's example: the Stanford tokenizer splits lines at \\x0c (and \\x0b, \\r, \\u2028, \\u2029),
    which shifted every later caption onto the wrong image."""
    refs = {1: [f"a dog{line_break}runs on grass", "a dog runs"], 2: ["a cat sleeps"], 3: ["a red bus"]}
    expected = {1: ["a dog runs on grass", "a dog runs"], 2: ["a cat sleeps"], 3: ["a red bus"]}
    assert PTBTokenizer(backend).tokenize(refs) == expected


@pytest.mark.parametrize("backend", BACKENDS)
def test_non_breaking_space_inside_a_token_is_kept(backend: str) -> None:
    """pycocoevalcap splits lines on " " only: the jar's "1\\u00a01/2" (a fraction) stays one token."""
    assert PTBTokenizer(backend).tokenize({0: ["a 1 1/2 inch nail"]}) == {0: ["a 1\u00a01/2 inch nail"]}


@needs_java
def test_java_line_count_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    """One output line too many (a line break the mapping missed) is an error, never a silent shift."""
    real_run = subprocess.run

    def extra_line(*args: object, **kwargs: object) -> subprocess.CompletedProcess:
        proc = real_run(*args, **kwargs)  # type: ignore[call-overload]
        return subprocess.CompletedProcess(proc.args, 0, proc.stdout + b"surplus\n", proc.stderr)

    monkeypatch.setattr(tokenizer_module.subprocess, "run", extra_line)
    with pytest.raises(RuntimeError, match="3 lines for 2 captions"):
        PTBTokenizer("java").tokenize({0: ["a dog", "a cat"]})


def assert_backends_agree(texts: list[str]) -> None:
    """Python and Java give the same scored tokens for every caption of ``texts``."""
    captions = {i: [text] for i, text in enumerate(texts)}
    java = PTBTokenizer("java").tokenize(captions)
    python = PTBTokenizer("python").tokenize(captions)
    assert {texts[i]: (java[i], python[i]) for i in captions if java[i] != python[i]} == {}


@needs_java
@pytest.mark.slow
def test_python_matches_java_on_every_feature_class() -> None:
    """Token for token, after pycocoevalcap's post-processing, on the broad corpus (dashes, emoji, emoticons,
    leading apostrophes, units, fractions, '#', '&', periods, URLs, quotes, letters, white space, ...)."""
    corpus = tokenizer_corpus(per_class=scaled(150))
    assert_backends_agree([text for name, texts in corpus.items() if name != "exotic" for text in texts])


@needs_java
@pytest.mark.slow
def test_python_matches_java_on_random_strings() -> None:
    assert_backends_agree(random_strings(seed=1, count=scaled(12000)) + CAPTIONS)


@needs_java
@pytest.mark.slow
def test_python_matches_java_on_bmp_characters() -> None:
    """Every character of the Basic Multilingual Plane (an evenly spaced subset at reduced size), alone and
    inside a word: the Unicode classes (letters, digits, marks, symbols, deleted characters) agree."""
    codes = [c for c in range(1, 0x10000) if not 0xD800 <= c <= 0xDFFF and chr(c) not in LINE_BREAKS]
    chosen = [chr(c) for c in codes[:: max(1, round(len(codes) / scaled(len(codes))))]]
    assert_backends_agree(chosen + [f"ab{ch}cd" for ch in chosen])

