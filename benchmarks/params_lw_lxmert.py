"""LW-LXMERT (LW-Transformer, Luo et al. 2022, "Bert-style Model", Table XI): the parameters of LXMERT, LW-LXMERT 1x
and LW-LXMERT 3x built from the presets (vqa-lxmert, vqa-lw-lxmert, vqa-lw-lxmert-3x), beside the paper's 181M /
100M / 117M, written to benchmarks/RESULTS.md ("## LW-LXMERT parameters").

Counted: the backbone (``Lxmert.backbone_layers()``: 9 language, 5 object-relationship and 5 cross-modality layers,
what ``vlattn profile`` reports) with all its parameters and with its weight matrices only (no biases or LayerNorm
parameters), and the whole model; and the readings of the paper's text that its figures do not fit (d_f = 3156, 6
vision layers). tests/models/test_lw_lxmert.py checks the counts against the closed form.
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
    total: int


def measure(cfg: ModelConfig) -> Counts:
    with without_initialisation():
        model = build_vqa_model(cfg, WORDPIECES, ANSWERS)
    layers = nn.ModuleList(model.backbone_layers())
    return Counts(backbone_parameters(model), sum(p.numel() for p in layers.parameters() if p.dim() >= 2),
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
        rows.append(f"| {label} | `{preset}` | {paper}M | {c.backbone:,} | {c.weights:,} | {c.total:,} |")
        if label == "LW-LXMERT 1x":
            readings = [millions(measure(reading(cfg, d_ff=3156)).weights),
                        millions(measure(reading(cfg, object_layers=6)).weights)]
    body = f"""Backbone = the 9 + 5 + 5 layers; weights = its weight matrices (no biases or norms), which the paper prints truncated
to the million; whole model with {WORDPIECES:,} WordPieces and {ANSWERS:,} answers. The paper's "d_f = 3156" or "6 vision layers"
would give {readings[0]} or {readings[1]} weights for 1x (docs/lxmert.md accounts for every figure).

| model | preset | paper | backbone | weights | whole model |
|---|---|---|---|---|---|
{chr(10).join(rows)}"""
    publish("LW-LXMERT parameters", body, args)


if __name__ == "__main__":
    main()
