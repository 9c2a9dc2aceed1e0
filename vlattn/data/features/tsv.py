"""The bottom-up-attention TSV files (``trainval_36``, ``test2014_36``, ...), streamed, never loaded whole.

One image per line, tab-separated, in one of two column layouts (told apart by the number of fields):

* bottom-up-attention (6 fields): ``image_id, image_w, image_h, num_boxes, boxes, features``;
* LXMERT (10 fields): ``img_id, img_h, img_w, objects_id, objects_conf, attrs_id, attrs_conf, num_boxes,
  boxes, features``, where ``img_id`` may be a name such as ``COCO_val2014_000000000042`` (the trailing
  digits are the id).

``boxes`` and ``features`` are base64 text of little-endian float32 arrays, (num_boxes, 4) x1y1x2y2 pixels
and (num_boxes, D). A store is one ``.tsv`` file or a directory of shards (``*.tsv``, ``*.tsv.0``, ...).

Random access uses an offset index (image id -> shard, byte offset, length, line number) built in one
pass over the files the first time an id is looked up, and cached under ``$XDG_CACHE_HOME/vlattn/tsv-index``
(``~/.cache``), keyed by the files' paths, sizes and modification times; the data files are never written.
:meth:`TSVStore.stream` reads every image in file order without an index (what ``vlattn data convert`` uses).
Malformed lines are errors naming the file, the line number and, when readable, the image id.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

import numpy as np
import pybase64

from vlattn.data.features.base import RegionFeatures
from vlattn.data.features.checks import make_regions
from vlattn.data.features.labels import RegionLabels
from vlattn.data.features.storage import IndexedStore, ProcessLocal
from vlattn.data.features.tsv_blocks import parsed_lines
from vlattn.errors import DataError
from vlattn.io import atomic_path

BOTTOM_UP = ("image_id", "image_w", "image_h", "num_boxes", "boxes", "features")
LXMERT = ("img_id", "img_h", "img_w", "objects_id", "objects_conf", "attrs_id", "attrs_conf", "num_boxes", "boxes",
          "features")  # fmt: skip
LAYOUTS = {len(BOTTOM_UP): BOTTOM_UP, len(LXMERT): LXMERT}
_ID = re.compile(rb"^(?:.*_)?(\d+)$")
_SHARD = re.compile(r"^.+\.tsv(\.\d+)?$")
_INDEX_VERSION = 1


def decode_float32(
    text: str | bytes | memoryview, rows: int, name: str, *, columns: int | None = None, path: object, item: object
) -> np.ndarray:
    """Base64 text of little-endian float32 values as a (rows, C) array; C is checked against ``columns``."""
    raw = decode_base64(text, name, path=path, item=item)
    if len(raw) % 4:
        raise DataError(f"field {name!r} holds {len(raw)} bytes, not a whole number of float32", path=path, item=item)
    values = np.frombuffer(raw, dtype="<f4")
    if rows == 0:
        if values.size:
            raise DataError(f"field {name!r} has {values.size} values but num_boxes is 0", path=path, item=item)
        return values.reshape(0, columns or 0)
    if values.size % rows or (columns is not None and values.size != rows * columns):
        want = f"{rows} x {columns}" if columns is not None else f"a multiple of num_boxes={rows}"
        raise DataError(f"field {name!r} has {values.size} float32 values, expected {want}", path=path, item=item)
    return values.reshape(rows, -1)


def decode_base64(text: str | bytes | memoryview, name: str, *, path: object, item: object) -> bytes | bytearray:
    """The bytes of base64 ``text`` (the standard alphabet, no other characters): decoded with pybase64's SIMD
    decoder (about 40 times the standard library's rate, which was most of a TSV conversion's time); text it refuses
    goes to the standard library's decoder, which accepts exactly what it accepted before (e.g. excess padding) or
    names the problem."""
    try:
        return pybase64.b64decode_as_bytearray(text, validate=True)  # writable: arrays over it convert in place
    except (binascii.Error, ValueError):
        pass
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as err:
        raise DataError(f"field {name!r} is not valid base64: {err}", path=path, item=item) from None


def parse_image_id(text: bytes, *, path: object, item: object) -> int:
    """An image id field: digits, or a name ending in ``_<digits>`` (``COCO_val2014_000000000042``)."""
    match = _ID.match(text.strip())
    if match is None:
        raise DataError(f"image id field {text[:40]!r} has no numeric id", path=path, item=item)
    return int(match.group(1))


def shard_files(path: Path) -> list[Path]:
    """The TSV files of a store: ``path`` itself, or the ``*.tsv`` / ``*.tsv.N`` files of a directory."""
    if path.is_file():
        return [path]
    shards = sorted(p for p in path.iterdir() if p.is_file() and _SHARD.match(p.name))
    if not shards:
        raise DataError("directory holds no .tsv or .tsv.N files", path=path)
    return shards


def looks_like_tsv(path: Path) -> bool:
    """Whether ``path`` (a file) starts like a region TSV: a numeric or COCO-named id and >= 5 tabs."""
    with open(path, "rb") as handle:
        head = handle.read(1 << 16)
    first = head.split(b"\t", 1)[0]
    return head.count(b"\t", 0, head.find(b"\n") if b"\n" in head else len(head)) >= 5 and bool(_ID.match(first))


class TSVStore(IndexedStore):
    """Read-only :class:`~vlattn.data.features.base.FeatureStore` over bottom-up TSV file(s).

    ``dim`` is checked against every image when given, else read from the first line.
    """

    def __init__(self, path: str | Path, dim: int | None = None) -> None:
        self.path = str(path)
        if not Path(self.path).exists():
            raise DataError("TSV feature file not found", path=self.path)
        self.files = shard_files(Path(self.path))
        self._expected_dim = dim
        self._handles: ProcessLocal[list[BinaryIO]] = ProcessLocal(self._open_files)
        self._rows: dict[int, int] | None = None
        self._dim = dim if dim is not None else self._first_dim()
        self._expected_dim = self._dim

    def _open_files(self) -> list[BinaryIO]:
        return [open(file, "rb") for file in self.files]

    def _first_dim(self) -> int:
        for _, regions in self.stream():
            return int(regions.features.shape[1])
        raise DataError("TSV holds no images; pass dim for an empty store", path=self.path)

    # -- random access -----------------------------------------------------------------------------------

    def _index(self) -> dict[int, int]:
        """``{image id: row of the index arrays}``, loaded from the cache or built in one pass."""
        if self._rows is None:
            arrays = _load_index(self.files) or _build_index(self.files)
            self._table = arrays
            self._rows = {int(image_id): row for row, image_id in enumerate(arrays["ids"])}
            self._index_ids(self._rows)
        return self._rows

    def ids(self) -> list[int]:
        self._index()
        return super().ids()

    def __contains__(self, image_id: object) -> bool:
        return image_id in self._index()

    def __len__(self) -> int:
        return len(self._index())

    def __iter__(self) -> Iterator[int]:
        self._index()
        return super().__iter__()

    def get(self, image_id: int) -> RegionFeatures:
        """Regions of ``image_id``: one seek and one line read."""
        return self._parse(*self._line(image_id))[1]

    def labels(self, image_id: int) -> RegionLabels | None:
        """The detector's ``objects_id``/``objects_conf`` and ``attrs_id``/``attrs_conf`` of ``image_id`` (LXMERT's
        10-field layout; base64 int64 ids, float32 scores), or None for the 6-field layout, which has none."""
        line, file, line_no = self._line(image_id)
        parts = line.rstrip(b"\r\n").split(b"\t")
        if len(parts) != len(LXMERT):
            return None
        fields = dict(zip(LXMERT, parts))
        where = f"line {line_no} (image {image_id})"
        try:
            count = int(fields["num_boxes"])
        except ValueError as err:
            raise DataError(f"non-numeric box count: {err}", path=file, item=where) from None

        def column(name: str, dtype: str) -> np.ndarray:
            try:
                values = np.frombuffer(decode_base64(fields[name], name, path=file, item=where), dtype=dtype)
            except ValueError as err:
                raise DataError(f"field {name!r} is not valid base64 {dtype} values: {err}", path=file,
                                item=where) from None
            if values.shape != (count,):
                raise DataError(f"field {name!r} holds {values.size} values for {count} boxes", path=file, item=where)
            return values.astype(np.int64 if dtype == "<i8" else np.float32)

        return RegionLabels(column("objects_id", "<i8"), column("objects_conf", "<f4"), column("attrs_id", "<i8"),
                            column("attrs_conf", "<f4"))

    def _line(self, image_id: int) -> tuple[bytes, Path, int]:
        """The line of ``image_id`` with its file and line number: one seek and one read."""
        row = self._index().get(image_id)
        if row is None:
            raise DataError("image id not in the TSV", path=self.path, item=image_id)
        shard, offset, length, line_no = (int(self._table[k][row]) for k in ("shard", "offsets", "lengths", "lines"))
        handle = self._handles.get()[shard]
        handle.seek(offset)
        line = handle.read(length)
        found = parse_image_id(line.split(b"\t", 1)[0], path=self.files[shard], item=f"line {line_no}")
        if found != image_id:
            raise DataError(f"line {line_no} holds image {found}, not {image_id}: the TSV changed after indexing",
                            path=self.files[shard], item=image_id)
        return line, self.files[shard], line_no

    # -- sequential reading ------------------------------------------------------------------------------

    def total_bytes(self) -> int:
        """Size of all shards in bytes (the unit of :meth:`stream`'s progress)."""
        return sum(f.stat().st_size for f in self.files)

    def stream(
        self, progress: Callable[[int], None] | None = None, jobs: int = 1
    ) -> Iterator[tuple[int, RegionFeatures]]:
        """Every image in file order, parsed in ``jobs`` processes (:mod:`.tsv_blocks`: blocks of whole lines, a
        bounded number in memory); ``progress`` gets the bytes consumed.

        An id seen twice is an error naming both lines.
        """
        seen: dict[int, str] = {}
        for file in self.files:
            for line_no, image_id, regions in parsed_lines(self._parse, file, jobs, progress):
                if image_id in seen:
                    raise DataError(f"image id {image_id} on line {line_no} was already on {seen[image_id]}",
                                    path=file, item=image_id)
                seen[image_id] = f"{file.name} line {line_no}"
                yield image_id, regions

    def _parse(self, line: bytes, file: Path, line_no: int) -> tuple[int, RegionFeatures]:
        """One line -> (image id, regions); errors name the file, the line and the id."""
        return self.parse_span(line, 0, len(line), file, line_no)

    def parse_span(
        self, data: bytes | bytearray, start: int, end: int, file: Path, line_no: int
    ) -> tuple[int, RegionFeatures]:
        """:meth:`_parse` of the line ``data[start:end]``, its fields read in place (no copy of the line)."""
        parts = line_fields(data, start, end)
        names = LAYOUTS.get(len(parts))
        if names is None:
            raise DataError(f"line {line_no} has {len(parts)} tab-separated fields; expected 6 (bottom-up: "
                            f"{', '.join(BOTTOM_UP)}) or 10 (LXMERT)", path=file)
        fields = dict(zip(names, parts))
        image_id = parse_image_id(bytes(parts[0]), path=file, item=f"line {line_no}")
        where = f"line {line_no} (image {image_id})"
        try:
            count = int(bytes(fields["num_boxes"]))
            width = int(float(bytes(fields.get("image_w", fields.get("img_w", b"")))))
            height = int(float(bytes(fields.get("image_h", fields.get("img_h", b"")))))
        except ValueError as err:
            raise DataError(f"non-numeric size or box count: {err}", path=file, item=where) from None
        boxes = decode_float32(fields["boxes"], count, "boxes", columns=4, path=file, item=where)
        features = decode_float32(fields["features"], count, "features", columns=self._expected_dim if count == 0
                                  else None, path=file, item=where)
        return image_id, make_regions(features, boxes, width, height, path=file, image_id=image_id,
                                      dim=self._expected_dim)


def line_fields(data: bytes | bytearray, start: int, end: int) -> list[memoryview]:
    """The tab-separated fields of the line ``data[start:end]`` without its trailing CR/LF characters, as views of
    ``data``."""
    while end > start and data[end - 1] in b"\r\n":
        end -= 1
    view, fields, at = memoryview(data), [], start
    while (tab := data.find(b"\t", at, end)) >= 0:
        fields.append(view[at:tab])
        at = tab + 1
    fields.append(view[at:end])
    return fields


# -- the offset index ------------------------------------------------------------------------------------


def _cache_file(files: list[Path]) -> Path:
    """Where the index of ``files`` is cached: a hash of their resolved paths, sizes and mtimes."""
    stamp = [(str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns) for f in files]
    digest = hashlib.sha1(json.dumps([_INDEX_VERSION, stamp]).encode()).hexdigest()
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vlattn" / "tsv-index"
    return root / f"{digest}.npz"


def _build_index(files: list[Path]) -> dict[str, np.ndarray]:
    """One pass over ``files`` reading only each line's id; duplicates are errors naming both lines."""
    ids, shards, offsets, lengths, lines = [], [], [], [], []
    where: dict[int, str] = {}
    for shard, file in enumerate(files):
        offset = 0
        with open(file, "rb") as handle:
            for line_no, line in enumerate(handle, start=1):
                if line.strip():
                    image_id = parse_image_id(line.split(b"\t", 1)[0], path=file, item=f"line {line_no}")
                    if image_id in where:
                        raise DataError(f"image id {image_id} on line {line_no} was already on {where[image_id]}",
                                        path=file, item=image_id)
                    where[image_id] = f"{file.name} line {line_no}"
                    ids.append(image_id)
                    shards.append(shard)
                    offsets.append(offset)
                    lengths.append(len(line))
                    lines.append(line_no)
                offset += len(line)
    arrays = {"ids": ids, "shard": shards, "offsets": offsets, "lengths": lengths, "lines": lines}
    table = {key: np.asarray(values, dtype=np.int64) for key, values in arrays.items()}
    try:
        cache = _cache_file(files)
        cache.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(cache) as tmp, open(tmp, "wb") as handle:
            np.savez(handle, **table)
    except OSError:
        pass  # an unwritable cache only costs a rebuild next time
    return table


def _load_index(files: list[Path]) -> dict[str, np.ndarray] | None:
    """The cached index of ``files``, or None when absent or unreadable."""
    try:
        with np.load(_cache_file(files), allow_pickle=False) as data:
            table = {key: data[key] for key in ("ids", "shard", "offsets", "lengths", "lines")}
    except (OSError, KeyError, ValueError):
        return None
    return table if len({len(v) for v in table.values()}) == 1 else None
