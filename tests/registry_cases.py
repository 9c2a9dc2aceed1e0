"""Shared test helpers over the registries (the idea of timm's ``tests/test_models.py``): every attention
mechanism at every site its capabilities allow, with inputs shaped for that site, and tiny models of every
model kind (captioners and VQA models) with each mechanism at each site it allows.

The per-mechanism, per-feed-forward and per-model batteries (``tests/models/test_attention_registry.py``,
``tests/models/test_feed_forward_registry.py``, ``tests/models/test_model_registry.py``,
``tests/models/test_vqa_registry.py``) are parametrised by :func:`placements`, :func:`feed_forward_names`,
:func:`model_cases` and :func:`vqa_model_cases`, so a new mechanism, feed-forward or model kind is tested as soon
as it is registered.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import Tensor, nn

from vlattn.attention import ATTENTION, AttentionContext, AttentionOutput, Site, build_attention
from vlattn.config import ModelConfig, Spec
from vlattn.layers import FEED_FORWARD, BoxGeometry, build_feed_forward
from vlattn.models import MODELS, build_captioner, build_vqa_model

D, H = 16, 4  # attention width and heads of the mechanism battery
Q_DIM = 12  # query size at cross sites of mechanisms that accept queries of another size
VOCAB, FEATURE_DIM = 23, 12
ANSWERS = 9  # candidate answers of the tiny VQA models
BOS, EOS, PAD = 1, 2, 0

# the attention sites of the Transformer-family captioners and the kind of each
CAPTIONER_SITES = {
    "encoder_self_attention": Site.ENCODER_SELF,
    "decoder_self_attention": Site.DECODER_SELF,
    "decoder_cross_attention": Site.CROSS,
}


# mechanism -> the options the batteries build it with (small dictionaries); at Transformer sites the output must
# have the model's width
MECHANISM_OPTIONS: dict[str, dict[str, Any]] = {
    "catt": {"dictionary": {"size": 5}},
    "catt_additive": {"dictionary": {"size": 5}},
}
SITE_OPTIONS: dict[str, dict[str, Any]] = {name: {**options, "fusion": "concat_linear"} for name, options in MECHANISM_OPTIONS.items()}

# the attention sites of the VQA models (MCAN's names): site kind and whether the site provides boxes
VQA_SITES = {
    "encoder_self_attention": (Site.ENCODER_SELF, False),  # question self-attention
    "decoder_self_attention": (Site.ENCODER_SELF, True),  # image self-attention
    "decoder_cross_attention": (Site.CROSS, False),  # question-guided attention over the regions
}


def placements() -> list[tuple[str, Site]]:
    """Every (mechanism, site kind) that the mechanism's capabilities allow."""
    return [
        (name, site)
        for name, cls in sorted(ATTENTION.items())
        for site in Site
        if site in cls.capabilities.sites and (site is not Site.DECODER_SELF or cls.capabilities.cacheable)
    ]


def feed_forward_names() -> list[str]:
    """Every registered feed-forward."""
    return sorted(FEED_FORWARD)


def build_feed_forward_case(name: str, *, dropout: float = 0.0, seed: int = 0) -> nn.Module:
    """The feed-forward ``name`` with its default options at d = :data:`D`, d_ff = 2 D, in eval mode."""
    torch.manual_seed(seed)
    return build_feed_forward(name, D, 2 * D, dropout).eval()


def placement_id(case: tuple[str, Site]) -> str:
    return f"{case[0]}@{case[1].value}"


def build_mechanism(name: str, site: Site, *, dropout: float = 0.0, seed: int = 0, **options: Any) -> nn.Module:
    """The mechanism ``name`` sized for the battery (queries of size :data:`Q_DIM` at cross sites when the
    mechanism accepts them), in eval mode."""
    caps = ATTENTION[name].capabilities
    query_dim = Q_DIM if caps.query_dim_differs and site is Site.CROSS else None
    torch.manual_seed(seed)
    module = build_attention(
        name, d_model=D, num_heads=H if caps.heads else 1, dropout=dropout, query_dim=query_dim,
        options={**MECHANISM_OPTIONS.get(name, {}), **options},
    )
    return module.eval()


