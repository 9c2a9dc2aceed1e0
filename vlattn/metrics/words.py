"""Word ids of many captions at once, computed on their UTF-8 bytes: Python touches only the distinct words.

Words are what ``str.split()`` returns: runs of Unicode whitespace separate them, and every other character
(NUL included) belongs to a word. Each token's bytes are read as 8-byte chunks and hashed; one sort of
(hash, token index) brings equal tokens together; then every token is compared chunk by chunk with the
first token of its run, so a hash collision can never merge two words: tokens that differ from their run's
first token are grouped again among themselves, until none is left.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

_WHITESPACE = "".join(c for c in map(chr, range(0x3001)) if c.isspace())  # all of str.split()'s separators
_WIDE_SPACES = [c for c in _WHITESPACE if not c.isascii()]
_IS_SPACE = np.zeros(256, dtype=bool)  # (256,) whether a byte is an ASCII separator
_IS_SPACE[[ord(c) for c in _WHITESPACE if c.isascii()]] = True
_PREFIX_MASK = np.array([(1 << (8 * m)) - 1 for m in range(9)], dtype=np.uint64)  # keeps the first m bytes
_MIX = np.uint64(0x9E3779B97F4A7C15)
Chunks = list[tuple[np.ndarray, np.ndarray]]  # chunk j: (tokens longer than 8j bytes (T_j,), their bytes (T_j,))


def word_ids(strings: Sequence[str], vocab: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """``(ids (T,) int32, words per string (S,) int64)`` of the whitespace-split ``strings``.

    ``vocab`` maps words to ids 0, 1, ... in insertion order; unseen words are added in order of first
    occurrence.
    """
    text = " ".join(strings)
    if not text.isascii():
        for space in _WIDE_SPACES:  # one character for one, so character offsets stay valid
            if space in text:
                text = text.replace(space, " ")
    data = text.encode("utf-8", "surrogatepass")
    raw = np.frombuffer(data, dtype=np.uint8)  # (N,)
    edges = np.flatnonzero(np.diff(_IS_SPACE[raw], prepend=True, append=True))
    starts, lengths = edges[0::2], edges[1::2] - edges[0::2]  # (T,) byte offset and size of each token
    chunks = _chunks(raw, starts, lengths)
    group, first = _group_tokens(chunks, lengths)  # (T,), (D,)
    order = np.argsort(first)  # the distinct words by first occurrence
    bounds = zip(starts[first[order]].tolist(), (starts + lengths)[first[order]].tolist())
    distinct_ids = np.empty(len(first), dtype=np.int32)
    distinct_ids[order] = [vocab.setdefault(data[s:e].decode("utf-8", "surrogatepass"), len(vocab)) for s, e in bounds]
    sizes = np.fromiter(map(len, strings), dtype=np.int64, count=len(strings)) + 1  # characters + joining space
    string_start = np.cumsum(sizes) - sizes  # (S,) character offsets in ``text``
    if len(data) != len(text):  # multi-byte characters: character offsets -> byte offsets
        string_start = np.append(np.flatnonzero((raw & 0xC0) != 0x80), len(raw))[string_start]
    counts = np.diff(np.searchsorted(starts, string_start), append=len(starts))
    return distinct_ids[group], counts


def _chunks(raw: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> Chunks:
    """Chunk j of every token longer than 8j bytes: its bytes 8j..8j+7 as one little-endian uint64, zero
    beyond the token's end."""
    aligned = np.zeros(len(raw) // 8 + 2, dtype="<u8")  # (N/8 + 2,) the bytes, zero-padded
    aligned.view(np.uint8)[: len(raw)] = raw
    out: Chunks = []
    tokens = np.arange(len(starts))
    for offset in range(0, int(lengths.max(initial=0)), 8):
        if offset:
            tokens = tokens[lengths[tokens] > offset]
        at = starts[tokens] + offset
        word, shift = at >> 3, (at & 7).astype(np.uint64) << np.uint64(3)
        # bytes at..at+7 straddle two aligned words; (x << 1) << (63 - s) is x << (64 - s), also for s = 0
        value = (aligned[word] >> shift) | ((aligned[word + 1] << np.uint64(1)) << (np.uint64(63) - shift))
        out.append((tokens, value & _PREFIX_MASK[np.minimum(lengths[tokens] - offset, 8)]))
    return out


def _group_tokens(chunks: Chunks, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(group (T,), first (D,))``: tokens with equal bytes share a group; ``first`` is each group's first token."""
    digest = lengths.astype(np.uint64) * _MIX  # (T,) 64-bit hash of the length and the chunks
    for tokens, values in chunks:
        digest[tokens] = (digest[tokens] ^ values) * _MIX
    digest ^= digest >> np.uint64(29)
    group = np.empty(len(lengths), dtype=np.int64)
    firsts: list[np.ndarray] = []
    pending = np.arange(len(lengths))  # increasing, so a run's first member is its earliest token
    while len(pending):
        bits = max(len(pending) - 1, 1).bit_length()
        packed = (digest[pending] >> np.uint64(bits + 1)).astype(np.int64) << bits | np.arange(len(pending))
        packed.sort()  # by hash, then by token
        new = np.ones(len(packed), dtype=bool)
        np.not_equal(packed[1:] >> bits, packed[:-1] >> bits, out=new[1:])
        members = pending[packed & ((1 << bits) - 1)]  # (P,)
        run = np.cumsum(new) - 1  # (P,)
        same = _same_as_head(members, np.flatnonzero(new)[run], chunks, lengths)  # True at every run's head
        group[members[same]] = run[same] + sum(map(len, firsts))
        firsts.append(members[new])
        pending = np.sort(members[~same])
    return group, np.concatenate(firsts) if firsts else np.zeros(0, dtype=np.int64)


def _same_as_head(members: np.ndarray, head: np.ndarray, chunks: Chunks, lengths: np.ndarray) -> np.ndarray:
    """(P,) bool: token ``members[i]`` has the same bytes as token ``members[head[i]]``."""
    length = lengths[members]
    same = length == length[head]
    for offset, (holders, values) in zip(range(0, 8 * len(chunks), 8), chunks):
        if offset:  # only tokens longer than ``offset`` have this chunk; equal lengths: both or neither
            check = np.flatnonzero(same & (length > offset))
            mine = values[np.searchsorted(holders, members[check])]
            same[check] = mine == values[np.searchsorted(holders, members[head[check]])]
        else:  # every token has chunk 0
            mine = values[members]
            same &= mine == mine[head]
    return same
