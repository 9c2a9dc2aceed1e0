"""`vlattn data convert` of a bottom-up TSV by a pool of processes (vlattn/data/features/tsv_blocks.py: blocks
parsed; vlattn/data/features/tsv_memmap.py: to memmap, chunks read, parsed and written by each process): the memmap
store written is byte for byte the one written from the same regions directly, with any number of processes and any
block or chunk size; a bad line is named with its file and line number (the first one in file order), exit 2, and
nothing is written."""

from __future__ import annotations

import base64
import multiprocessing
from pathlib import Path

import numpy as np
import pytest

from vlattn.data.features import RegionFeatures, TSVStore, convert_store, write_memmap
from vlattn.data.features import tsv_blocks, tsv_memmap
from vlattn.errors import DataError

FILES = ("features.f16", "boxes.f32", "ids.npy", "offsets.npy", "sizes.npy", "meta.json")


def images(count: int, dim: int = 5) -> list[tuple[int, RegionFeatures]]:
    rng = np.random.default_rng(7)
    out = []
    for index in range(count):
        regions = 1 + index % 4
        xy = rng.uniform(0, 20, size=(regions, 2))
        boxes = np.concatenate([xy, xy + rng.uniform(1, 9, size=(regions, 2))], axis=1).astype(np.float32)
        features = rng.normal(scale=100, size=(regions, dim)).astype(np.float32)
        out.append((1000 + 7 * index, RegionFeatures(features, boxes, 40, 30)))
    return out


def line(image_id: int, regions: RegionFeatures, layout: str = "butd") -> str:
    b64 = [base64.b64encode(a.astype("<f4").tobytes()).decode() for a in (regions.boxes, regions.features)]
    if layout == "butd":
        fields = [str(image_id), str(regions.width), str(regions.height), str(regions.num_regions), *b64]
    else:  # LXMERT: a COCO name, height before width, detector labels
        empty = [base64.b64encode(np.zeros(regions.num_regions, dtype=dtype).tobytes()).decode()
                 for dtype in ("<i8", "<f4", "<i8", "<f4")]
        fields = [f"COCO_val2014_{image_id:012d}", str(regions.height), str(regions.width), *empty,
                  str(regions.num_regions), *b64]
    return "\t".join(fields)


def tsv_text(items: list[tuple[int, RegionFeatures]]) -> str:
    """Both layouts, a blank and a white-space line, CRLF ends, and no line end after the last line."""
    lines = [line(i, r, "butd" if n % 3 else "lxmert") for n, (i, r) in enumerate(items)]
    lines.insert(5, "")
    lines.insert(9, "  \t ")
    return "\n".join(lines[:12]) + "\n" + "\r\n".join(lines[12:])


def files_of(root: Path) -> dict[str, bytes]:
    return {name: (root / name).read_bytes() for name in FILES}


def small_parts(monkeypatch: pytest.MonkeyPatch, size: int) -> None:
    """Blocks and chunks of ``size`` bytes; a chunk's last line read on in steps of 16 bytes."""
    monkeypatch.setattr(tsv_blocks, "BLOCK_BYTES", size)
    monkeypatch.setattr(tsv_memmap, "CHUNK_BYTES", size)
    monkeypatch.setattr(tsv_memmap, "_EXTEND", 16)


@pytest.mark.parametrize("block", [64, 700, 1 << 20])
@pytest.mark.parametrize("jobs", [1, 2, 3])
def test_the_converted_store_is_byte_for_byte_a_direct_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jobs: int, block: int
) -> None:
    items = images(20)
    (tmp_path / "f.tsv").write_text(tsv_text(items))
    small_parts(monkeypatch, block)  # lines longer than a block, several per block, one block
    assert convert_store(tmp_path / "f.tsv", tmp_path / "mm", "memmap", jobs=jobs) == 20
    write_memmap(tmp_path / "direct", items)
    assert files_of(tmp_path / "mm") == files_of(tmp_path / "direct")


@pytest.mark.parametrize("jobs", [1, 2])
def test_shards_convert_in_file_order_as_one_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jobs: int) -> None:
    items = images(13)
    (tmp_path / "tsv").mkdir()
    (tmp_path / "tsv" / "a.tsv.0").write_text("\n".join(line(i, r) for i, r in items[:6]) + "\n")
    (tmp_path / "tsv" / "a.tsv.1").write_text("\n\n" + "\n".join(line(i, r) for i, r in items[6:]))
    small_parts(monkeypatch, 300)
    assert convert_store(tmp_path / "tsv", tmp_path / "mm", "memmap", jobs=jobs) == 13
    write_memmap(tmp_path / "direct", items)
    assert files_of(tmp_path / "mm") == files_of(tmp_path / "direct")


@pytest.mark.parametrize("size", [3, 4, 5, 11, 100])
@pytest.mark.parametrize("buffer_size", [0, 7, 64])
def test_a_chunk_holds_the_lines_that_start_in_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: int, buffer_size: int
) -> None:
    data = b"ab\n\ncdefgh\nij"
    (tmp_path / "f").write_bytes(data)
    monkeypatch.setattr(tsv_memmap, "CHUNK_BYTES", size)
    monkeypatch.setattr(tsv_memmap, "_EXTEND", 2)
    found = []
    buffer = bytearray(b"\n" * buffer_size)  # reused from chunk to chunk: stale line ends must not count
    with open(tmp_path / "f", "rb") as handle:
        for chunk in tsv_memmap._chunks([tmp_path / "f"]):
            text, first, stop, base = tsv_memmap._chunk_bytes(handle.fileno(), chunk, len(data), buffer)
            starts = [base + start for start, _ in tsv_memmap._lines(text, first, stop)]
            assert all(chunk.start <= start < chunk.end for start in starts)
            found += [bytes(text[start:end]) for start, end in tsv_memmap._lines(text, first, stop)]
            buffer = text
    assert found == [b"ab", b"", b"cdefgh", b"ij"]  # every line once, in order, whatever the chunk size


