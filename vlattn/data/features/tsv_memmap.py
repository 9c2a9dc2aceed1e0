"""A bottom-up TSV converted to a memmap store by processes that each read, parse and write their own part.

Converting a COCO TSV (20-60 GB of base64 text) is CPU-bound: per image a line is split into fields, base64-decoded,
checked, rounded to float16 and written. Each of ``jobs`` forked processes takes the next chunk of a file
(:data:`CHUNK_BYTES`; a chunk's lines are those that start in it, the last one read on past its end), reads it
itself with positioned reads into a buffer it reuses from chunk to chunk (the chunk after it hinted to the kernel
first, so the disk streams ahead; new memory per chunk would cost a page fault per 4 KiB), parses its
lines in place (:meth:`~.tsv.TSVStore.parse_span`: no copy per line) and writes its images' rows at their place in
the store's raw files with positioned writes. The place of a chunk's rows is the sum of the rows of the chunks
before it: each process publishes its chunk's row count in shared memory and, before writing, waits until the
counts of all earlier chunks are known (chunks are taken in file order, so it waits only for chunks being parsed).
The main process collects each chunk's ids, row counts and image sizes in file order, checks the ids for
duplicates and writes the index arrays (:class:`~.memmap._MemmapWriter`).

Errors are those of the sequential conversion (:meth:`~.tsv.TSVStore.stream` into :func:`~.memmap.write_memmap`),
raised in file order: a process that fails on a line reports where the line lies, and the main process, which
knows the line's number once the chunks before it are in, converts that line again itself and raises its error.
The store's bytes are those of the sequential conversion.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, NoReturn

import numpy as np
import torch

from vlattn.data.features.forked import forked_workers
from vlattn.data.features.memmap import _BOXES, _FEATURES, EncodedRegions, _MemmapWriter, check_half, encode_regions
from vlattn.data.features.readahead import will_need
from vlattn.data.features.storage import atomic_dir
from vlattn.data.features.tsv import TSVStore
from vlattn.errors import DataError

CHUNK_BYTES = 8 << 20  # about 15 COCO images (50 regions x 2048 float32 as base64) per chunk
_EXTEND = 1 << 20  # read on in steps of this many bytes to finish a chunk's last line


@dataclass(frozen=True)
class _Chunk:
    index: int  # position among all chunks of all files, in file order
    shard: int  # which file
    start: int  # byte range of the file in which the chunk's lines start
    end: int


@dataclass
class _Converted:
    """What a chunk's process hands back: per image its line (0-based within the chunk), id, row count and size;
    the chunk's line count (blank lines included); the byte range of the line it failed on, if any."""

    lines: int = 0
    line_of: list[int] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    sizes: list[tuple[int, int]] = field(default_factory=list)
    failed: tuple[int, int, int] | None = None  # (line within the chunk, byte offset in the file, length)


class _RowStarts:
    """Rows per chunk published by the processes, and the first row of each chunk once those before it are known."""

    def __init__(self, chunks: int) -> None:
        context = multiprocessing.get_context("fork")
        self.changed = context.Condition()
        self.rows = context.RawArray("q", [-1] * chunks)
        self.starts = context.RawArray("q", chunks + 1)
        self.known = context.RawValue("q", 0)  # starts[0 .. known] are final

    def publish(self, index: int, rows: int) -> None:
        with self.changed:
            self.rows[index] = rows
            known = self.known.value
            while known < len(self.rows) and self.rows[known] >= 0:
                self.starts[known + 1] = self.starts[known] + self.rows[known]
                known += 1
            self.known.value = known
            self.changed.notify_all()

    def start_of(self, index: int) -> int:
        with self.changed:
            self.changed.wait_for(lambda: self.known.value >= index)
            return int(self.starts[index])


@dataclass
class _Job:
    store: TSVStore
    dest: Path
    features: int  # file descriptors of the raw files being written
    boxes: int
    row_starts: _RowStarts
    buffer: bytearray | None = None  # this process's read buffer (made in each process: forked ones write their own)

    def read_buffer(self) -> bytearray:
        if self.buffer is None:
            self.buffer = bytearray(CHUNK_BYTES + 1 + _EXTEND)
        return self.buffer

    def convert_line(
        self, data: bytes | bytearray, start: int, end: int, file: Path, line_no: int,
        seen: dict[int, str] | None = None,
    ) -> tuple[int, EncodedRegions]:
        """One line parsed and encoded as the sequential conversion does it, with its checks in its order (the id
        checked against ``seen``, when given, between parsing and encoding)."""
        image_id, regions = self.store.parse_span(data, start, end, file, line_no)
        if seen is not None:
            _check_new(seen, image_id, file, line_no)
        encoded = encode_regions(regions)
        check_half(encoded, self.dest, image_id)
        return image_id, encoded


