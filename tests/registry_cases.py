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

from vlattn.attention import ATTENTION, AttentionContext, AttentionOutput, Site, build_attention, reorder_state
from vlattn.config import ModelConfig, Spec
from vlattn.layers import FEED_FORWARD, BoxGeometry, build_feed_forward
from vlattn.models import MODELS, build_captioner, build_vqa_model

D, H = 16, 4  # attention width and heads of the mechanism battery
Q_DIM = 12  # query size at cross sites of mechanisms that accept queries of another size
VOCAB, FEATURE_DIM = 23, 12
ANSWERS = 9  # candidate answers of the tiny VQA models
BOS, EOS, PAD = 1, 2, 0


@dataclass(frozen=True)
class SiteKind:
    """A model's attention site as the battery varies it: its kind, whether its context carries box geometry,
    and whether the model needs a mechanism that takes queries of another size than keys (Up-Down)."""

    site: Site
    geometry: bool = False
    query_dim_differs: bool = False

    def accepts(self, name: str) -> bool:
        caps = ATTENTION[name].capabilities
        return (
            self.site in caps.sites
            and (self.site is not Site.DECODER_SELF or caps.cacheable)
            and (self.geometry or not caps.needs_geometry)
            and (caps.query_dim_differs or not self.query_dim_differs)
        )


# model kind -> the sites whose mechanism the model battery varies (each kind's default mechanism excluded)
VARIED_SITES: dict[str, dict[str, SiteKind]] = {
    "transformer": {
        "encoder_self_attention": SiteKind(Site.ENCODER_SELF, geometry=True),
        "decoder_self_attention": SiteKind(Site.DECODER_SELF),
        "decoder_cross_attention": SiteKind(Site.CROSS),
    },
    "updown": {"decoder_cross_attention": SiteKind(Site.CROSS, geometry=True, query_dim_differs=True)},
    "mcan": {
        "encoder_self_attention": SiteKind(Site.ENCODER_SELF),  # question self-attention
        "decoder_self_attention": SiteKind(Site.ENCODER_SELF, geometry=True),  # image self-attention
        "decoder_cross_attention": SiteKind(Site.CROSS),  # question-guided attention over the regions
    },
    "lxmert": {
        "encoder_self_attention": SiteKind(Site.ENCODER_SELF),  # word self-attention
        "decoder_self_attention": SiteKind(Site.ENCODER_SELF, geometry=True),  # region self-attention
        "decoder_cross_attention": SiteKind(Site.CROSS),  # cross-attention, both directions
    },
}

# mechanism -> the options the batteries build it with (small dictionaries); at Transformer sites the output must
# have the model's width
MECHANISM_OPTIONS: dict[str, dict[str, Any]] = {
    "catt": {"dictionary": {"size": 5}},
    "catt_additive": {"dictionary": {"size": 5}},
}
SITE_OPTIONS: dict[str, dict[str, Any]] = {name: {**options, "fusion": "concat_linear"} for name, options in MECHANISM_OPTIONS.items()}


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


def cross_call(query_dim: int, batch: int = 3, queries: int = 4, keys: int = 6, seed: int = 1,
               geometry: bool = False) -> Call:
    """Queries of one stream over padded keys of another (row b has b padded keys); with ``geometry`` the
    context carries the keys' boxes."""
    generator = torch.Generator().manual_seed(seed)
    query = torch.randn(batch, queries, query_dim, generator=generator)
    memory = torch.randn(batch, keys, D, generator=generator)
    real = torch.ones(batch, keys, dtype=torch.bool)
    for row in range(1, batch):
        real[row, keys - row:] = False
    everything = torch.ones(batch, queries, dtype=torch.bool)
    boxes = random_boxes(batch, keys, generator) if geometry else None
    context = cross_context(boxes, real)
    return Call(Site.CROSS, query, memory, memory, real[:, None, None, :], context, everything, real, boxes)


def cross_context(boxes: Tensor | None, real: Tensor) -> AttentionContext:
    """The context of a cross site: with the keys' geometry when ``boxes`` (B, Nk, 4) are given."""
    return AttentionContext(Site.CROSS, geometry=None if boxes is None else BoxGeometry(boxes, real))


def call_for(name: str, site: Site, **kwargs: Any) -> Call:
    """Inputs for mechanism ``name`` at a site of kind ``site``."""
    if site is Site.CROSS:
        caps = ATTENTION[name].capabilities
        return cross_call(Q_DIM if caps.query_dim_differs else D, geometry=caps.needs_geometry, **kwargs)
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


