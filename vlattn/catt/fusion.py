"""How the in-sample and cross-sample outputs reach the predictor (CATT Sec. 3.2: "we can concatenate the outputs
for estimating P(Y|do(X)) as in Eq. (5)"; Fig. 5: Z^ and X^ "will be concatenated and input into the final
predictor"):

- ``concat`` (the paper): [Z^; X^], twice the width;
- ``concat_linear`` (the authors' released code, ``fc_lang``/``fc_visn``: Linear(2d -> d) over the concatenation):
  back to the width of one stream, so the result can stand wherever one attention output stood.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

Fusion = Literal["concat", "concat_linear"]


class StreamFusion(nn.Module):
    """``forward(in_sample (..., w), cross_sample (..., w))`` -> (..., ``out_dim``): 2w for ``concat``, w for
    ``concat_linear``."""

    def __init__(self, width: int, mode: Fusion) -> None:
        super().__init__()
        self.mode = mode
        self.proj = nn.Linear(2 * width, width) if mode == "concat_linear" else None
        self.out_dim = width if self.proj is not None else 2 * width

    def extra_repr(self) -> str:
        return f"{self.mode}, out_dim={self.out_dim}"

    def forward(self, in_sample: Tensor, cross_sample: Tensor) -> Tensor:
        joined = torch.cat([in_sample, cross_sample], dim=-1)  # (..., 2w)
        return joined if self.proj is None else self.proj(joined)