def test_blocks_are_whole_lines_numbered_from_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "f.tsv").write_bytes(b"ab\n\ncdefgh\nij")
    monkeypatch.setattr(tsv_blocks, "BLOCK_BYTES", 4)
    assert list(tsv_blocks.blocks(tmp_path / "f.tsv")) == [(b"ab\n\n", 1), (b"cdefgh\n", 3), (b"ij", 4)]


@pytest.mark.parametrize("jobs", [1, 2])
def test_the_first_bad_line_in_file_order_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jobs: int) -> None:
    items = images(30)
    lines = [line(i, r) for i, r in items]
    fields = lines[17].split("\t")
    lines[17] = "\t".join([*fields[:4], "!!" + fields[4], fields[5]])  # bad base64 in a late block
    lines[25] = "not a tsv line"
    (tmp_path / "f.tsv").write_text("\n".join(lines) + "\n")
    small_parts(monkeypatch, 256)
    message = r"f\.tsv: item 'line 18 \(image 1119\)': field 'boxes' is not valid base64"
    with pytest.raises(DataError, match=message):
        list(TSVStore(tmp_path / "f.tsv", dim=5).stream(jobs=jobs))
    with pytest.raises(DataError, match=message):
        convert_store(tmp_path / "f.tsv", tmp_path / "mm", "memmap", jobs=jobs)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.tsv"]


@pytest.mark.parametrize("read", ["stream", "convert"])
def test_an_error_ends_the_workers_without_killing_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       read: str) -> None:
    """A worker killed while it hands a result back holds the result queue's lock for ever, and a pool's teardown
    then waits on that lock: stopping early must let the workers leave on their own."""
    lines = [line(i, r) for i, r in images(60)]
    lines[4] = "not a tsv line"  # an error early in a file of many blocks, while later ones are being parsed
    (tmp_path / "f.tsv").write_text("\n".join(lines) + "\n")
    small_parts(monkeypatch, 256)
    killed = []
    for name in ("terminate", "kill"):
        original = getattr(multiprocessing.process.BaseProcess, name)
        monkeypatch.setattr(multiprocessing.process.BaseProcess, name,
                            lambda process, original=original, name=name: (killed.append(name), original(process)))
    with pytest.raises(DataError, match=r"f\.tsv: line 5 has 1 tab-separated fields"):
        if read == "stream":
            list(TSVStore(tmp_path / "f.tsv", dim=5).stream(jobs=2))
        else:
            convert_store(tmp_path / "f.tsv", tmp_path / "mm", "memmap", jobs=2)
    assert killed == []
    assert multiprocessing.active_children() == []


def test_a_duplicate_id_in_another_block_names_both_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    items = images(12)
    lines = [line(i, r) for i, r in items] + [line(*items[2])]
    (tmp_path / "f.tsv").write_text("\n".join(lines) + "\n")
    small_parts(monkeypatch, 300)
    with pytest.raises(DataError, match="image id 1014 on line 13 was already on f.tsv line 3"):
        list(TSVStore(tmp_path / "f.tsv").stream(jobs=2))
    with pytest.raises(DataError, match="image id 1014 on line 13 was already on f.tsv line 3"):
        convert_store(tmp_path / "f.tsv", tmp_path / "mm", "memmap", jobs=2)


def test_a_bad_line_through_the_cli_is_one_line_exit_2_and_nothing_written(tmp_path: Path, vlattn_cli) -> None:
    items = images(40)
    lines = [line(i, r) for i, r in items]
    lines[33] = lines[33].replace("\t40\t", "\tofficial\t", 1)
    (tmp_path / "f.tsv").write_text("\n".join(lines) + "\n")
    code, _, err = vlattn_cli("data", "convert", "--from", str(tmp_path / "f.tsv"), "--to", str(tmp_path / "mm"),
                              "--format", "memmap", "--jobs", "2", "--no-progress")
    assert code == 2 and err.count("\n") == 1 and "line 34 (image 1231)" in err and "non-numeric size" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.tsv"]  # no store, no temporary left


@pytest.mark.parametrize("duplicate", [False, True])
def test_a_value_beyond_float16_is_refused_after_the_checks_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, duplicate: bool
) -> None:
    """Features made float16 by the converting processes: a value beyond its range is the writer's error naming
    the image, unless the line is a duplicate id, which a sequential conversion reported first."""
    items = images(16)
    big = RegionFeatures(items[11][1].features * 1000.0, items[11][1].boxes, 40, 30)  # up to ~1e5 > 65504
    assert np.abs(big.features).max() > 65504
    image_id = items[3][0] if duplicate else items[11][0]
    items[11] = (image_id, big)
    (tmp_path / "f.tsv").write_text("\n".join(line(i, r) for i, r in items) + "\n")
    small_parts(monkeypatch, 200)
    message = f"image id {image_id} on line 12 was already on f.tsv line 4" if duplicate else \
        f"item {image_id}: features are NaN/inf or exceed the float16 range"
    with pytest.raises(DataError, match=message):
        convert_store(tmp_path / "f.tsv", tmp_path / "mm", "memmap", jobs=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.tsv"]
