"""JSON in and out for the data files: clear errors naming file and item, atomic writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vlattn.errors import DataError
from vlattn.io import atomic_write_text


def read_json(path: str | Path) -> Any:
    """Parse the JSON file at ``path``; a missing file or malformed JSON is a :class:`DataError`."""
    path = Path(path)
    if not path.is_file():
        raise DataError("file not found", path=path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise DataError(f"malformed JSON at line {err.lineno} column {err.colno}: {err.msg}", path=path) from None
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(f"cannot read file: {err}", path=path) from None


def write_json(path: str | Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` atomically (temporary file, then rename)."""
    atomic_write_text(path, json.dumps(data, ensure_ascii=False))


def field(record: Any, key: str, kind: type | tuple[type, ...], *, path: object, item: object) -> Any:
    """``record[key]``, checked to be a mapping entry of type ``kind``; otherwise a :class:`DataError`."""
    if not isinstance(record, dict):
        raise DataError(f"expected a JSON object, got {type(record).__name__}", path=path, item=item)
    if key not in record:
        raise DataError(f"missing key {key!r}", path=path, item=item)
    value = record[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise DataError(f"key {key!r} should be {names}, got {type(value).__name__}", path=path, item=item)
    return value
