"""The extractor record a store carries: which extractor made its features, from which weights, with which settings.

A record is a JSON object ``{"name", "dim", "weights": {"source", "sha256", ...}, "settings": {...}}``
(:mod:`vlattn.pixels` writes them; the synthetic data set writes its own). Where it lives depends on the layout:

- ``memmap``: the ``extractor`` key of ``meta.json``;
- ``npz-dir``: ``extractor.json`` in the directory;
- ``m2-hdf5``: the root attribute ``vlattn_extractor`` (JSON text).

Other layouts (TSV, self-critical, LMDB, stores written without one) have no record: :func:`store_extractor`
returns None for them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import h5py

from vlattn.errors import DataError

NPZ_FILE = "extractor.json"
HDF5_ATTRIBUTE = "vlattn_extractor"
MEMMAP_KEY = "extractor"
Record = Mapping[str, Any]


def check_record(record: Any, path: object) -> dict[str, Any]:
    """``record`` as a dict, checked for the keys every record has."""
    if not isinstance(record, dict) or not isinstance(record.get("name"), str) or not isinstance(
            record.get("weights"), dict) or not isinstance(record.get("settings"), dict):
        raise DataError("malformed extractor record (needs name, weights, settings)", path=path)
    return record


def encode_record(record: Record) -> str:
    """The record as JSON text (keys sorted, so equal records are equal text)."""
    return json.dumps(dict(record), sort_keys=True)


def store_extractor(path: str | Path) -> dict[str, Any] | None:
    """The extractor record of the store at ``path``, or None when it has none; a weights file recorded relative to
    the store (the synthetic set's) is returned as an absolute path."""
    record = _read_record(Path(path))
    weights = record["weights"] if record is not None else {}
    if weights.get("source") == "file" and not Path(str(weights.get("path"))).is_absolute():
        record["weights"] = {**weights, "path": str((Path(path) / str(weights["path"])).resolve())}
    return record


def _read_record(path: Path) -> dict[str, Any] | None:
    if path.is_dir():
        meta = path / "meta.json"
        if meta.is_file():
            try:
                data = json.loads(meta.read_text())
            except (OSError, json.JSONDecodeError) as err:
                raise DataError(f"cannot read meta.json: {err}", path=path) from None
            found = data.get(MEMMAP_KEY) if isinstance(data, dict) else None
            return None if found is None else check_record(found, meta)
        file = path / NPZ_FILE
        if not file.is_file():
            return None
        try:
            return check_record(json.loads(file.read_text()), file)
        except (OSError, json.JSONDecodeError) as err:
            raise DataError(f"cannot read the extractor record: {err}", path=file) from None
    if path.is_file() and h5py.is_hdf5(path):
        try:
            with h5py.File(path, "r") as handle:
                text = handle.attrs.get(HDF5_ATTRIBUTE)
            return None if text is None else check_record(json.loads(text), path)
        except (OSError, json.JSONDecodeError) as err:
            raise DataError(f"cannot read the extractor record: {err}", path=path) from None
    return None
