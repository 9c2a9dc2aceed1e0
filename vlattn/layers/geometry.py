"""Box geometry shared by every layer of one forward pass.

:class:`BoxGeometry` wraps the normalised boxes of a batch of images and computes derived geometry once,
on first use, so that all attention layers of an encoder share it (NG-SAN Sec. 4.2: the relative geometry
depends only on the boxes, not on the layer).

Relative geometry (NG-SAN Eq. 8; Hu et al. 2018, "Relation Networks for Object Detection", Eq. 5), for
boxes i (query) and j (key) with centres (x, y), widths w and heights h::

    f_ij = ( log(|x_i - x_j| / w_i), log(|y_i - y_j| / h_i), log(w_i / w_j), log(h_i / h_j) )

The paper leaves ``log 0`` open (it occurs on the diagonal, i = j, and for boxes with a common centre).
Two documented clamps keep every entry finite:

- the *ratios* ``|x_i - x_j| / w_i`` and ``|y_i - y_j| / h_i`` are clamped below at :data:`RATIO_EPS` = 1e-3
  (as the Relation Networks and ORT implementations do), so identical boxes give
  ``(log 1e-3, log 1e-3, 0, 0)`` = ``(-6.91, -6.91, 0, 0)`` whatever their size;
- widths and heights are clamped below at :data:`SIZE_EPS` = 1e-3 of the image side (boxes are normalised to
  [0, 1]), so zero-size boxes (degenerate detections, zero padding) stay finite: every entry then lies in
  ``[log 1e-3, log 1e3]`` = ``[-6.91, 6.91]``.

Clamping the ratios rather than the distances keeps f invariant to scaling all boxes by one factor (pixel or
normalised coordinates give the same f), except for boxes smaller than :data:`SIZE_EPS`.

Eq. 8 takes absolute centre offsets, so it cannot tell "i left of j" from "i right of j" (or above from below):
mirroring a layout leaves every f_ij unchanged. :attr:`BoxGeometry.relative_signed` is a variant that keeps the
direction (not in the paper; GSA's ``geometry: signed`` option)::

    f_ij = ( symlog((x_i - x_j) / w_i), symlog((y_i - y_j) / h_i), log(w_i / w_j), log(h_i / h_j) ),
    symlog(t) = sign(t) log(1 + |t|)

odd and monotonic in the offsets, 0 for a common centre (no clamp needed).
"""

from __future__ import annotations

from functools import cached_property

import torch
from torch import Tensor

RATIO_EPS = 1e-3  # lower clamp of the centre-distance / size ratios of Eq. 8
SIZE_EPS = 1e-3  # lower clamp of widths and heights (normalised image units)


class BoxGeometry:
    """``boxes`` (B, N, 4) x1y1x2y2 normalised to [0, 1]; ``mask`` (B, N) bool, True = real region."""

    def __init__(self, boxes: Tensor, mask: Tensor | None = None) -> None:
        self.boxes = boxes
        self.mask = mask

    def centre_size(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Centres x, y and sizes w, h (B, N) each; sizes clamped at :data:`SIZE_EPS`."""
        x1, y1, x2, y2 = self.boxes.unbind(-1)
        width = (x2 - x1).clamp(min=SIZE_EPS)
        height = (y2 - y1).clamp(min=SIZE_EPS)
        return (x1 + x2) / 2, (y1 + y2) / 2, width, height

    def offsets(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Signed centre offsets (x_i - x_j) / w_i, (y_i - y_j) / h_i and log size ratios log(w_i / w_j),
        log(h_i / h_j), (B, N, N) each."""
        x, y, w, h = self.centre_size()  # (B, N) each
        dx = (x[:, :, None] - x[:, None, :]) / w[:, :, None]  # (B, N, N)
        dy = (y[:, :, None] - y[:, None, :]) / h[:, :, None]
        return dx, dy, torch.log(w[:, :, None] / w[:, None, :]), torch.log(h[:, :, None] / h[:, None, :])

    @cached_property
    def relative(self) -> Tensor:
        """Eq. 8 relative geometry f_ij, (B, N, N, 4): row i is the query box, column j the key box."""
        dx, dy, dw, dh = self.offsets()
        return torch.stack([dx.abs().clamp(min=RATIO_EPS).log(), dy.abs().clamp(min=RATIO_EPS).log(), dw, dh], dim=-1)

    @cached_property
    def relative_signed(self) -> Tensor:
        """The direction-keeping variant of Eq. 8 (module docstring), (B, N, N, 4)."""
        dx, dy, dw, dh = self.offsets()
        return torch.stack([dx.sign() * dx.abs().log1p(), dy.sign() * dy.abs().log1p(), dw, dh], dim=-1)

    def reorder(self, index: Tensor) -> BoxGeometry:
        """The geometry of batch rows ``index`` (B',) (keeps already computed relative tables)."""
        other = BoxGeometry(self.boxes.index_select(0, index), None if self.mask is None else self.mask.index_select(0, index))
        for name in ("relative", "relative_signed"):
            if name in self.__dict__:
                other.__dict__[name] = self.__dict__[name].index_select(0, index)
        return other
