"""Tokenisation (``vlattn.data.text.tokenize``): hand examples and hypothesis properties."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from vlattn.data.text import PTB_PUNCTUATION, tokenize

WORDS = ["A", "dog", "Dog's", "can't", "cannot", "t-shirt", "1,000", "10:30", "u.s.", "Mr.", "e.g.", "café", "Ü", "2/3"]
SEPARATORS = [" ", ", ", ". ", "! ", "? ", " - ", "; ", ": ", "\t", '"', " ... ", "'", " & ", "!!"]
CAPTION_TEXT = st.lists(st.tuples(st.sampled_from(WORDS), st.sampled_from(SEPARATORS)), max_size=12).map(
    lambda pairs: "".join(word + sep for word, sep in pairs)
)


def test_examples() -> None:
    assert tokenize("A man riding a wave on top of a surfboard.") == "a man riding a wave on top of a surfboard".split()
    assert tokenize("Two dogs, one brown -- play!") == ["two", "dogs", "one", "brown", "play"]
    assert tokenize("The cat's toy") == ["the", "cat", "'s", "toy"]
    assert tokenize("  ...  ") == []


@settings(max_examples=300, deadline=None)
@given(CAPTION_TEXT)
def test_idempotent_on_joined_output(text: str) -> None:
    tokens = tokenize(text)
    assert tokenize(" ".join(tokens)) == tokens


def test_bracket_tokens_idempotent() -> None:
    tokens = tokenize("a dog (left) on a mat")
    assert tokenize(" ".join(tokens)) == tokens


@settings(max_examples=300, deadline=None)
@given(st.one_of(CAPTION_TEXT, st.text(max_size=40)))
def test_lowercase_without_punctuation_tokens(text: str) -> None:
    for token in tokenize(text):
        assert token == token.lower()
        assert token not in PTB_PUNCTUATION
        assert token.strip() == token and token
