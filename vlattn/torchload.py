"""Reading a PyTorch file without unpickling arbitrary objects, every failure one line.

``torch.load(..., weights_only=True)`` rebuilds only tensors and plain Python containers (and the globals a
caller allows) and refuses anything else. Its own messages are several paragraphs long and advise re-running
with ``weights_only=False``, which would execute whatever the file holds: :func:`load_torch_file` instead names
the refused global (or the first line of the reason) in a one-line :class:`~vlattn.errors.DataError`, and never
suggests unsafe loading.
"""

from __future__ import annotations

import pickle
import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from vlattn.errors import DataError

_GLOBAL = re.compile(r"GLOBAL ([\w.]+)")
_ADVICE = ("weights_only", "Weights only load failed", "Check the documentation", "arbitrary code")


class RefusedObject(DataError):
    """A file holding an object that ``weights_only`` loading refuses; ``name`` is its global (``module.Class``)."""

    def __init__(self, path: Path, name: str) -> None:
        super().__init__(f"holds an object that weights_only loading refuses ({name}); it is never unpickled",
                         path=path)
        self.name = name


def load_torch_file(path: str | Path, what: str, allowed: Sequence[Any] = ()) -> Any:
    """The content of the PyTorch file ``path`` (tensors on the CPU), read with ``weights_only=True`` and the
    extra ``allowed`` globals. A damaged file is ``DataError("not a readable {what}: <reason>")``; a refused
    object a :class:`RefusedObject` naming its global."""
    path = Path(path)
    try:
        with warnings.catch_warnings(), torch.serialization.safe_globals(list(allowed)):
            warnings.simplefilter("ignore")  # e.g. "Detected pickle protocol 4": the error below says it all
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        refused = _GLOBAL.search(str(err))
        if refused:
            raise RefusedObject(path, refused.group(1)) from None
        raise DataError(f"not a readable {what}: {reason(str(err))}", path=path) from None
    except Exception as err:  # noqa: BLE001 - a damaged file fails anywhere inside the unpickler or zip reader
        raise DataError(f"not a readable {what}: {reason(str(err)) or type(err).__name__}", path=path) from None


def reason(message: str) -> str:
    """The first line of a ``torch.load`` failure that says what went wrong (not torch's advice about
    ``weights_only``)."""
    tail = message.split("WeightsUnpickler error:")[-1]
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    return next((line for line in lines if not any(advice in line for advice in _ADVICE)), lines[0] if lines else "")
