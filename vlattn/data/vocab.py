"""Word vocabulary: special tokens, count threshold, encode/decode, JSON persistence.

Indices: ``<pad>`` = 0, ``<bos>`` = 1, ``<eos>`` = 2, ``<unk>`` = 3, then the kept words ordered by
count (descending) and then alphabetically, so a vocabulary is a deterministic function of the captions.
"""

from __future__ import annotations

from collections import Counter
from itertools import chain, repeat
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from vlattn.data.jsonfiles import field, read_json, write_json
from vlattn.data.karpathy import ImageEntry, normalize_split
from vlattn.data.packed import flat_offsets
from vlattn.errors import DataError

SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")
FORMAT = "vlattn-vocab"


class Vocabulary:
    """Bidirectional word <-> index map with the four special tokens first."""

    PAD, BOS, EOS, UNK = 0, 1, 2, 3

    def __init__(self, words: Sequence[str]) -> None:
        """``words``: the non-special words in index order (index 4 onwards)."""
        self.itos: list[str] = [*SPECIALS, *words]
        self.stoi: dict[str, int] = {word: index for index, word in enumerate(self.itos)}
        if len(self.stoi) != len(self.itos):
            raise DataError("vocabulary words must be unique and must not repeat the special tokens")

    @classmethod
    def build(cls, captions: Iterable[Sequence[str]], min_count: int = 5) -> "Vocabulary":
        """Keep words occurring at least ``min_count`` times in the tokenised ``captions``."""
        counts = Counter(chain.from_iterable(captions))  # counted in C, not a Python step per word
        kept = [word for word, count in counts.items() if count >= min_count and word not in SPECIALS]
        kept.sort(key=lambda word: (-counts[word], word))
        return cls(kept)

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, word: object) -> bool:
        return word in self.stoi

    def encode(self, tokens: Sequence[str], max_len: int | None = None) -> list[int]:
        """Word indices of ``tokens`` (no BOS/EOS; unknown words -> UNK), truncated to ``max_len``."""
        ids = [self.stoi.get(token, self.UNK) for token in tokens]
        return ids if max_len is None else ids[:max_len]

    def encode_flat(self, captions: Sequence[Sequence[str]]) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`encode` of every caption, concatenated: word indices (W,) int32 and offsets (C + 1,) int64 (caption
        i is ``ids[offsets[i]:offsets[i + 1]]``)."""
        offsets = flat_offsets([len(caption) for caption in captions])
        tokens = chain.from_iterable(captions)  # looked up by map in C: COCO's 6M words in a fraction of a second
        ids = np.fromiter(map(self.stoi.get, tokens, repeat(self.UNK)), dtype=np.int32, count=int(offsets[-1]))
        return ids, offsets

    def decode(self, ids: Iterable[int]) -> str:
        """Words joined by spaces: stops at EOS, skips PAD and BOS."""
        words = []
        for index in ids:
            index = int(index)
            if index == self.EOS:
                break
            if index in (self.PAD, self.BOS):
                continue
            words.append(self.itos[index])
        return " ".join(words)

    @classmethod
    def from_ordered(cls, words: Sequence[str], *, path: object = None) -> tuple["Vocabulary", list[int]]:
        """A vocabulary holding another project's word table ``words`` (index order, its four special tokens
        anywhere, e.g. torchtext's ``<unk> <pad> <bos> <eos>`` first), and ``order``: entry i of ours is
        ``words[order[i]]`` — the row permutation that carries an embedding or output layer over."""
        index: dict[str, int] = {}
        for position, word in enumerate(words):
            if word in index:
                raise DataError(f"word {word!r} appears twice (entries {index[word]} and {position})", path=path)
            index[word] = position
        missing = [special for special in SPECIALS if special not in index]
        if missing:
            raise DataError(f"the word list lacks the special token(s) {', '.join(missing)}", path=path)
        order = [index[special] for special in SPECIALS]
        order += [position for position, word in enumerate(words) if word not in SPECIALS]
        return cls([words[position] for position in order[len(SPECIALS) :]]), order

    def save(self, path: str | Path) -> None:
        """Write ``{"format", "itos"}`` JSON atomically."""
        write_json(path, {"format": FORMAT, "itos": self.itos})

    @classmethod
    def load(cls, path: str | Path) -> "Vocabulary":
        """Read a vocabulary written by :meth:`save`."""
        data = read_json(path)
        itos = field(data, "itos", list, path=path, item="itos")
        if data.get("format") != FORMAT or tuple(itos[: len(SPECIALS)]) != SPECIALS:
            raise DataError(f"not a {FORMAT} file (special tokens must come first: {SPECIALS})", path=path)
        if not all(isinstance(word, str) for word in itos):
            raise DataError("vocabulary entries must be strings", path=path, item="itos")
        try:
            return cls(itos[len(SPECIALS) :])
        except DataError as err:
            raise DataError(str(err), path=path) from None


def build_vocabulary(
    entries: Iterable[ImageEntry], splits: Sequence[str] = ("train",), min_count: int = 5
) -> Vocabulary:
    """Vocabulary from the captions of ``entries`` in ``splits`` (``restval`` counts as ``train``)."""
    wanted = {normalize_split(split) for split in splits}
    return Vocabulary.build(chain.from_iterable(entry.captions for entry in entries if entry.split in wanted),
                            min_count=min_count)


def read_word_list(path: str | Path) -> list[str]:
    """Another project's word table in index order: a JSON list of strings (``*.json``; any token, whitespace
    included, e.g. ``json.dump(vocab.itos, f)``), or plain text with one word per line (UTF-8, LF or CRLF line
    ends; no token may hold whitespace there)."""
    path = Path(path)
    if path.suffix.lower() == ".json":
        words = read_json(path)
        if not isinstance(words, list):
            raise DataError(f"expected a JSON list of the words in index order, got {type(words).__name__}", path=path)
        for number, word in enumerate(words):
            if not isinstance(word, str) or not word:
                raise DataError(f"expected a non-empty string, got {word!r}", path=path, item=f"entry {number}")
    else:
        try:
            words = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as err:
            raise DataError(f"cannot read the word list: {err}", path=path) from None
        for number, word in enumerate(words, start=1):
            if not word or any(c.isspace() for c in word):
                raise DataError(f"line {number}: expected one word without spaces, got {word!r} (a table holding "
                                "whitespace tokens goes in a .json list: docs/m2-official.md)", path=path)
    if not words:
        raise DataError("the word list is empty", path=path)
    return words