def random_boxes(batch: int, count: int, generator: torch.Generator) -> Tensor:
    """Valid normalised boxes (B, N, 4) x1y1x2y2."""
    corner = torch.rand(batch, count, 2, generator=generator) * 0.6
    size = 0.05 + torch.rand(batch, count, 2, generator=generator) * 0.35
    return torch.cat([corner, corner + size], dim=-1)


@dataclass
class Call:
    """The arguments of one attention call at a site. ``valid_queries`` (B, Nq) marks the outputs that must
    not depend on padding (real regions; every query elsewhere); ``valid_keys`` (B, Nk) the keys that count."""

    site: Site
    query: Tensor
    key: Tensor
    value: Tensor
    mask: Tensor | None
    context: AttentionContext
    valid_queries: Tensor
    valid_keys: Tensor
    boxes: Tensor | None = None

    def run(self, module: nn.Module, *, need_weights: bool = False, **changes: Any) -> AttentionOutput:
        """Call ``module`` with these arguments (``changes`` replace any of them)."""
        args = {"query": self.query, "key": self.key, "value": self.value, "mask": self.mask,
                "context": self.context, **changes}
        return module(args.pop("query"), args.pop("key"), args.pop("value"), need_weights=need_weights, **args)

    def with_rows(self, **tensors: Tensor) -> Call:
        """A copy with new query/key/value tensors (self-attention: one tensor for all three)."""
        return replace(self, **tensors)


