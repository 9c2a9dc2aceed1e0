"""Group-wise multi-head attention, G-MHA (Luo et al. 2022, "Towards Lightweight Transformer via Group-wise
Transformation for Vision-and-Language Tasks", Sec. III-B, Eq. 5-6, Tables I-III):

    G-MHA(X) = [tau(X_1), ..., tau(X_k)] W_O,   tau(X_i) = MHA(X_i) = [head_1, ..., head_{h/k}],

the d input channels split into k groups X_i of d/k channels *before* the projections; each group runs
multi-head attention with h/k of the h heads on its own channels; the groups' outputs are concatenated and
merged by the linear-merge layer W_O, which stays a full d x d layer ("important for ... the cross-group
information exchange") unless ``group_merge`` (G-LML, Table III) makes it group-wise too.

Options (Table I):

- ``groups`` (k): must divide the heads h (each group gets h/k heads) and d. k = 1 is plain multi-head
  attention: the same parameters, names and outputs as :class:`~vlattn.attention.mha.MultiHeadAttention`.
- ``expansion`` (the "n x" suffix): queries and keys get n times the head width, d_h = n d / h (values keep
  d / h); "LW-Transformer 3x" has d_h = 192 at d = 512, h = 8. The logits are scaled by 1 / sqrt(n d / h).
- ``share_weights`` (WS): one set of projection weights for all groups ((k^2 - 1) / k^2 fewer parameters
  than dense) instead of one per group ((k - 1) / k fewer). It also applies to a group-wise merge.
- ``group_merge`` (G-LML): W_O group-wise (d/k -> d/k per group).

Heads are laid out group by group: heads g h/k .. (g+1) h/k - 1 belong to group g, so every head sees only
its group's input channels, and one fused SDPA call covers all groups. The projections are one (batched)
matrix product each (:class:`~vlattn.layers.grouped.GroupedLinear`); caching, masking, biases and the weights
for visualisation are :class:`MultiHeadAttention`'s.

The released code differs from the paper in two ways for captioning and cannot run for VQA:

- Captioning (``ImageCaptioning/models/transformer_lightweight``): the attention shares weights across groups and
  makes the linear merge group-wise as well — ``share_weights: true, group_merge: true`` here; the paper's
  LW-Transformer keeps a dense merge (our default). Its projections otherwise agree with ours: one Linear per
  contiguous channel group, heads group by group, logits / sqrt(d_k) with ``--d_k`` 64 (1x) or 192 (3x,
  ``expansion: 3``). And every attention sub-layer is wrapped in residual + LayerNorm twice (its
  ``LMultiHeadAttention`` already returns LayerNorm(q + dropout(attention)), and the encoder and decoder layers add
  their own LayerNorm(q + dropout(that))), in the LW model and in the authors' own Transformer baseline alike: the
  model kind ``transformer``'s ``options.residual: official`` (18 x 1,024 = 18,432 parameters more at 6 + 6 layers).
  ``vlattn/presets/lw-transformer-official.yaml`` sets both with the rest of the released code's options
  (:mod:`vlattn.models.transformer` lists every difference and agreement).
- VQA (``VQA/openvqa/models/lwtransformer``, OpenVQA's MCAN): it cannot be built for any k — the ``openvqa/ops``
  and ``openvqa/utils`` folders it imports are not in the repository and ``LAYERDROP_R`` is defined nowhere. With
  those supplied from OpenVQA, it passes the head count and head width to its attention in swapped order, so at
  k = 1 it runs 64 heads of width 8 (``num_heads: 64`` here); at k = 2 the forward fails at the mask step
  ("tensor a (14) must match tensor b (7)"), and at
  k = 4 or with an odd number of positions at the reshape. We follow the paper's h/k heads of width d/h per group,
  which works for every k dividing h.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from torch import nn

from vlattn.attention.base import AttentionDims, Capabilities
from vlattn.attention.mha import MultiHeadAttention
from vlattn.config import MAX_HEADS, bounded
from vlattn.layers.grouped import GroupedLinear


class GroupMultiHeadAttention(MultiHeadAttention):
    """G-MHA: ``forward(query (B,Nq,D), key (B,Nk,D), value (B,Nk,D))`` -> ``out`` (B, Nq, D); weights
    (B, H, Nq, Nk) with heads ordered group by group."""

    @dataclass
    class Options:
        """``groups`` k (divides the heads), ``expansion`` n of the query/key head width, ``share_weights``
        (WS) across groups, ``group_merge`` (G-LML)."""

        groups: int = bounded(2, ge=1, le=MAX_HEADS)
        expansion: int = bounded(1, ge=1, le=MAX_HEADS)
        share_weights: bool = True
        group_merge: bool = False

    capabilities: ClassVar[Capabilities] = Capabilities()

    @staticmethod
    def size_problem(dims: AttentionDims, options: Options) -> str | None:
        """Why ``options`` cannot split these sizes into groups (None if they can)."""
        if dims.num_heads % options.groups:
            return f"num_heads {dims.num_heads} is not divisible by groups {options.groups} (each group gets h/k heads)"
        return None

    def __init__(self, dims: AttentionDims, options: Options | None = None) -> None:
        options = options or self.Options()
        problem = self.size_problem(dims, options)
        if problem:
            raise ValueError(problem)
        super().__init__(dims, options)
        self.groups = options.groups
        self.expansion = options.expansion
        self.share_weights = options.share_weights
        self.group_merge = options.group_merge

    def projections(self, d_model: int, options: Options) -> tuple[nn.Module, nn.Module, nn.Module, nn.Module]:
        """Group-wise query/key (d -> n d), value (d -> d) projections; dense or group-wise merge (d -> d)."""
        k, shared = options.groups, options.share_weights
        qk_width = options.expansion * d_model
        merge = GroupedLinear(d_model, d_model, k, shared=shared) if options.group_merge else nn.Linear(d_model, d_model)
        return (
            GroupedLinear(d_model, qk_width, k, shared=shared),
            GroupedLinear(d_model, qk_width, k, shared=shared),
            GroupedLinear(d_model, d_model, k, shared=shared),
            merge,
        )

    def extra_repr(self) -> str:
        return (f"groups={self.groups}, expansion={self.expansion}, share_weights={self.share_weights}, "
                f"group_merge={self.group_merge}")
