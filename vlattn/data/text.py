"""Caption text normalisation shared by vocabularies and the metrics' Python tokenizer.

``tokenize`` reproduces, on caption text, what the COCO caption evaluation code (pycocoevalcap) produces:
the Stanford PTB tokenizer run with ``-preserveLines -lowerCase``, then removal of the tokens in
:data:`PTB_PUNCTUATION`. Its behaviour, quirks of the reference pipeline included:

- lowercase; curly quotes are treated as straight ones;
- clitics are split off: ``dog's -> dog 's``, ``can't -> ca n't``, ``cannot -> can not``, ``gonna -> gon na``;
- words keep their internal hyphens, slashes, apostrophes and periods (``black-and-white``, ``2/3``,
  ``o'clock``, ``t.v``), numbers their internal commas and colons (``1,000``, ``10:30``);
- a final period stays on acronyms, single letters and common abbreviations (``u.s.``, ``mr.``, ``etc.``)
  and is split off (then removed) everywhere else;
- brackets become ``-lrb- -rrb- -lsb- -rsb- -lcb- -rcb-`` and are *kept*: the COCO code's punctuation list
  is upper case and so never matches the lower-cased bracket tokens;
- symbols such as ``$ % & + * =`` become tokens of their own and are kept; runs of ``!``/``?`` (``!!``)
  are one token and kept, as in the reference pipeline; all other punctuation is removed.
"""

from __future__ import annotations

import re

# The punctuation tokens removed by pycocoevalcap's PTBTokenizer after tokenisation.
PTB_PUNCTUATION: frozenset[str] = frozenset(
    ["''", "'", "``", "`", "-LRB-", "-RRB-", "-LCB-", "-RCB-", ".", "?", "!", ",", ":", "-", "--", "...", ";"]
)

_QUOTES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u201c": '"', "\u201d": '"', "\n": " ", "\t": " "})
# Single characters the PTB tokenizer rewrites (straight double quotes become `` or '', both removed).
_SYMBOLS = {"(": "-lrb-", ")": "-rrb-", "[": "-lsb-", "]": "-rsb-", "{": "-lcb-", "}": "-rcb-", '"': "''"}
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr st jr sr vs etc inc corp co ltd ave mt ft prof gen gov sgt capt lt col rev".split()
)
_SPLIT_WORDS = {"cannot": "can not", "gonna": "gon na", "wanna": "wan na", "gotta": "got ta"}

_CLITIC = re.compile(r"(?<=\w)('s|'re|'ve|'ll|'d|'m|n't)\b")
_SPLIT_WORD = re.compile(r"\b(" + "|".join(_SPLIT_WORDS) + r")\b")
_TOKEN = re.compile(
    r"""
    (?P<bracket>-[lr][rsc]b-)
    | (?P<clitic>'(?:s|re|ve|ll|d|m)\b)
    | (?P<word>[#@]?\w+(?:(?:[-'./]|(?<=\d)[,:](?=\d))\w+)*)(?P<period>\.(?!\.))?
    | (?P<ellipsis>\.\.\.+)
    | (?P<bang>[!?]+)
    | (?P<other>\S)
    """,
    re.VERBOSE,
)
_ACRONYM = re.compile(r"(?:[^\W\d_]\.)*[^\W\d_]")


def ptb_tokens(text: str) -> list[str]:
    """Lowercased PTB-style tokens of ``text``, punctuation included (brackets as ``-lrb-`` etc.)."""
    text = text.translate(_QUOTES).lower()
    text = _SPLIT_WORD.sub(lambda m: _SPLIT_WORDS[m.group(1)], text)
    text = _CLITIC.sub(r" \1", text)
    tokens: list[str] = []
    for match in _TOKEN.finditer(text):
        word = match.group("word")
        if word is None:
            token = match.group(0)
            tokens.append(_SYMBOLS.get(token, token))
        elif match.group("period") and (_ACRONYM.fullmatch(word) or word in _ABBREVIATIONS):
            tokens.append(word + ".")
        else:
            tokens.append(word)
            if match.group("period"):
                tokens.append(".")
    return tokens


def tokenize(text: str) -> list[str]:
    """Lowercase ``text`` and split it into word tokens with punctuation removed (see the module notes).

    >>> tokenize("A dog's toy, on the T.V. (left).")
    ['a', 'dog', "'s", 'toy', 'on', 'the', 't.v.', '-lrb-', 'left', '-rrb-']
    """
    return [token for token in ptb_tokens(text) if token not in PTB_PUNCTUATION]