def self_attention_call(site: Site, batch: int = 3, length: int = 6, seed: int = 1) -> Call:
    """Encoder self-attention over padded regions (row b has b padded regions, with boxes), or causal
    decoder self-attention over a token sequence."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, length, D, generator=generator)
    if site is Site.DECODER_SELF:
        causal = torch.ones(length, length, dtype=torch.bool).tril()
        everything = torch.ones(batch, length, dtype=torch.bool)
        return Call(site, x, x, x, causal, AttentionContext(site), everything, everything)
    real = torch.ones(batch, length, dtype=torch.bool)
    for row in range(1, batch):
        real[row, length - row:] = False
    boxes = random_boxes(batch, length, generator)
    context = AttentionContext(site, query_mask=real, geometry=BoxGeometry(boxes, real))
    return Call(site, x, x, x, real[:, None, None, :], context, real, real, boxes)


def cross_call(query_dim: int, batch: int = 3, queries: int = 4, keys: int = 6, seed: int = 1) -> Call:
    """Queries of one stream over padded keys of another (row b has b padded keys)."""
    generator = torch.Generator().manual_seed(seed)
    query = torch.randn(batch, queries, query_dim, generator=generator)
    memory = torch.randn(batch, keys, D, generator=generator)
    real = torch.ones(batch, keys, dtype=torch.bool)
    for row in range(1, batch):
        real[row, keys - row:] = False
    everything = torch.ones(batch, queries, dtype=torch.bool)
    return Call(Site.CROSS, query, memory, memory, real[:, None, None, :], AttentionContext(Site.CROSS), everything, real)


def call_for(name: str, site: Site, **kwargs: Any) -> Call:
    """Inputs for mechanism ``name`` at a site of kind ``site``."""
    if site is Site.CROSS:
        caps = ATTENTION[name].capabilities
        return cross_call(Q_DIM if caps.query_dim_differs else D, **kwargs)
    return self_attention_call(site, **kwargs)


def naive_attention_loops(
    q: Tensor, k: Tensor, v: Tensor, real_keys: Tensor, out_proj: nn.Linear, phi: Any = None
) -> Tensor:
    """Projected q, k, v (B, N, D) -> (B, N, D) by loops over images, queries, heads and keys:
    softmax_j(q_i . k_j / sqrt(d_k) + phi(b, h, i, j)) v per head (padded keys, ``real_keys`` (B, Nk) False,
    excluded), heads concatenated and projected by ``out_proj``."""
    batch, count, _ = q.shape
    d_k = D // H
    out = torch.zeros(batch, count, out_proj.out_features)
    for b in range(batch):
        for i in range(count):
            heads = []
            for h in range(H):
                cols = slice(h * d_k, (h + 1) * d_k)
                logits = torch.tensor([
                    float(q[b, i, cols] @ k[b, j, cols]) / d_k**0.5 + (phi(b, h, i, j) if phi else 0.0)
                    if real_keys[b, j] else float("-inf")
                    for j in range(k.shape[1])
                ])
                heads.append(torch.softmax(logits, 0) @ v[b, :, cols])
            out[b, i] = out_proj(torch.cat(heads))
    return out


# --- models ---------------------------------------------------------------------------------------------------


@dataclass
class ModelCase:
    """A tiny model of one kind with the given attention specs at its sites."""

    kind: str
    sites: dict[str, str] = field(default_factory=dict)
    overrides: dict[str, Any] = field(default_factory=dict)
    label: str = ""  # names a variant of the kind's options

    @property
    def id(self) -> str:
        placed = ",".join(f"{site.split('_')[0]}_{site.split('_')[1]}={name}" for site, name in self.sites.items())
        name = f"{self.kind}-{self.label}" if self.label else self.kind
        return f"{name}[{placed}]" if placed else name

    def config(self) -> ModelConfig:
        return tiny_model_config(self.kind, self.sites, **self.overrides)

    def build(self, seed: int = 0) -> nn.Module:
        torch.manual_seed(seed)
        return build_captioner(self.config(), VOCAB, pad_id=PAD).eval()


# kind -> the model options and encoder spec its tiny configuration uses
KIND_DEFAULTS: dict[str, dict[str, Any]] = {
    "transformer": {},
    "m2": {"encoder_self_attention": Spec("memory", {"slots": 5})},
    "catt": {"options": {"image_dictionary": {"size": 5}, "word_dictionary": {"size": 6}}},
    "mcan": {"options": {"word_dim": 10}},
    "mcan_catt": {"options": {"word_dim": 10, "image_dictionary": {"size": 5}, "word_dictionary": {"size": 6}}},
}


def tiny_model_config(kind: str = "transformer", sites: Mapping[str, str] | None = None, **overrides: Any) -> ModelConfig:
    """A 2+2-layer, d=16, 2-head model of ``kind`` with mechanism names at the given sites (others: the
    kind's default)."""
    fields: dict[str, Any] = dict(
        kind=kind, feature_dim=FEATURE_DIM, d_model=16, num_heads=2, d_ff=32, encoder_layers=2, decoder_layers=2,
        dropout=0.0, max_positions=32, **KIND_DEFAULTS.get(kind, {}),
    )
    for site, name in (sites or {}).items():
        fields[site] = Spec(name, SITE_OPTIONS.get(name, {}))
    fields.update(overrides)
    return ModelConfig(**fields)


# variants of a kind's options that the whole battery runs too (M2's official padding attends padded
# regions by design, so it is tested on its own in tests/models/test_m2_official.py)
KIND_VARIANTS: list[ModelCase] = [
    ModelCase("m2", label="official", overrides={
        "encoder_self_attention": Spec("memory", {"slots": 5, "init": "official"}),
        "options": {"residual": "official", "positions": "table", "init": "official"},
    }),
    ModelCase("catt", label="unshared", overrides={"options": {**KIND_DEFAULTS["catt"]["options"], "share": False}}),
    ModelCase("catt", label="linear-tied-boxes", overrides={
        "options": {**KIND_DEFAULTS["catt"]["options"], "fusion": "concat_linear"}, "tie_embeddings": True,
        "box_input": True,
    }),
]


def model_cases() -> list[ModelCase]:
    """Every captioning model kind with its defaults and its :data:`KIND_VARIANTS`, the Transformer with every
    mechanism at every captioner site that mechanism allows, and the Transformer with every feed-forward."""
    cases = [ModelCase(kind) for kind, entry in sorted(MODELS.items()) if entry.task == "captioning"] + KIND_VARIANTS
    for site_key, site in CAPTIONER_SITES.items():
        for name, placed in placements():
            if placed is site and name != "mha":
                cases.append(ModelCase("transformer", {site_key: name}))
    cases += [ModelCase("transformer", {"feed_forward": name}) for name in feed_forward_names() if name != "plain"]
    return cases


def tiny_inputs(batch: int = 3, regions: int = 6, length: int = 7, seed: int = 1) -> dict[str, Tensor]:
    """Model inputs: features (B, N, D) with padding in rows 1.., boxes (B, N, 4), region_mask (B, N),
    tokens (B, length)."""
    generator = torch.Generator().manual_seed(seed)
    mask = torch.ones(batch, regions, dtype=torch.bool)
    for row in range(1, batch):
        mask[row, regions - row:] = False
    features = torch.randn(batch, regions, FEATURE_DIM, generator=generator) * mask[..., None]
    return {
        "features": features,
        "boxes": random_boxes(batch, regions, generator),
        "region_mask": mask,
        "tokens": torch.randint(3, VOCAB, (batch, length), generator=generator),
    }


def model_inputs(inputs: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """The model-input mapping of :func:`tiny_inputs` (everything but the tokens)."""
    return {k: v for k, v in inputs.items() if k != "tokens"}


# --- VQA models -----------------------------------------------------------------------------------------------


@dataclass
class VQAModelCase(ModelCase):
    """A tiny VQA model of one kind with the given attention specs at its sites."""

    def build(self, seed: int = 0) -> nn.Module:
        torch.manual_seed(seed)
        return build_vqa_model(self.config(), VOCAB, ANSWERS, pad_id=PAD).eval()


MCAN_CATT_OPTIONS = KIND_DEFAULTS["mcan_catt"]["options"]
VQA_KIND_VARIANTS: list[VQAModelCase] = [
    VQAModelCase("mcan_catt", label="unshared", overrides={"options": {**MCAN_CATT_OPTIONS, "share": False}}),
    VQAModelCase("mcan_catt", label="linear-boxes", overrides={
        "options": {**MCAN_CATT_OPTIONS, "fusion": "concat_linear"}, "box_input": True,
    }),
]


def vqa_model_cases() -> list[VQAModelCase]:
    """Every VQA model kind with its defaults, and MCAN with every mechanism at every site it allows (with
    boxes only at the image self-attention)."""
    cases = [VQAModelCase(kind) for kind, entry in sorted(MODELS.items()) if entry.task == "vqa"] + VQA_KIND_VARIANTS
    for site_key, (site, has_geometry) in VQA_SITES.items():
        for name, placed in placements():
            needs_geometry = ATTENTION[name].capabilities.needs_geometry
            if placed is site and name != "mha" and (has_geometry or not needs_geometry):
                cases.append(VQAModelCase("mcan", {site_key: name}))
    return cases


def tiny_vqa_inputs(batch: int = 3, regions: int = 6, words: int = 5, seed: int = 1) -> dict[str, Tensor]:
    """VQA model inputs: :func:`tiny_inputs` regions (row b has b padded regions) and ``questions`` (B, L) of
    word ids padded after the words (row b has b padded words) with ``question_mask`` (B, L)."""
    inputs = model_inputs(tiny_inputs(batch, regions, seed=seed))
    generator = torch.Generator().manual_seed(seed + 1)
    mask = torch.ones(batch, words, dtype=torch.bool)
    for row in range(1, batch):
        mask[row, words - row:] = False
    questions = torch.randint(3, VOCAB, (batch, words), generator=generator).masked_fill(~mask, PAD)
    return {**inputs, "questions": questions, "question_mask": mask}
