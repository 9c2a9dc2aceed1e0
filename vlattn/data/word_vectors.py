"""Pre-trained word vectors from a local GloVe-format text file (never downloaded).

Format: one word per line followed by its ``dim`` numbers, separated by single spaces (``glove.840B.300d.txt``
and friends, optionally gzip-compressed as ``.gz``); a first line of two integers (the word2vec text
header ``count dim``) is skipped. Only the vocabulary's words are parsed, so a 5 GB file is read in one pass
without holding it in memory. Lines whose word itself contains spaces (a few in glove.840B) are never
vocabulary words and are skipped. The first occurrence of a word wins. The special tokens (``<pad>``,
``<unk>``, ...) are never looked up; words absent from the file keep their random initialisation.
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import IO

import numpy as np
import torch

from vlattn.data.vocab import SPECIALS, Vocabulary
from vlattn.errors import DataError


def _open(path: Path) -> IO[str]:
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return path.open(encoding="utf-8", errors="replace")


def _is_header(line: str) -> bool:
    fields = line.split()
    return len(fields) == 2 and all(field.isdigit() for field in fields)


def read_word_vectors(path: str | Path, vocab: Vocabulary, dim: int) -> dict[int, torch.Tensor]:
    """``{word index: vector (dim,)}`` for the words of ``vocab`` found in the file at ``path``.

    A found word whose line does not hold ``dim`` finite numbers is a :class:`DataError` naming the file and
    the line (a file of another dimension fails at its first vocabulary word).
    """
    path = Path(path)
    if not path.is_file():
        raise DataError("word vectors file not found", path=path)
    wanted = {word: index for word, index in vocab.stoi.items() if word not in SPECIALS}
    vectors: dict[int, torch.Tensor] = {}
    try:
        with _open(path) as handle:
            for number, line in enumerate(handle, start=1):
                if number == 1 and _is_header(line):
                    continue
                head = line.split(" ", 1)[0]
                if head not in wanted or wanted[head] in vectors:
                    continue
                values = line.rstrip("\n").rstrip(" ").split(" ")[1:]
                if len(values) > dim:  # a multi-word entry starting with this word
                    continue
                vectors[wanted[head]] = _parse(values, dim, path, number)
    except (OSError, EOFError) as err:
        raise DataError(f"cannot read word vectors: {err}", path=path) from None
    return vectors


def _parse(values: list[str], dim: int, path: Path, number: int) -> torch.Tensor:
    if len(values) != dim:
        raise DataError(f"expected {dim} numbers after the word, got {len(values)}", path=path, item=f"line {number}")
    try:
        vector = np.asarray(values, dtype=np.float32)
    except ValueError:
        raise DataError("word vector holds a value that is not a number", path=path, item=f"line {number}") from None
    if not np.isfinite(vector).all():
        raise DataError("word vector holds NaN or inf", path=path, item=f"line {number}")
    return torch.from_numpy(vector)
