"""Trainable parameters of the twin-stream SLA model in the SLA paper's Table 1 setup (vlattn/presets/vqa-sla.yaml) and
of its stacked-attention baseline (vlattn/presets/vqa-stacked.yaml), by component, with the same vocabulary sizes as
"MCAN parameters"; written to benchmarks/PARAMETERS.md ("## Twin-stream SLA parameters"). Components group
parameter names with unit indices collapsed to ``*``.
"""

from __future__ import annotations

from collections import Counter

import torch
from params_m2 import components
from results import PARAMETERS, parse_args, publish

from vlattn.config import load_config
from vlattn.models import build_vqa_model
from vlattn.models.profile import backbone_parameters, count_parameters

WORDS, ANSWERS = 10201, 3129
PRESETS = {"twin-stream SLA": "vqa-sla", "twin-stream stacked": "vqa-stacked"}


def main() -> None:
    args = parse_args(__doc__, repeats=0)
    measured = {}
    for name, config in PRESETS.items():
        with torch.device("meta"):
            model = build_vqa_model(load_config(config).model, WORDS, ANSWERS)
        parts = Counter()
        for part, count in components(model).items():  # the bi-LSTM's eight tensors as one component
            parts["question.lstm" if part.startswith("question.lstm") else part] += count
        measured[name] = (parts, count_parameters(model), backbone_parameters(model))
    names = list(measured)
    parts = sorted(set().union(*(measured[n][0] for n in names)))
    rows = "\n".join(f"| `{part}` | " + " | ".join(f"{measured[n][0].get(part, 0):,}" for n in names) + " |"
                     for part in parts)
    totals = "\n".join(f"| **{key}** | " + " | ".join(f"{measured[n][1][key]:,}" for n in names) + " |"
                       for key in [*(k for k in measured[names[0]][1] if k != "total"), "total"])
    backbone = " and ".join(f"{measured[n][2]:,} ({n})" for n in names)
    body = f"""Trainable parameters (`count_parameters`) with {WORDS:,} question words and {ANSWERS:,} candidate answers (only
the word embedding and the classifier depend on these): 2048-d grid cells (196 of them: the positional bias's FC
has one output per cell), 300-d words, bi-LSTM 512 per direction, T = 3 units per stream of hidden size m = 1024,
fusion width 1024. The attention streams (units, positional bias, readout; `backbone_layers()`, what `vlattn profile`
reports as the backbone) hold {backbone} parameters.

| component | {' | '.join(names)} |
|---|{'---|' * len(names)}
{rows}
{totals}

The SLA paper reports no parameter count (and no other source we have does): there is no published figure to
set these beside. Every term follows from the paper's formulas with the choices listed in
vlattn/attention/sla.py and vlattn/models/twin_stream.py, and tests/models/test_twin_stream.py recomputes both
totals by hand. The SLA streams' extra parameters over the stacked ones: W_z of every unit (on v and b_pos for
unit 1, on s^(t-1) and a^(t-1) for later units), the positional bias FC (visual stream only) and the readout's
1x1 convolution over the m + D channels of z^(T) (the stacked streams map a^(T) alone)."""
    publish("Twin-stream SLA parameters", body, args, PARAMETERS)


if __name__ == "__main__":
    main()