def _check_new(seen: dict[int, str], image_id: int, file: Path, line_no: int) -> None:
    """Enter ``image_id`` of ``file``'s line ``line_no`` in ``seen``; an id seen before is an error naming both
    lines."""
    if image_id in seen:
        raise DataError(f"image id {image_id} on line {line_no} was already on {seen[image_id]}", path=file,
                        item=image_id)
    seen[image_id] = f"{file.name} line {line_no}"


def _read_into(fd: int, data: bytearray, at: int, count: int, offset: int) -> int:
    """Read up to ``count`` bytes of the file ``fd`` from ``offset`` into ``data[at:]``; the bytes read (fewer only
    at the end of the file)."""
    view, done = memoryview(data)[at : at + count], 0
    while done < len(view) and (got := os.preadv(fd, [view[done:]], offset + done)) > 0:
        done += got
    return done


def _chunk_bytes(fd: int, chunk: _Chunk, size: int, buffer: bytearray) -> tuple[bytearray, int, int, int]:
    """``(data, first, stop, base)``: ``data[first:stop]`` are the whole lines that start in the chunk (``first ==
    stop``: none does), ``data[0]`` is the file's byte at ``base``. ``data`` is ``buffer`` unless the chunk's last
    line needs a larger one: the chunk's bytes are read into reused memory (a new object per chunk costs the page
    faults of its memory, and extending one copies it)."""
    base = chunk.start - 1 if chunk.start > 0 else 0  # the byte before the chunk says whether a line starts there
    length = chunk.end - base
    data = buffer if len(buffer) >= length else bytearray(length + _EXTEND)
    filled = _read_into(fd, data, 0, length, base)
    first = 0 if chunk.start == 0 else data.find(b"\n", 0, filled) + 1
    if chunk.start > 0 and first == 0:
        return data, 0, 0, base  # the chunk lies inside one line, which an earlier chunk converts
    while (stop := data.find(b"\n", chunk.end - 1 - base, filled)) < 0 and base + filled < size:
        if len(data) < filled + _EXTEND:
            larger = bytearray(2 * len(data) + _EXTEND)
            larger[:filled] = memoryview(data)[:filled]
            data = larger
        read = _read_into(fd, data, filled, _EXTEND, base + filled)
        if read == 0:  # the file shrank since its size was taken
            break
        filled += read
    return data, first, (filled if stop < 0 else stop + 1), base


def _lines(data: bytearray, first: int, stop: int) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of each line of ``data[first:stop]`` (without its line end; a last line without one
    included)."""
    at = first
    while at < stop:
        end = data.find(b"\n", at, stop)
        end = stop if end < 0 else end
        yield at, end
        at = end + 1


def _blank(data: bytes | bytearray, start: int, end: int) -> bool:
    """Whether the line is empty or only white space (skipped, as a sequential read skips it)."""
    return start == end or (data[start] in b" \t\n\r\x0b\x0c" and data[start:end].isspace())


def _write(fd: int, arrays: list[np.ndarray], offset: int) -> None:
    """``arrays``' bytes one after another from ``offset`` of the file ``fd`` (positioned writes)."""
    for array in arrays:
        view = memoryview(array).cast("B")
        while view:
            written = os.pwrite(fd, view, offset)
            view, offset = view[written:], offset + written


