"""LMDB feature stores (needs the optional ``lmdb`` package: ``pip install 'vlattn[lmdb]'``).

Two families of LMDB are read, told apart by their first value:

* self-critical.pytorch (``scripts/dump_to_lmdb.py``, written through ``lmdbdict``): one LMDB *file* per
  feature kind (``cocobu_att.lmdb``, ``cocobu_box.lmdb``, ``cocobu_fc.lmdb``), key = the image id in ASCII,
  value = the bytes of the original ``<id>.npz``/``<id>.npy`` file; bookkeeping keys ``__keys__``,
  ``__key_dumps__`` ... are skipped. :class:`LmdbBlobs` serves these to
  :class:`~vlattn.data.features.selfcritical.SelfCriticalStore`.
* ViLBERT / VOLTA / LXMERT-style conversions of the bottom-up TSV: an LMDB *directory* (``data.mdb``),
  key = the image id (or a ``COCO_<split>_<id>`` name) in ASCII, value = a pickled dict with ``image_id``,
  ``image_h``/``img_h``, ``image_w``/``img_w``, ``num_boxes``, ``boxes`` and ``features`` (float32 arrays,
  or base64 strings of them as in the TSV); the key ``keys`` (a pickled list) is skipped.
  :class:`LmdbRecordStore` reads them.

Pickled values are loaded with a restricted unpickler that only rebuilds numpy arrays and plain Python
values: a record asking for any other class is refused with an error naming the key, never executed.
"""

from __future__ import annotations

import functools
import io
import os
import pickle
import re
from pathlib import Path
from typing import Any

import numpy as np

from vlattn.data.features.base import RegionFeatures
from vlattn.data.features.blobs import NPY_MAGIC, NPZ_MAGIC
from vlattn.data.features.checks import make_regions
from vlattn.data.features.storage import IndexedStore, ProcessLocal
from vlattn.data.features.tsv import decode_float32
from vlattn.errors import DataError

_MAGIC = b"\xde\xc0\xef\xbe"  # MDB_MAGIC 0xBEEFC0DE, little-endian, in the first meta page
_KEY = re.compile(rb"^(?:.*_)?(\d+)$")
_SKIPPED_KEYS = re.compile(rb"^(keys|__\w+__)$")
_SAFE_GLOBALS = {
    ("numpy", "ndarray"), ("numpy", "dtype"),
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
    ("numpy.core.numeric", "_frombuffer"), ("numpy._core.numeric", "_frombuffer"),
    ("_codecs", "encode"),
}  # fmt: skip


def is_lmdb(path: str | Path) -> bool:
    """An LMDB directory (``data.mdb`` inside) or an LMDB file (checked by its magic number)."""
    path = Path(path)
    if path.is_dir():
        return (path / "data.mdb").is_file()
    if not path.is_file():
        return False
    with open(path, "rb") as handle:
        return handle.read(20)[16:20] == _MAGIC


_ENVS: dict[tuple[int, str], Any] = {}  # (pid, resolved path) -> environment: LMDB allows one per process


def _close_inherited() -> None:
    """In a forked child (a DataLoader worker), close the environments of the parent the child inherited.

    The ``lmdb`` package refuses a second environment on files already open in the process, and a fork copies
    its record of the parent's, so without this a worker could not open the store the main process has open.
    The parent's environments are read-only and unlocked (``lock=False``): closing the child's copy releases only
    the child's mapping and descriptor.
    """
    for env in _ENVS.values():
        env.close()
    _ENVS.clear()


os.register_at_fork(after_in_child=_close_inherited)


def _open_env(path: str) -> Any:
    try:
        import lmdb
    except ImportError:
        raise DataError("reading LMDB stores needs the 'lmdb' package (pip install 'vlattn[lmdb]')", path=path) from None
    key = (os.getpid(), str(Path(path).resolve()))
    if key not in _ENVS:
        try:
            _ENVS[key] = lmdb.open(path, subdir=Path(path).is_dir(), readonly=True, lock=False, readahead=False,
                                   max_readers=512)
        except lmdb.Error as err:
            raise DataError(f"cannot open LMDB: {err}", path=path) from None
    return _ENVS[key]


