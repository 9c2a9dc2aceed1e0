"""CPU decoding with the vocabulary projection packed for oneDNN: a :class:`~vlattn.decoding.common.Generator`
wrapper, opt-in (``eval.packed_output``, ``--packed-output``).

A captioner's ``step`` is ``log_softmax(output_projection(step_features(...)))``: its model-specific part ends at
the features (R, F) the output layer reads. :class:`PackedOutput` takes those features and runs the projection
(F -> V, the largest product of a step) as oneDNN's linear on a weight packed once
(:class:`~vlattn.layers.packed.PackedWeight`) wherever that is the same function (float32 on the CPU, no gradient
to record: :func:`~vlattn.layers.packed.packs`); elsewhere it is the model's own ``step``. The model is not
changed: the packed copy belongs to the wrapper, and the model's states pass through untouched, so the wrapper
composes with :class:`~vlattn.decoding.active.ActiveImages`. Every step returns a tensor of its own (the caller
owns it; no later step writes into it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from vlattn.layers.packed import PackedWeight, packs


class PackedOutput:
    """``model`` (with ``output_projection`` and ``step_features``) seen as a :class:`Generator` whose
    gradient-free float32 CPU steps project through a packed weight (module docstring)."""

    def __init__(self, model: Any) -> None:
        missing = [name for name in ("output_projection", "step_features") if not hasattr(model, name)]
        if missing:
            raise TypeError(f"{type(model).__name__} cannot decode with a packed output layer (it has no "
                            f"{' or '.join(missing)})")
        self.model = model
        self.packed = PackedWeight()

    def encode(self, inputs: Mapping[str, Any]) -> Any:
        return self.model.encode(inputs)

    def step(self, tokens: Tensor, state: Any) -> tuple[Tensor, Any]:
        """The model's ``step``: log-probabilities (R, V) of the next token after ``tokens`` (R, t), and the state."""
        features, state = self.model.step_features(tokens, state)  # (R, F)
        projection = self.model.output_projection
        if not packs(projection, features):
            return projection(features).log_softmax(dim=-1), state
        return torch.log_softmax(self.packed(projection, features), dim=-1), state

    def reorder(self, state: Any, index: Tensor) -> Any:
        return self.model.reorder(state, index)

    def select_images(self, state: Any, images: Tensor) -> Any:
        return self.model.select_images(state, images)
