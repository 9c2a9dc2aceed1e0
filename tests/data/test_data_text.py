"""Tokenisation (``vlattn.text.tokenize``): hand examples and hypothesis properties."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from vlattn.text import PTB_PUNCTUATION, tokenize

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


def test_reference_quirks() -> None:
    """Hand-checked outputs of stanford-corenlp-3.4.1's PTBTokenizer (pycocoevalcap), quirks included."""
    assert tokenize("I like the '90s, AT&T and rock 'n' roll") == ["i", "like", "the", "'90s", "at&t", "and", "rock",
                                                                     "'n'", "roll"]
    assert tokenize("a 3 1/2 inch ½ cup") == ["a", "3\u00a01/2", "inch", "1/2", "cup"]
    assert tokenize("#2 pencil, #hashtag & 50% off") == ["#", "2", "pencil", "#hashtag", "&", "50", "%", "off"]
    assert tokenize("a dog :) smiles -- wait.... ok") == ["a", "dog", ":-rrb-", "smiles", "wait", "ok"]
    assert tokenize("£5 or €5 or 5¢") == ["#", "5", "or", "$", "5", "or", "5", "cents"]
    assert tokenize("a 😀 dog") == ["a", "dog"]  # characters outside the BMP are deleted


def test_not_idempotent_like_the_reference() -> None:
    """The reference is not idempotent: "A'dog" is one word, its lower-cased form "a'dog" is not."""
    assert tokenize("A'dog") == ["a'dog"]
    assert tokenize("a'dog") == ["a", "dog"]


def test_bracket_tokens_idempotent() -> None:
    tokens = tokenize("a dog (left) on a mat")
    assert tokenize(" ".join(tokens)) == tokens


@settings(max_examples=300, deadline=None)
@given(st.one_of(CAPTION_TEXT, st.text(max_size=40)))
def test_lowercase_without_punctuation_tokens(text: str) -> None:
    for token in tokenize(text):
        assert token == token.lower()
        assert token not in PTB_PUNCTUATION
        assert token and " " not in token