class _Lmdb:
    """An LMDB opened read-only once per process, its image-id keys indexed."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._env: ProcessLocal[Any] = ProcessLocal(functools.partial(_open_env, self.path))
        self.keys: dict[int, bytes] = {}
        with self._env.get().begin(write=False) as txn:
            for key in txn.cursor().iternext(keys=True, values=False):
                key = bytes(key)
                if _SKIPPED_KEYS.match(key):
                    continue
                match = _KEY.match(key)
                if match is None:
                    raise DataError(f"LMDB key {key[:60]!r} is not an image id", path=self.path)
                image_id = int(match.group(1))
                if image_id in self.keys:
                    raise DataError(f"image id {image_id} under two keys: {self.keys[image_id]!r}, {key!r}",
                                    path=self.path)
                self.keys[image_id] = key

    def value(self, image_id: int) -> bytes:
        key = self.keys.get(image_id)
        if key is None:
            raise DataError("image id not in the LMDB", path=self.path, item=image_id)
        with self._env.get().begin(write=False) as txn:
            value = txn.get(key)
        if value is None:
            raise DataError(f"key {key!r} has no value", path=self.path, item=image_id)
        return bytes(value)

    def first_value(self) -> bytes | None:
        """The value of the smallest image id (None for an empty LMDB)."""
        return self.value(min(self.keys)) if self.keys else None


def lmdb_value_kind(path: str | Path) -> str:
    """``"npz"``, ``"npy"`` (self-critical blobs), ``"pickle"`` (records) or ``"empty"``."""
    first = _Lmdb(path).first_value()
    if first is None:
        return "empty"
    for kind, magic in (("npz", NPZ_MAGIC), ("npy", NPY_MAGIC)):
        if first.startswith(magic):
            return kind
    if first[:1] == b"\x80" or first[:1] == b"(":
        return "pickle"
    raise DataError(f"unrecognised LMDB values (first bytes {first[:8]!r}): not npz, npy or pickle", path=path)


class LmdbBlobs:
    """self-critical's LMDB of raw ``.npz``/``.npy`` file bytes (see the module notes)."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._db = _Lmdb(path)

    def ids(self) -> list[int]:
        return sorted(self._db.keys)

    def where(self, image_id: int) -> str:
        key = self._db.keys.get(image_id, b"?")
        return f"{self.path}[{key.decode('ascii', 'replace')}]"

    def read(self, image_id: int) -> bytes:
        return self._db.value(image_id)


class _SafeUnpickler(pickle.Unpickler):
    """Rebuilds numpy arrays and plain values only."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _SAFE_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")


def safe_unpickle(data: bytes) -> Any:
    """``pickle.loads`` limited to numpy arrays and builtin values (Python 2 pickles read as latin-1)."""
    return _SafeUnpickler(io.BytesIO(data), encoding="latin1").load()


def _get(record: dict[str, Any], *names: str) -> Any:
    for name in names:
        if name in record:
            return record[name]
    raise KeyError(names[0])


class LmdbRecordStore(IndexedStore):
    """Read-only :class:`~vlattn.data.features.base.FeatureStore` over an LMDB of pickled region records."""

    def __init__(self, path: str | Path, dim: int | None = None) -> None:
        self.path = str(path)
        self._db = _Lmdb(path)
        self._index_ids(self._db.keys)
        if dim is None and not self._ids:
            raise DataError("LMDB holds no image records; pass dim for an empty store", path=self.path)
        self._expected_dim = dim
        self._dim = dim if dim is not None else self.get(self._ids[0]).features.shape[1]
        self._expected_dim = self._dim

    def _record(self, image_id: int) -> dict[str, Any]:
        where = f"key {self._db.keys.get(image_id, b'?')!r}"
        try:
            record = safe_unpickle(self._db.value(image_id))
        except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, ImportError) as err:
            raise DataError(f"{where}: cannot unpickle the record: {err}", path=self.path, item=image_id) from None
        if not isinstance(record, dict):
            raise DataError(f"{where}: record is a {type(record).__name__}, expected a dict", path=self.path,
                            item=image_id)
        return {k.decode("latin1") if isinstance(k, bytes) else str(k): v for k, v in record.items()}

    def get(self, image_id: int) -> RegionFeatures:
        """Regions of ``image_id``: features (K, D) float32, boxes (K, 4) pixels, image size."""
        record = self._record(image_id)
        try:
            count = int(_get(record, "num_boxes"))
            width, height = int(_get(record, "image_w", "img_w")), int(_get(record, "image_h", "img_h"))
            fields = {name: _get(record, name) for name in ("boxes", "features")}
        except KeyError as err:
            raise DataError(f"record lacks the field {err.args[0]!r} (has {sorted(record)})", path=self.path,
                            item=image_id) from None
        except (TypeError, ValueError) as err:
            raise DataError(f"record has a non-integer size or box count: {err}", path=self.path,
                            item=image_id) from None
        columns = {"boxes": 4, "features": self._expected_dim}
        arrays = {name: _as_rows(value, count, name, columns[name], self.path, image_id)
                  for name, value in fields.items()}
        return make_regions(arrays["features"], arrays["boxes"], width, height, path=self.path, image_id=image_id,
                            dim=self._expected_dim)


def _as_rows(value: Any, count: int, name: str, columns: int | None, path: str, image_id: int) -> np.ndarray:
    """A record field as a (count, C) array: a numpy array, or base64 text of float32 values (as in the TSV)."""
    if isinstance(value, (str, bytes)):
        return decode_float32(value, count, name, columns=columns, path=path, item=image_id)
    array = np.asarray(value, dtype=np.float32)
    if count == 0 and array.size == 0:
        return array.reshape(0, columns or 0)
    if count == 0 or array.size % count or (columns is not None and array.size != count * columns):
        raise DataError(f"field {name!r} has {array.size} values, which does not fit num_boxes={count}",
                        path=path, item=image_id)
    return array.reshape(count, -1)
