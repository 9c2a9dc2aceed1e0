"""Streaming a bottom-up TSV file in blocks of whole lines, parsed in a pool of processes.

A COCO TSV is 20-60 GB of base64 text; parsing it (splitting fields, decoding base64, checking the arrays) costs more
CPU time per byte than the disk takes to read it, so ``vlattn data convert`` reads the file sequentially in blocks of
:data:`BLOCK_BYTES` (cut after the last line end), hands each block with the number of its first line to one of
``jobs`` forked worker processes, and takes the parsed images back in file order. At most ``2 x jobs`` blocks are in
flight, so memory stays bounded whatever the file's size. With ``jobs`` = 1 the blocks are parsed in this process.
An error of any line is raised when the stream reaches that line, as a sequential read would raise it.
"""

from __future__ import annotations

import os
from collections import deque
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol

from vlattn.data.features.forked import forked_workers

BLOCK_BYTES = 8 << 20  # about 15 COCO images (50 regions x 2048 float32 as base64) per task
Parsed = list[tuple[int, int, Any]]  # (line number, image id, what the parser made of it) of each non-blank line


class LineParser(Protocol):
    def __call__(self, line: bytes, file: Path, line_no: int) -> tuple[int, Any]: ...


def usable_cores() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def blocks(file: Path) -> Iterator[tuple[bytes, int]]:
    """``(block, number of its first line)``: the file's bytes in order, each block whole lines (the last one may
    lack its line end), read with unbuffered reads of :data:`BLOCK_BYTES`."""
    carry, line_no = b"", 1
    with open(file, "rb", buffering=0) as handle:
        while chunk := handle.read(BLOCK_BYTES):
            data = carry + chunk if carry else chunk
            end = data.rfind(b"\n") + 1
            if end == 0:  # a line longer than the block: keep reading
                carry = data
                continue
            carry = data[end:]
            yield data[:end], line_no
            line_no += data.count(b"\n", 0, end)
    if carry:
        yield carry, line_no


def parse_block(parse: LineParser, file: Path, block: bytes, first_line: int) -> Parsed:
    """Every non-blank line of ``block`` parsed (blank: empty or only white space, skipped but counted)."""
    lines = block.split(b"\n")
    if block.endswith(b"\n"):
        lines.pop()  # the empty remainder after the last line end
    out = []
    for offset, line in enumerate(lines):
        if line and not line.isspace():
            image_id, regions = parse(line, file, first_line + offset)
            out.append((first_line + offset, image_id, regions))
    return out


_WORKER_PARSER: LineParser | None = None  # set in each forked worker


def _set_parser(parse: LineParser) -> None:
    global _WORKER_PARSER
    _WORKER_PARSER = parse


def _parse_in_worker(file: Path, block: bytes, first_line: int) -> Parsed:
    assert _WORKER_PARSER is not None
    return parse_block(_WORKER_PARSER, file, block, first_line)


def parsed_lines(
    parse: LineParser, file: Path, jobs: int, progress: Callable[[int], None] | None = None
) -> Iterator[tuple[int, int, Any]]:
    """``(line number, image id, regions)`` of every non-blank line of ``file`` in file order, parsed by ``parse``
    in ``jobs`` processes (forked; the parser is inherited, not pickled); ``progress`` gets the bytes consumed."""
    if jobs <= 1:
        for block, first_line in blocks(file):
            yield from parse_block(parse, file, block, first_line)
            if progress is not None:
                progress(len(block))
        return
    with forked_workers(jobs, _set_parser, (parse,)) as workers:
        pending: deque = deque()
        for block, first_line in blocks(file):
            pending.append((len(block), workers.submit(_parse_in_worker, file, block, first_line)))
            if len(pending) >= 2 * jobs:
                yield from _take(pending, progress)
        while pending:
            yield from _take(pending, progress)


def _take(pending: deque, progress: Callable[[int], None] | None) -> Iterator[tuple[int, int, Any]]:
    size, result = pending.popleft()
    yield from result.result()  # a worker's DataError is raised here, in file order
    if progress is not None:
        progress(size)
