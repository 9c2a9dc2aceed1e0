"""Box geometry shared by every layer of one forward pass.

:class:`BoxGeometry` wraps the normalised boxes of a batch of images and computes derived geometry once,
on first use, so that all attention layers of an encoder share it (NG-SAN Sec. 4.2: the relative geometry
depends only on the boxes, not on the layer).

Relative geometry (NG-SAN Eq. 8; Hu et al. 2018, "Relation Networks for Object Detection", Eq. 5), for
boxes i (query) and j (key) with centres (x, y), widths w and heights h::

    f_ij = ( log(|x_i - x_j| / w_i), log(|y_i - y_j| / h_i), log(w_i / w_j), log(h_i / h_j) )

``log 0`` is avoided by a clamp: centre distances and sizes are clamped below at :data:`GEOMETRY_EPS`
(1e-3 of the image side, as boxes are normalised to [0, 1]; the Relation Networks code uses the same
``max(|dx|, 1e-3)``). Identical boxes therefore give ``(log(1e-3 / w_i), log(1e-3 / h_i), 0, 0)`` and
zero-size boxes stay finite.
"""

from __future__ import annotations

from functools import cached_property

import torch
from torch import Tensor

GEOMETRY_EPS = 1e-3


class BoxGeometry:
    """``boxes`` (B, N, 4) x1y1x2y2 normalised to [0, 1]; ``mask`` (B, N) bool, True = real region."""

    def __init__(self, boxes: Tensor, mask: Tensor | None = None) -> None:
        self.boxes = boxes
        self.mask = mask

    def centre_size(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Centres x, y and sizes w, h (B, N) each; sizes clamped at :data:`GEOMETRY_EPS`."""
        x1, y1, x2, y2 = self.boxes.unbind(-1)
        width = (x2 - x1).clamp(min=GEOMETRY_EPS)
        height = (y2 - y1).clamp(min=GEOMETRY_EPS)
        return (x1 + x2) / 2, (y1 + y2) / 2, width, height

    @cached_property
    def relative(self) -> Tensor:
        """Eq. 8 relative geometry f_ij, (B, N, N, 4): row i is the query box, column j the key box."""
        x, y, w, h = self.centre_size()  # (B, N) each
        dx = (x[:, :, None] - x[:, None, :]).abs().clamp(min=GEOMETRY_EPS)  # (B, N, N)
        dy = (y[:, :, None] - y[:, None, :]).abs().clamp(min=GEOMETRY_EPS)
        return torch.stack(
            [
                torch.log(dx / w[:, :, None]),
                torch.log(dy / h[:, :, None]),
                torch.log(w[:, :, None] / w[:, None, :]),
                torch.log(h[:, :, None] / h[:, None, :]),
            ],
            dim=-1,
        )  # (B, N, N, 4)

    def reorder(self, index: Tensor) -> BoxGeometry:
        """The geometry of batch rows ``index`` (B',) (keeps an already computed relative table)."""
        other = BoxGeometry(self.boxes.index_select(0, index), None if self.mask is None else self.mask.index_select(0, index))
        if "relative" in self.__dict__:
            other.__dict__["relative"] = self.relative.index_select(0, index)
        return other
