"""Attentional reduction of a set to one vector (MCAN, Yu et al. 2019, Sec. 4, "multimodal fusion and
output classifier"; ``AttFlat`` of the released code):

    alpha = softmax_N(MLP(X))                      (B, N, G), padding excluded from the softmax
    x~    = W_m [sum_i alpha_i1 x_i; ...; sum_i alpha_iG x_i]     (B, out)

with MLP = Linear(d -> hidden) + ReLU + Dropout + Linear(hidden -> G) and G glimpses (MCAN: G = 1,
hidden = d, out = 2d). The bias of the MLP's last layer adds the same constant to every logit of a glimpse,
which the softmax ignores: it never receives a gradient. It is kept because the released model has it (and
its parameter count includes it).
"""

from __future__ import annotations

from torch import Tensor, nn

from vlattn.attention.mha import masked_softmax
from vlattn.layers.dropout import Dropout


class AttentionalReduction(nn.Module):
    """``forward(x (B, N, d), mask (B, N) bool True = real) -> (B, out_dim)``. A set without any real element
    reduces to the merge layer's bias (its attention weights are all zero)."""

    def __init__(self, d_model: int, hidden: int, glimpses: int, out_dim: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(d_model, hidden), nn.ReLU(), Dropout(dropout), nn.Linear(hidden, glimpses))
        self.merge = nn.Linear(d_model * glimpses, out_dim)

    def weights(self, x: Tensor, mask: Tensor) -> Tensor:
        """Attention weights (B, G, N) of every glimpse over the real elements."""
        logits = self.mlp(x).transpose(1, 2)  # (B, G, N)
        return masked_softmax(logits.masked_fill(~mask[:, None, :], float("-inf")))

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        """``x`` (B, N, d), ``mask`` (B, N) -> (B, out_dim)."""
        pooled = self.weights(x, mask) @ x  # (B, G, d)
        return self.merge(pooled.flatten(1))
