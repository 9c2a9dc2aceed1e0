"""JSON in and out for the data files: clear errors naming file and item, atomic writes."""

from __future__ import annotations

import json
import re
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
        text = path.read_text(encoding="utf-8")
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise DataError(f"malformed JSON at line {err.lineno} column {err.colno}: {err.msg}", path=path) from None
    except RecursionError:  # the parser recurses once per level of nesting
        raise DataError("malformed JSON: nested too deeply", path=path) from None
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(f"cannot read file: {err}", path=path) from None
    if _SURROGATE_ESCAPE.search(text):  # only an escape can make one: UTF-8 text cannot hold a surrogate
        where = lone_surrogate(data)
        if where is not None:
            raise DataError("a string holds a lone UTF-16 surrogate (a \\ud800-\\udfff escape outside a pair), "
                            "not text", path=path, item=where)
    return data


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def lone_surrogate(data: Any) -> str | None:
    """The place (``annotations[3].caption``) of a string (value or key) of ``data`` holding a lone surrogate,
    or None."""
    stack: list[tuple[Any, str]] = [(data, "")]
    while stack:
        node, where = stack.pop()
        if isinstance(node, str):
            if any("\ud800" <= char <= "\udfff" for char in node):
                return where or "(the file's value)"
        elif isinstance(node, dict):
            stack.extend((key, f"{where}.key") for key in node)
            stack.extend((value, f"{where}.{key}" if where else str(key)) for key, value in node.items())
        elif isinstance(node, list):
            stack.extend((value, f"{where}[{i}]") for i, value in enumerate(node))
    return None


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