def _convert_chunk(job: _Job, chunk: _Chunk) -> _Converted:
    """Parse the chunk's lines, encode them and write their rows where they belong (see the module notes)."""
    file = job.store.files[chunk.shard]
    out, features, boxes, published = _Converted(), [], [], False
    try:
        with open(file, "rb", buffering=0) as handle:
            size = os.fstat(handle.fileno()).st_size
            will_need(handle.fileno(), [(chunk.start, chunk.end + CHUNK_BYTES - chunk.start)])
            data, first, stop, base = _chunk_bytes(handle.fileno(), chunk, size, job.read_buffer())
            job.buffer = data  # a larger one, when the chunk's last line needed it
        for line, (start, end) in enumerate(_lines(data, first, stop)):
            out.lines += 1
            if _blank(data, start, end):
                continue
            try:  # the line number is known in the main process only: it converts a failing line again
                image_id, encoded = job.convert_line(data, start, end, file, 0)
            except DataError:
                out.failed = (line, base + start, end - start)
                break
            out.line_of.append(line)
            out.ids.append(image_id)
            out.rows.append(encoded.num_regions)
            out.sizes.append((encoded.width, encoded.height))
            features.append(encoded.features)
            boxes.append(encoded.boxes)
        job.row_starts.publish(chunk.index, sum(out.rows))
        published = True
        row = job.row_starts.start_of(chunk.index)
        _write(job.features, features, row * job.store.dim * _FEATURES[1].itemsize)
        _write(job.boxes, boxes, row * 4 * _BOXES[1].itemsize)
        return out
    finally:
        if not published:  # the chunks after this one must not wait for it
            job.row_starts.publish(chunk.index, 0)


_WORKER_JOB: _Job | None = None  # set in each forked process


def _set_job(job: _Job) -> None:
    global _WORKER_JOB
    _WORKER_JOB = job
    torch.set_num_threads(1)  # the processes are the parallelism (and a forked process must not start OpenMP)


def _convert_in_worker(chunk: _Chunk) -> _Converted:
    assert _WORKER_JOB is not None
    return _convert_chunk(_WORKER_JOB, chunk)


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """torch on one thread meanwhile: an image's float16 rounding (about 100,000 values) is too small to share
    between threads, and waiting for a busy second core costs ten times the rounding itself."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _chunks(files: list[Path]) -> list[_Chunk]:
    out = []
    for shard, file in enumerate(files):
        size = file.stat().st_size
        for start in range(0, size, CHUNK_BYTES):
            out.append(_Chunk(len(out), shard, start, min(start + CHUNK_BYTES, size)))
    return out


def convert_tsv_memmap(
    store: TSVStore, dest: str | Path, *, overwrite: bool = False, jobs: int = 1,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Write every image of the TSV ``store`` in file order into a new memmap store at ``dest`` with ``jobs``
    processes (1: in this one); ``progress`` gets the bytes converted. Returns the image count."""
    chunks = _chunks(store.files)
    with atomic_dir(dest, overwrite, kind="memmap") as tmp:
        with open(tmp / _FEATURES[0], "wb") as features, open(tmp / _BOXES[0], "wb") as boxes:
            writer = _MemmapWriter(tmp, Path(dest), None, features, boxes)
            job = _Job(store, Path(dest), features.fileno(), boxes.fileno(), _RowStarts(len(chunks)))
            if jobs <= 1:
                with _one_thread():
                    _collect(job, writer, chunks, (_convert_chunk(job, chunk) for chunk in chunks), progress)
            else:
                with forked_workers(jobs, _set_job, (job,)) as workers:
                    _collect(job, writer, chunks, workers.map(_convert_in_worker, chunks), progress)
        writer.dim = store.dim if writer.ids else None
        writer.finish()
    return len(writer.ids)


def _collect(
    job: _Job, writer: _MemmapWriter, chunks: list[_Chunk], converted: Iterator[_Converted],
    progress: Callable[[int], None] | None,
) -> None:
    """Enter the chunks' images in file order; raise the first error of the file, as a sequential read would."""
    lines_before = [0] * len(job.store.files)
    seen: dict[int, str] = {}
    for chunk, done in zip(chunks, converted):
        file = job.store.files[chunk.shard]
        for line, image_id, rows, (width, height) in zip(done.line_of, done.ids, done.rows, done.sizes):
            _check_new(seen, image_id, file, lines_before[chunk.shard] + line + 1)
            writer.record(image_id, rows, width, height)
        if done.failed is not None:
            _raise_failed(job, file, lines_before[chunk.shard] + done.failed[0] + 1, *done.failed[1:], seen)
        lines_before[chunk.shard] += done.lines
        if progress is not None:
            progress(chunk.end - chunk.start)


def _raise_failed(job: _Job, file: Path, line_no: int, offset: int, length: int, seen: dict[int, str]) -> NoReturn:
    """Convert the line a process failed on again, here, with its line number and the ids before it: raises that
    line's error."""
    with open(file, "rb", buffering=0) as handle:
        line = os.pread(handle.fileno(), length, offset)
    job.convert_line(line, 0, len(line), file, line_no, seen)
    raise DataError(f"line {line_no} failed to convert in a worker process but not when read again (did the file "
                    "change while it was converted?)", path=file)