# kind -> the model options and attention specs its tiny configuration uses
KIND_DEFAULTS: dict[str, dict[str, Any]] = {
    "transformer": {},
    "m2": {"encoder_self_attention": Spec("memory", {"slots": 5})},
    "updown": {"decoder_cross_attention": Spec("additive"), "options": {"embed_dim": 10, "attention_dim": 8}},
    "mcan": {"options": {"word_dim": 10}},
    "twin_stream": {"options": {"word_dim": 10, "lstm_dim": 6, "fusion_dim": 12, "attention": {"name": "sla", "options": {"units": 2}}}},
    "catt": {"options": {"image_dictionary": {"size": 5}, "word_dictionary": {"size": 6}}},
    "mcan_catt": {"options": {"word_dim": 10, "image_dictionary": {"size": 5}, "word_dictionary": {"size": 6}}},
    "lxmert": {"options": {"object_layers": 1}},
    "lxmert_catt": {"options": {"object_layers": 1, "image_dictionary": {"size": 5, "init": "random"},
                                "word_dictionary": {"size": 6, "init": "random"}}},
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


# variants of a kind's options that the whole battery runs too (the official padding of M2 and LW-Transformer attends
# padded regions by design, so it is tested on its own in tests/models/test_m2_official.py and test_lw_official.py)
KIND_VARIANTS: list[ModelCase] = [
    ModelCase("m2", label="official", overrides={
        "encoder_self_attention": Spec("memory", {"slots": 5, "init": "official"}),
        "options": {"residual": "official", "positions": "table", "init": "official"},
    }),
    ModelCase("transformer", label="lw-official", overrides={
        **{site: Spec("gmha", {"groups": 2, "group_merge": True}) for site in
           ("encoder_self_attention", "decoder_self_attention", "decoder_cross_attention")},
        "feed_forward": Spec("gffn", {"groups": 2}), "attention_dropout": 0.1, "embedding_dropout": 0.0,
        "options": {"residual": "official", "positions": "table", "init": "official"},
    }),
    ModelCase("twin_stream", label="stacked", overrides={"options": {
        **KIND_DEFAULTS["twin_stream"]["options"], "attention": {"name": "stacked", "options": {"units": 2}}, "features": "raw",
        "init": "torch"}}),
    ModelCase("catt", label="unshared", overrides={"options": {**KIND_DEFAULTS["catt"]["options"], "share": False}}),
    ModelCase("catt", label="linear-tied-boxes", overrides={
        "options": {**KIND_DEFAULTS["catt"]["options"], "fusion": "concat_linear"}, "tie_embeddings": True,
        "box_input": True,
    }),
    ModelCase("lxmert", label="unshared", overrides={"options": {"object_layers": 1, "share_cross_attention": False}}),
    ModelCase("lxmert", label="lw-3x", overrides={
        **{site: Spec("gmha", {"groups": 2, "expansion": 3}) for site in
           ("encoder_self_attention", "decoder_self_attention", "decoder_cross_attention")},
        "feed_forward": Spec("gffn", {"groups": 2}), "options": {"object_layers": 1}}),
    ModelCase("lxmert_catt", label="unshared", overrides={
        "options": {**KIND_DEFAULTS["lxmert_catt"]["options"], "share": False, "share_cross_attention": False}}),
    ModelCase("lxmert_catt", label="official", overrides={"options": {
        **KIND_DEFAULTS["lxmert_catt"]["options"], "fusion": "concat_linear", "dictionary_space": "hidden",
        "cross_queries": "stream", "chain_cross": False}}),
    ModelCase("mcan_catt", label="unshared", overrides={
        "options": {**KIND_DEFAULTS["mcan_catt"]["options"], "share": False}}),
    # SLA without its box-reading positional bias places where no boxes are passed (its capabilities follow its
    # options): the Transformer decoder's cross-attention and MCAN's question-guided attention
    ModelCase("transformer", label="sla-no-boxes", overrides={"decoder_cross_attention": Spec("sla", {"position": "none"})}),
    ModelCase("mcan", label="sla-no-boxes", overrides={"decoder_cross_attention": Spec("sla", {"position": "none"})}),
    ModelCase("mcan_catt", label="linear-boxes", overrides={
        "options": {**KIND_DEFAULTS["mcan_catt"]["options"], "fusion": "concat_linear"}, "box_input": True,
    }),
]


def default_mechanism(kind: str, site_key: str) -> str:
    """The mechanism a kind's tiny configuration puts at ``site_key``."""
    spec = KIND_DEFAULTS.get(kind, {}).get(site_key)
    return spec.name if spec is not None else getattr(ModelConfig(), site_key).name


def task_cases(task: str, case: type[ModelCase]) -> list[ModelCase]:
    """Every model kind of ``task`` with its defaults and its :data:`KIND_VARIANTS`, and each of its kinds in
    :data:`VARIED_SITES` with every other mechanism at every site that accepts it, as ``case`` objects."""
    kinds = {kind for kind, entry in MODELS.items() if entry.task == task}
    cases = [case(kind) for kind in sorted(kinds)]
    cases += [case(v.kind, v.sites, v.overrides, v.label) for v in KIND_VARIANTS if v.kind in kinds]
    for kind, sites in VARIED_SITES.items():
        for site_key, site in sites.items():
            for name in sorted(ATTENTION):
                if kind in kinds and site.accepts(name) and name != default_mechanism(kind, site_key):
                    cases.append(case(kind, {site_key: name}))
    return cases


def model_cases() -> list[ModelCase]:
    """:func:`task_cases` of the captioners, and the Transformer with every feed-forward."""
    cases = task_cases("captioning", ModelCase)
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


def vqa_model_cases() -> list[VQAModelCase]:
    """:func:`task_cases` of the VQA models (MCAN with every mechanism at every site it allows, boxes only at
    the image self-attention)."""
    return task_cases("vqa", VQAModelCase)  # type: ignore[return-value]


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


class MarkovModel(nn.Module):
    """A crafted generator: p(next | last token) from a fixed table (``rows``: last token -> {next token: p};
    every other next token gets a tiny mass), the same for every image. A module, so that the task's decoding
    (``model.eval()``) takes it as it takes a captioner."""

    def __init__(self, rows: dict[int, dict[int, float]], vocab: int = 5) -> None:
        super().__init__()
        table = torch.full((vocab, vocab), 1e-6)
        for last, probs in rows.items():
            for word, p in probs.items():
                table[last, word] = p
        self.log_table = (table / table.sum(-1, keepdim=True)).log()

    def encode(self, inputs):
        return {"image": torch.arange(inputs["features"].shape[0])}

    def step(self, tokens, state):
        return self.log_table[tokens[:, -1]], state

    def reorder(self, state, index):
        return reorder_state(state, index)
