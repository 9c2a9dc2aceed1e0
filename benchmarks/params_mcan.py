"""Trainable parameters and backbone multiply-adds of MCAN-small (vlattn/presets/vqa-mcan.yaml) and MCAN-large
(vlattn/presets/vqa-mcan-large.yaml) by component, against the LW-Transformer paper's Table II "Transformer" row
(the MCAN 6+6 backbone: 44.1M parameters, 2.58G MAdds); written to benchmarks/PARAMETERS.md ("## MCAN
parameters"). Components group parameter names with layer indices collapsed to ``*``. ``--quick``: the small
model only.
"""

from __future__ import annotations

import torch
from params_m2 import components
from results import PARAMETERS, parse_args, publish

from vlattn.config import load_config
from vlattn.models import build_vqa_model
from vlattn.models.profile import backbone_madds_of, backbone_parameters, count_parameters
from vlattn.tasks.base import ProfileShapes
from vlattn.tasks.vqa import VQA, vqa_batch

WORDS, ANSWERS = 10201, 3129
PRESETS = {"MCAN-small": "vqa-mcan", "MCAN-large": "vqa-mcan-large"}


def measure(config: str) -> tuple[dict, dict, dict]:
    """Components, top-level counts and the backbone report (one question, 100 regions, 14 words)."""
    cfg = load_config(config)
    torch.manual_seed(0)
    model = build_vqa_model(cfg.model, WORDS, ANSWERS).eval()
    shapes = VQA.profile_shapes
    single = vqa_batch(ProfileShapes(1, shapes.default_regions, shapes.length, WORDS, 1, ANSWERS), cfg.model.feature_dim)
    backbone = {"parameters": backbone_parameters(model), "madds": backbone_madds_of(model, lambda: model(single))}
    return components(model), count_parameters(model), backbone


def main() -> None:
    args = parse_args(__doc__, repeats=0)
    torch.set_num_threads(1)
    presets = dict(list(PRESETS.items())[:1]) if args.quick else PRESETS
    measured = {name: measure(config) for name, config in presets.items()}
    names = list(measured)
    parts = sorted(measured[names[0]][0])
    rows = "\n".join(f"| `{part}` | " + " | ".join(f"{measured[n][0][part]:,}" for n in names) + " |" for part in parts)
    tops = [key for key in measured[names[0]][1] if key != "total"]
    totals = "\n".join(f"| **{key}** | " + " | ".join(f"{measured[n][1][key]:,}" for n in names) + " |"
                       for key in [*tops, "total"])
    backbone = "\n".join(f"| {n} | {measured[n][2]['parameters']:,} | {measured[n][2]['madds'] / 1e9:.3f} G |" for n in names)
    small = measured["MCAN-small"][2]
    body = f"""Trainable parameters (`count_parameters`) of the presets with {WORDS:,} question words and {ANSWERS:,}
candidate answers (only the word embedding and the classifier depend on these), 2048-d regions. Backbone: the
6 encoder (question self-attention) + 6 decoder (image self-attention, question-guided attention) layers
(`MCAN.backbone_layers()`); MAdds = FLOPs / 2 of those layers in one forward pass of one question with 100
regions and 14 words (MCAN's padding sizes), attention products included.

| component | {' | '.join(names)} |
|---|{'---|' * len(names)}
{rows}
{totals}

| backbone | parameters | MAdds per question |
|---|---|---|
{backbone}
| LW-Transformer paper, Table II, "Transformer" (MCAN-small) | 44.1M | 2.58G |

- MCAN-small backbone {small['parameters']:,} = 6 x 3,152,384 (SA: 4 x 262,656 attention, 2,099,712 FFN,
  2 x 1,024 LayerNorm) + 6 x 4,204,032 (SGA: two attentions, FFN, three LayerNorms): the paper's 44.1M.
- MAdds {small['madds'] / 1e9:.3f} G: the projections and FFNs over 14 words (6 layers) and 100 regions
  (6 layers, plus the guided attention's key/value projections of the 14 words), and the attention products
  (14 x 14, 100 x 100, 100 x 14 per head): the paper's 2.58G to the digits it gives, consistent with its count
  being one question at MCAN's padding sizes (the paper does not state the shapes).
- The rest of MCAN-small: question encoder (embedding {WORDS:,} x 300 + LSTM(300 -> 512) 1,667,072), region
  projection 2048 x 512 + 512, two attentional reductions (512 -> 512 -> 1 glimpse, merge 512 -> 1024), the fusion
  LayerNorm and the classifier 1024 x {ANSWERS:,} + {ANSWERS:,}."""
    publish("MCAN parameters", body, args, PARAMETERS)


if __name__ == "__main__":
    main()
