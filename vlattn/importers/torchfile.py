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

from collections.abc import Mapping
from pathlib import Path

import numpy as np
from torch import Tensor

from vlattn.errors import DataError
from vlattn.torchload import RefusedObject, load_torch_file

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
    "re-save the weights alone in the project that wrote the file, e.g. "
    "torch.save({'state_dict': model.state_dict()}, 'weights.pth'); vlattn reads tensors and numeric NumPy values only"
)


def load_state_dict(path: str | Path, entry: str = "state_dict") -> dict[str, Tensor]:
    """The tensors of ``path``: its ``entry`` mapping if the file holds one, else the file's own mapping of
    names to tensors. Bad files, refused objects and non-tensor values are one-line :class:`DataError`\\ s."""
    path = Path(path)
    if not path.is_file():
        raise DataError("checkpoint file not found", path=path)
    try:
        data = load_torch_file(path, "PyTorch checkpoint", numpy_safe_globals())
    except RefusedObject as err:
        raise DataError(f"holds an object that weights_only loading refuses ({err.name}); {RESAVE_HINT}",
                        path=path) from None
    if isinstance(data, Mapping) and entry in data:
        data = data[entry]
    if not isinstance(data, Mapping) or not data:
        raise DataError(f"expected a mapping of tensor names to tensors (or one under {entry!r})", path=path)
    for name, value in data.items():
        if not isinstance(value, Tensor):
            raise DataError(f"expected a tensor, got {type(value).__name__}", path=path, item=name)
    return dict(data)
