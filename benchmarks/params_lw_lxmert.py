"""LW-LXMERT (LW-Transformer, Luo et al. 2022, "Bert-style Model", Table XI): the parameters of LXMERT, LW-LXMERT 1x
and LW-LXMERT 3x built from the presets (vqa-lxmert, vqa-lw-lxmert, vqa-lw-lxmert-3x), beside the paper's 181M /
100M / 117M, written to benchmarks/RESULTS.md ("## LW-LXMERT parameters").

Counted: the backbone (``Lxmert.backbone_layers()``: 9 language, 5 object-relationship and 5 cross-modality layers,
what ``vlattn profile`` reports) with all its parameters and with its weight matrices only (no biases or LayerNorm
parameters), the embeddings, pooler and VQA head apart. The readings of the paper's settings that its figures do not
fit (d_f = 3156, 6 vision layers) are counted too, so every gap is accounted for.
"""

from __future__ import annotations

import dataclasses

from results import parse_args, publish
from torch import nn

from vlattn.config import ModelConfig, load_config
from vlattn.models import build_vqa_model, without_initialisation
from vlattn.models.profile import backbone_parameters, count_parameters

WORDPIECES, ANSWERS = 30522, 3129  # bert-base-uncased's vocabulary, VQA v2's candidate answers (vqa-lxmert)
PRESETS = {"LXMERT": ("vqa-lxmert", 181), "LW-LXMERT 1x": ("vqa-lw-lxmert", 100),
           "LW-LXMERT 3x": ("vqa-lw-lxmert-3x", 117)}  # preset, Table XI's #Params (millions)


@dataclasses.dataclass(frozen=True)
class Counts:
    backbone: int
    weights: int  # the backbone's weight matrices only
    embeddings: int
    pooler_head: int
    total: int


def measure(cfg: ModelConfig) -> Counts:
    with without_initialisation():
        model = build_vqa_model(cfg, WORDPIECES, ANSWERS)
    layers = nn.ModuleList(model.backbone_layers())
    encoder = model.encoder
    embeddings = sum(p.numel() for module in (encoder.words, encoder.regions) for p in module.parameters())
    return Counts(backbone_parameters(model), sum(p.numel() for p in layers.parameters() if p.dim() >= 2), embeddings,
                  sum(p.numel() for p in encoder.pooler.parameters()) + count_parameters(model)["head"],
                  count_parameters(model)["total"])


def reading(cfg: ModelConfig, *, d_ff: int | None = None, object_layers: int | None = None) -> ModelConfig:
    """``cfg`` with another FFN width or number of vision layers."""
    options = cfg.options if object_layers is None else {**cfg.options, "object_layers": object_layers}
    return dataclasses.replace(cfg, d_ff=d_ff or cfg.d_ff, options=options)


def millions(count: int) -> str:
    return f"{count / 1e6:.2f}M"


def main() -> None:
    args = parse_args(__doc__, repeats=1)
    rows, readings = [], []
    for label, (preset, paper) in PRESETS.items():
        cfg = load_config(preset).model
        c = measure(cfg)
        verdict = "= weights, truncated" if c.weights // 10**6 == paper else "differs"
        rows.append(f"| {label} | `{preset}` | {paper}M | {c.backbone:,} | {c.weights:,} | {verdict} | "
                    f"{c.embeddings:,} | {c.pooler_head:,} | {c.total:,} |")
        for name, changed in (("d_f = 3156", reading(cfg, d_ff=3156)),
                              ("6 vision layers", reading(cfg, object_layers=6))):
            other = measure(changed)
            readings.append(f"| {label} | {name} | {paper}M | {millions(other.backbone)} | {millions(other.weights)} |")
    body = f"""Parameters of the presets (built, not estimated), beside
Table XI's #Params; backbone = the 9 + 5 + 5 layers; weights = the backbone's weight matrices (no biases, no
LayerNorm parameters); embeddings = WordPiece ({WORDPIECES:,}) + position + token type + region embeddings; pooler +
head with {ANSWERS:,} answers.

| model | preset | paper | backbone | backbone weights | paper figure is | embeddings | pooler + head | whole model |
|---|---|---|---|---|---|---|---|---|
{chr(10).join(rows)}

The paper's figures are the backbone's weight matrices truncated to the million (the convention of its LW-Transformer
rows: embeddings, as its footnote says of the language and vision encoders, not counted); with the biases and norms
3x is 118.08M. Readings of the paper's stated settings that its figures do not fit:

| model | reading | paper | backbone | backbone weights |
|---|---|---|---|---|
{chr(10).join(readings)}

- The paper's "d_f = 3156" (LXMERT's FFN is 3072) and "6 Transformer encoder layers for the vision" (LXMERT has 5)
  would give other counts (above); its 181M / 100M / 117M fit 3072 and 5, which the presets use.
- "h = 6" is the heads of one group: 12 heads in k = 2 groups; "d_h = 96" matches no head width of these models
  (64 at 1x, 192 at 3x for the queries and keys) and changes no parameter count (the heads split the projections).
- G-MHA at every attention site: the language and vision self-attention, the cross-modality layers'
  cross-attention (one module for both directions, as LXMERT's) and self-attention; G-FFN in every layer; WS;
  dense merge (no G-LML)."""
    publish("LW-LXMERT parameters", body, args)


if __name__ == "__main__":
    main()
