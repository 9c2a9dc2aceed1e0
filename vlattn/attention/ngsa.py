"""Normalized and Geometry-aware Self-Attention, the attention of NG-SAN (Guo et al. 2020, Sec. 4.3): GSA
(Eq. 10) with the content queries replaced by the normalised ones of NSA (Eq. 7),

    E = IN(Q) K^T / sqrt(d_k) + phi(Q', K', G),

where the geometric queries/keys Q', K' are projections of the (unnormalised) layer input, as in GSA. The
options are those of :class:`~vlattn.attention.nsa.NormalizedSelfAttention` and
:class:`~vlattn.attention.gsa.GeometryAwareSelfAttention` together; every choice is documented in those
modules. Encoder self-attention with boxes only: the captioners' region encoder and MCAN's image
self-attention (NG-SAN Table 9 uses GSA there, vlattn/presets/vqa-mcan-gsa.yaml).

The authors released no code for NG-SAN, so unlike M2 there is no ``official`` option reproducing one: the paper
is the only reference, and the choices it leaves open are options with the paper-compatible default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from vlattn.attention.base import Capabilities, Site
from vlattn.attention.gsa import GeometryAwareSelfAttention
from vlattn.attention.nsa import NormalizedSelfAttention


class NormalizedGeometryAwareSelfAttention(NormalizedSelfAttention, GeometryAwareSelfAttention):
    """NSA's query (and/or key) normalisation + GSA's geometric bias; (B, N, D) -> (B, N, D)."""

    @dataclass
    class Options(GeometryAwareSelfAttention.Options, NormalizedSelfAttention.Options):
        """``norm``, ``normalize``, ``affine``, ``eps`` (NSA) and ``phi``, ``d_g`` (GSA)."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        sites=frozenset({Site.ENCODER_SELF}), cacheable=False, needs_geometry=True
    )
