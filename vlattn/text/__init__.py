"""Caption text normalisation shared by vocabularies and the metrics' Python tokenizer.

``tokenize`` gives, token for token, what the COCO caption evaluation code (pycocoevalcap) gives: the Stanford
PTB tokenizer of ``stanford-corenlp-3.4.1.jar`` run with ``-preserveLines -lowerCase`` (re-implemented in
:mod:`vlattn.text.ptb`), then pycocoevalcap's post-processing of each output line: ``line.rstrip().split(" ")``
and removal of the tokens in :data:`PTB_PUNCTUATION`. Its behaviour, quirks of the reference pipeline included:

- lowercase; clitics are split off: ``dog's -> dog 's``, ``can't -> ca n't``, ``cannot -> can not``,
  ``gonna -> gon na``; ``'90s``, ``'em``, ``'cause``, ``o'clock``, ``rock 'n' roll`` stay whole;
- words keep their internal hyphens, slashes, apostrophes and periods (``black-and-white``, ``2/3``, ``t.v``),
  numbers their internal commas and colons (``1,000``, ``10:30``); ``AT&T`` is one token, ``rock & roll`` three;
- fractions: ``3 1/2`` is one token with a non-breaking space inside, ``½`` becomes ``1/2``;
- a final period stays on acronyms and a list of abbreviations (``u.s.``, ``mr.``, ``etc.``);
- brackets become ``-lrb- -rrb- -lsb- -rsb- -lcb- -rcb-`` and are *kept*: the COCO code's punctuation list
  is upper case and so never matches the lower-cased bracket tokens; so are emoticons (``:-rrb-``);
- dashes ``—``/``–``/``---`` become ``--`` (removed), five or more hyphens stay; ``£`` becomes ``#``, ``€`` ``$``;
- symbols such as ``$ % & + * = #`` are tokens of their own and kept; runs of ``!``/``?`` (``!!``) are one
  token and kept; characters outside the Basic Multilingual Plane (emoji) are deleted.

``docs/tokenization.md`` lists where the Python path can still differ from the jar (exotic Unicode only).
"""

from __future__ import annotations

from typing import Sequence

from vlattn.text.ptb import split_lines

# The punctuation tokens removed by pycocoevalcap's PTBTokenizer after tokenisation.
PTB_PUNCTUATION: frozenset[str] = frozenset(
    ["''", "'", "``", "`", "-LRB-", "-RRB-", "-LCB-", "-RCB-", ".", "?", "!", ",", ":", "-", "--", "...", ";"]
)

# Characters the Stanford tokenizer treats as line breaks: inside a caption they would split it into two
# output lines and shift every later caption onto the wrong image, so they are read as spaces.
LINE_BREAKS = "\r\n\x0b\x0c\u2028\u2029"
_ONE_LINE = str.maketrans({char: " " for char in LINE_BREAKS})


def one_line(text: str) -> str:
    """``text`` with every character the Stanford tokenizer reads as a line break replaced by a space."""
    return text.translate(_ONE_LINE)


def finish_line(line: str) -> list[str]:
    """pycocoevalcap's post-processing of one tokenizer output line: split on " ", drop punctuation tokens.

    Tokens may hold non-breaking spaces (``1\\u00a01/2``), which this split keeps, as pycocoevalcap does.
    """
    return [word for word in line.rstrip().split(" ") if word and word not in PTB_PUNCTUATION]


def ptb_lines(texts: Sequence[str]) -> list[str]:
    """What ``PTBTokenizer -preserveLines -lowerCase`` prints for ``texts``, one caption per line.

    The captions are tokenised as one stream, as the jar reads them (a few rules look past the end of a
    line); line breaks inside a caption are first read as spaces (:func:`one_line`).
    """
    if not texts:
        return []
    lines = split_lines("".join(one_line(text) + "\n" for text in texts))
    return [" ".join(tokens) for tokens in lines[: len(texts)]]


def ptb_tokens(text: str) -> list[str]:
    """Lower-cased PTB tokens of one caption, punctuation included (brackets as ``-lrb-`` etc.)."""
    return split_lines(one_line(text) + "\n")[0]


def tokenize(text: str) -> list[str]:
    """Lowercase ``text`` and split it into word tokens with punctuation removed (see the module notes).

    >>> tokenize("A dog's toy, on the T.V. (left).")
    ['a', 'dog', "'s", 'toy', 'on', 'the', 't.v.', '-lrb-', 'left', '-rrb-']
    """
    return finish_line(" ".join(ptb_tokens(text)))
