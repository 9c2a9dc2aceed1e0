"""Reading another project's PyTorch checkpoint file without unpickling arbitrary objects.

Files are read with ``torch.load(..., weights_only=True)``, which rebuilds only tensors and plain Python
containers and refuses any other global. Training scripts of the papers' era often saved more than the
weights next to them — the M2 ``train.py`` stores NumPy's RNG state (a uint32 array) and validation scores
(NumPy float64 scalars) in the same dictionary — so the numeric NumPy array and scalar constructors are
allowlisted (under both their NumPy 1 and NumPy 2 module paths, as PyTorch's documentation recommends for
such files). Anything else (a pickled vocabulary, an optimizer class, a ``Namespace`` of arguments) is still
refused: the error says how to re-save just the weights in the environment that wrote the file.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from vlattn.errors import DataError

# numeric dtypes whose arrays and scalars may be rebuilt (object arrays would need further, refused globals)
_NUMERIC = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
            "float16", "float32", "float64")


def numpy_safe_globals() -> list:
    """The allowlist for NumPy arrays and scalars of numeric dtypes in a ``weights_only`` load."""
    from numpy._core import multiarray  # NumPy 2; NumPy 1 files name the same functions numpy.core.multiarray

    allowed: list = [np.ndarray, np.dtype, *(type(np.dtype(name)) for name in _NUMERIC)]
    for name in ("_reconstruct", "scalar"):
        function = getattr(multiarray, name)
        allowed += [function, (function, f"numpy.core.multiarray.{name}")]
    return allowed


RESAVE_HINT = (
    "re-save the weights alone where the file was written, allowing only the class named here, e.g. "
    "python -c \"import torch, argparse; torch.serialization.add_safe_globals([argparse.Namespace]); "
    "sd = torch.load('SRC.pth', weights_only=True)['state_dict']; torch.save({'state_dict': sd}, 'weights.pth')\""
)


def load_state_dict(path: str | Path, entry: str = "state_dict") -> dict[str, Tensor]:
    """The tensors of ``path``: its ``entry`` mapping if the file holds one, else the file's own mapping of
    names to tensors. Bad files, refused objects and non-tensor values are one-line :class:`DataError`\\ s."""
    path = Path(path)
    if not path.is_file():
        raise DataError("checkpoint file not found", path=path)
    try:
        with torch.serialization.safe_globals(numpy_safe_globals()):
            data = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        reason = unpickler_reason(str(err))
        if reason.startswith("Unsupported global"):
            global_name = reason.split("GLOBAL ")[-1].split(" ")[0]
            raise DataError(f"holds an object that weights_only loading refuses ({global_name}); {RESAVE_HINT}",
                            path=path) from None
        raise DataError(f"not a readable PyTorch checkpoint: {reason}", path=path) from None
    except Exception as err:  # noqa: BLE001 - a damaged file fails anywhere inside the unpickler or zip reader
        reason = (str(err).splitlines() or [""])[0] or type(err).__name__
        raise DataError(f"not a readable PyTorch checkpoint: {reason}", path=path) from None
    if isinstance(data, Mapping) and entry in data:
        data = data[entry]
    if not isinstance(data, Mapping) or not data:
        raise DataError(f"expected a mapping of tensor names to tensors (or one under {entry!r})", path=path)
    for name, value in data.items():
        if not isinstance(value, Tensor):
            raise DataError(f"expected a tensor, got {type(value).__name__}", path=path, item=name)
    return dict(data)


def unpickler_reason(message: str) -> str:
    """The one line of a ``weights_only`` failure that says what was refused."""
    tail = message.split("WeightsUnpickler error:")[-1]
    return next((line.strip() for line in tail.splitlines() if line.strip()), message.strip())
