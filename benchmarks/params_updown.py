"""Trainable parameters of the Up-Down captioner (vlattn/presets/updown.yaml: LSTMs 1024, word embedding 1024, attention
512, 2048-d regions) at the self-critical.pytorch COCO vocabulary (9,487 words, UNK included), beside the
self-critical.pytorch UpDownModel with the same sizes and the authors' released Caffe net, both counted from their
layer definitions; written to benchmarks/RESULTS.md ("## Up-Down parameters").

The reference counts are arithmetic over the layer shapes of self-critical.pytorch's ``captioning/models/AttModel.py``
(``AttModel.__init__``, ``UpDownCore``, ``Attention``) and of peteanderson80/Up-Down-Captioner's
``scripts/create_caption_lstm.py`` (layers ``embedding``, ``fc``, ``hidden_att``, ``predict_att``, ``lstm0``,
``lstm1``, ``predict``); no code of either is imported or copied.
"""

from __future__ import annotations

import dataclasses

import torch
from results import parse_args, publish

from vlattn.config import load_config
from vlattn.models import build_captioner
from vlattn.models.profile import trainable

WORDS = 9487  # self-critical.pytorch's COCO vocabulary (cocotalk.json), UNK included
OURS = WORDS + 3  # + PAD, BOS, EOS (UNK is one of the words)
THEIRS = WORDS + 1  # row 0: BOS, EOS and padding at once


def linear(inputs: int, outputs: int, bias: bool = True) -> int:
    return inputs * outputs + (outputs if bias else 0)


def lstm_cell(inputs: int, hidden: int, biases: int = 2) -> int:
    """An LSTM cell: input and recurrent weights (4 gates) and ``biases`` bias vectors of 4 * hidden."""
    return 4 * hidden * (inputs + hidden) + biases * 4 * hidden


def self_critical(rows: int, embed: int, hidden: int, attention: int, features: int) -> dict[str, int]:
    """self-critical.pytorch UpDownModel, layer by layer (use_bn 0, logit_layers 1)."""
    return {
        "embed.0 (Embedding)": rows * embed,
        "fc_embed.0 (pooled feature)": linear(features, hidden),
        "att_embed.0 (regions)": linear(features, hidden),
        "ctx2att (W_va)": linear(hidden, attention),
        "core.attention.h2att (W_ha)": linear(hidden, attention),
        "core.attention.alpha_net (w_a)": linear(attention, 1),
        "core.att_lstm": lstm_cell(embed + 2 * hidden, hidden),
        "core.lang_lstm": lstm_cell(2 * hidden, hidden),
        "logit": linear(hidden, rows),
    }


def caffe(rows: int, hidden: int, attention: int, features: int) -> dict[str, int]:
    """The released Caffe net (word embedding of the LSTM size, no biases in the embedding and attention layers,
    LSTMNode: one weight over [input, own previous hidden] and one bias)."""
    return {
        "embedding": rows * hidden,
        "fc (W_va)": linear(features, attention, bias=False),
        "hidden_att (W_ha)": linear(hidden, attention, bias=False),
        "predict_att (w_a)": linear(attention, 1, bias=False),
        "lstm0 ([word, pooled, h2] + h1)": lstm_cell(hidden + features + hidden, hidden, biases=1),
        "lstm1 ([h1, attended] + h2)": lstm_cell(hidden + features, hidden, biases=1),
        "predict": linear(hidden, rows),
    }


# our component -> its self-critical.pytorch counterpart(s)
PAIRS = [
    ("embed", ["embed.0 (Embedding)"]),
    ("pooled_input", ["fc_embed.0 (pooled feature)"]),
    ("region_input", ["att_embed.0 (regions)"]),
    ("attention.key_proj", ["ctx2att (W_va)"]),
    ("attention.query_proj", ["core.attention.h2att (W_ha)"]),
    ("attention.score", ["core.attention.alpha_net (w_a)"]),
    ("attention_lstm", ["core.att_lstm"]),
    ("language_lstm", ["core.lang_lstm"]),
    ("output", ["logit"]),
]


def components(model: torch.nn.Module) -> dict[str, int]:
    """Trainable parameters per component of :data:`PAIRS`."""
    counts = dict.fromkeys((ours for ours, _ in PAIRS), 0)
    for name, parameter in model.named_parameters():
        key = next(ours for ours, _ in PAIRS if name.startswith(ours + "."))
        counts[key] += parameter.numel()
    return counts


