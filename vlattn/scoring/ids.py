"""Results files as the evaluation servers take them (a JSON list of ``{<id key>, <value key>}`` objects)
and the id checks every one gets: duplicates, unknown ids and (where required) missing ids."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Container, Iterable, Sequence

from vlattn.data.jsonfiles import field, read_json
from vlattn.errors import DataError

_SHOWN = 10


def check_result_ids(
    ids: Sequence[int],
    known: Container[int],
    *,
    kind: str,
    path: str | Path,
    reference: str | Path,
    required: Iterable[int] | None = None,
) -> None:
    """Refuse duplicate ``ids``, ids absent from ``known`` and, when given, ``required`` ids without a result.

    Each error is one line naming the file and the first offending ids (sorted).
    """
    duplicates = sorted(i for i, count in Counter(ids).items() if count > 1)
    if duplicates:
        raise DataError(f"{len(duplicates)} {kind} ids appear more than once: {duplicates[:_SHOWN]}", path=path)
    unknown = sorted(i for i in ids if i not in known)
    if unknown:
        raise DataError(f"{len(unknown)} {kind} ids are not in {reference}: {unknown[:_SHOWN]}", path=path)
    if required is not None:
        present = set(ids)
        missing = sorted(i for i in required if i not in present)
        if missing:
            raise DataError(f"{len(missing)} {kind} ids of {reference} have no result: {missing[:_SHOWN]}", path=path)


def read_results(path: str | Path, id_key: str, value_key: str, kind: str) -> dict[int, str]:
    """``{id: value}`` of a results file ``[{id_key: int, value_key: str}, ...]``; duplicate ids are refused."""
    rows = read_json(path)
    if not isinstance(rows, list):
        raise DataError(f"results must be a JSON list of {{{id_key}, {value_key}}} objects, got {type(rows).__name__}",
                        path=path)
    ids, values = [], []
    for index, row in enumerate(rows):
        ids.append(field(row, id_key, int, path=path, item=f"results[{index}]"))
        values.append(field(row, value_key, str, path=path, item=f"results[{index}] ({kind} {ids[-1]})"))
    check_result_ids(ids, set(ids), kind=kind, path=path, reference=path)
    return dict(zip(ids, values))
