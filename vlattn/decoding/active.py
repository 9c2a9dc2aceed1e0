"""Decoding only the images still in progress: a :class:`~vlattn.decoding.common.Generator` wrapper.

The batched decoders advance every image until the last one has ended; an image whose rows (beams or samples) have
all produced the end token only takes the zero-cost continuation from then on (the decoders replace its rows'
log-probabilities), yet the model still computes them — with gradients (SCST) forward and backward. Wrapped in
:class:`ActiveImages`, the model computes the rows of unfinished images only: once every row of an image holds
``eos`` the image's state is dropped (the model's ``select_images(state, images)``), and its rows' log-probabilities
come back as zeros, which the decoders never use (they are replaced by the frozen continuation).

The decoders' results are the same; only the work differs — and, in training mode, the random numbers dropout
draws, since fewer rows draw masks. Rows stay grouped image by image (R = B g), as the decoders keep them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from vlattn.decoding.common import Generator, batch_shape
from vlattn.layers.rows import image_rows


@dataclass
class ActiveState:
    """The wrapped model's state of the ``active`` images (A,) (indices into the B images), their rows grouped
    image by image, ``group`` rows per image."""

    inner: Any
    active: Tensor
    images: int
    group: int = 1


class ActiveImages:
    """``model`` (with ``select_images``) seen as a :class:`Generator` that skips finished images (module docstring).

    ``eos``: the end token; an image is finished when each of its rows' tokens contains it."""

    def __init__(self, model: Any, eos: int) -> None:
        if not hasattr(model, "select_images"):
            raise TypeError(f"{type(model).__name__} cannot drop finished images (it has no select_images)")
        self.model, self.eos = model, eos

    def encode(self, inputs: Mapping[str, Any]) -> ActiveState:
        images, device = batch_shape(inputs)
        return ActiveState(self.model.encode(inputs), torch.arange(images, device=device), images)

    def step(self, tokens: Tensor, state: ActiveState) -> tuple[Tensor, ActiveState]:
        """``tokens`` (B g, t) of all rows -> log-probabilities (B g, V): the model's for the rows of unfinished
        images, 0 for the others."""
        group = state.group
        ended = (tokens == self.eos).any(dim=1).view(state.images, group).all(dim=1)  # (B,)
        still = ~ended[state.active]  # (A,)
        if not still.all():
            keep = still.nonzero().squeeze(1)  # (A',) positions among the active images
            state = ActiveState(self.model.select_images(state.inner, keep), state.active[keep], state.images, group)
        if state.active.numel() == state.images:  # nothing dropped yet: no gather, no scatter
            log_probs, inner = self.model.step(tokens, state.inner)
            return log_probs, ActiveState(inner, state.active, state.images, group)
        rows = image_rows(state.active, group)  # (A g,)
        log_probs, inner = self.model.step(tokens[rows], state.inner)  # (A g, V)
        full = log_probs.new_zeros(tokens.shape[0], log_probs.shape[1]).index_copy(0, rows, log_probs)  # (B g, V)
        return full, ActiveState(inner, state.active, state.images, group)

    def reorder(self, state: ActiveState, index: Tensor) -> ActiveState:
        """Rows ``index`` (B g',) of all rows (each continuing a row of its own image): the active images' part,
        renumbered to the wrapped state's rows."""
        group = index.shape[0] // state.images
        old_group = state.group
        mine = index.view(state.images, group)[state.active]  # (A, g') rows of the active images
        local = mine - (state.active * old_group)[:, None] + (torch.arange(state.active.numel(),
                                                                            device=index.device) * old_group)[:, None]
        inner = self.model.reorder(state.inner, local.reshape(-1))
        return ActiveState(inner, state.active, state.images, group)


def skipping_finished(model: Any, eos: int) -> Generator:
    """``model`` wrapped in :class:`ActiveImages` when it offers ``select_images``, else ``model`` itself."""
    return ActiveImages(model, eos) if hasattr(model, "select_images") else model