def main() -> None:
    args = parse_args(__doc__, repeats=0)
    cfg = load_config("updown").model
    hidden, embed = cfg.d_model, cfg.options["embed_dim"]
    attention, features = cfg.options["attention_dim"], cfg.feature_dim
    with torch.device("meta"):
        paper = build_captioner(cfg, OURS)
        variant = dataclasses.replace(cfg, options={**cfg.options, "variant": "self_critical"})
        ours_sc = build_captioner(variant, THEIRS)
        ours_caffe_rows = build_captioner(cfg, THEIRS)
    ours, theirs = components(paper), self_critical(THEIRS, embed, hidden, attention, features)
    released = caffe(THEIRS, hidden, attention, features)
    rows = []
    for name, refs in PAIRS:
        their = sum(theirs[ref] for ref in refs)
        label = f"`{name}`" if ours[name] else "(none)"
        rows.append(f"| {label} | {ours[name]:,} | `{', '.join(refs)}` | {their:,} | {ours[name] - their:+,} |")
    total_ours, total_theirs = trainable(paper), sum(theirs.values())
    pooled_extra = 4 * hidden * (features - hidden)
    sc_exact = trainable(ours_sc) == total_theirs
    caffe_gap = trainable(ours_caffe_rows) - sum(released.values())
    body = f"""vlattn/presets/updown.yaml (kind `updown`, variant `paper`: LSTMs M = {hidden}, word embedding E = {embed},
attention H = {attention}, D = {features}-d regions), vocabulary: self-critical.pytorch's {WORDS:,} COCO words (UNK
included) = {OURS:,} rows here (+ PAD, BOS, EOS) and {THEIRS:,} there (row 0 is BOS, EOS and padding). The reference
columns are counted from the layer definitions of self-critical.pytorch's `captioning/models/AttModel.py`
(`UpDownModel`: `AttModel.__init__`, `UpDownCore`, `Attention`) at the same sizes (`rnn_size` = `input_encoding_size`
= {hidden}, `att_hid_size` = {attention}; its COCO config uses 1000) — `vlattn` imports no code from it.

| ours | parameters | self-critical.pytorch | parameters | difference |
|---|---|---|---|---|
{chr(10).join(rows)}
| **total** | **{total_ours:,}** | | **{total_theirs:,}** | **{total_ours - total_theirs:+,}** |

Every difference:

- `embed`, `output`: {OURS - THEIRS} more vocabulary rows ((E + M + 1) x 2 = {(embed + hidden + 1) * (OURS - THEIRS):,}):
  separate PAD/BOS/EOS where self-critical.pytorch shares row 0.
- `fc_embed`, `att_embed` ({2 * linear(features, hidden):,}): self-critical.pytorch embeds the pooled feature and
  every region (Linear D -> M + ReLU + dropout) before the LSTM and the attention; the paper (Eq. 2-6) and the
  authors' Caffe code use the raw {features}-d features.
- Hence the attention's key projection reads D = {features} instead of M = {hidden} (+{(features - hidden) * attention:,}),
  and each LSTM reads the raw D-d pooled (attention LSTM) or attended (language LSTM) feature instead of an M-d
  one: +4M x (D - M) = +{pooled_extra:,} per LSTM.
- Net: {total_ours - total_theirs:+,} = {(embed + hidden + 1) * (OURS - THEIRS):,} + {(features - hidden) * attention:,}
  + 2 x {pooled_extra:,} - {2 * linear(features, hidden):,}.

Cross-checks:

- `options.variant: self_critical` (embedded regions and pooled feature, ReLU + dropout after the word embedding) at
  the same {THEIRS:,} rows: {trainable(ours_sc):,} parameters, {'exactly' if sc_exact else 'NOT'} the self-critical.pytorch
  count {total_theirs:,}.
- The authors' released Caffe net (peteanderson80/Up-Down-Captioner, `scripts/create_caption_lstm.py`) at
  {THEIRS:,} rows has {sum(released.values()):,}; ours (paper variant, same rows) has {caffe_gap:+,} more: torch's `LSTMCell` keeps two
  bias vectors per cell where Caffe's LSTM has one (2 x 4M = {8 * hidden:,}) and the registry's additive attention has
  biases in W_va and W_ha where Caffe has none ({2 * attention:,}; w_a has none, as in Eq. 3); the layer structure is
  otherwise the same."""
    publish("Up-Down parameters", body, args)


if __name__ == "__main__":
    main()
