"""Trainable parameters of SAN, N-SAN, G-SAN and NG-SAN (vlattn/presets/san.yaml, n-san.yaml, g-san.yaml, ng-san.yaml)
with the 9487-word COCO vocabulary and 2048-d regions, beside NG-SAN's Tables 1, 4 and 6; written
to benchmarks/RESULTS.md ("## NG-SAN parameters"). Models are built on the meta device (no weights allocated);
the counts are those ``vlattn profile --vocab-size 9487`` prints.
"""

from __future__ import annotations

import dataclasses

import torch
from results import parse_args, publish

from vlattn.config import ModelConfig, Spec, load_config
from vlattn.models import build_captioner, build_vqa_model
from vlattn.models.profile import trainable

VOCAB = 9487
TABLE_1 = {1: "18.1M", 2: "25.5M", 4: "40.2M", 6: "54.9M"}  # SAN and N-SAN alike
TABLE_4 = {  # GSA variants at L = 4 (Table 4), N-SAN and NG-SAN (Table 6)
    "SAN": ("san", {}, "40.2M"),
    "absolute": ("san", {"box_encoding": "sinusoidal"}, "40.2M"),
    "content-independent": ("g-san", {"phi": ["content_independent"]}, "40.2M"),
    "key-dependent": ("g-san", {"phi": ["key_dependent"]}, "41.5M"),
    "query-dependent (G-SAN)": ("g-san", {}, "41.5M"),
    "N-SAN": ("n-san", {}, "40.2M"),
    "NG-SAN": ("ng-san", {}, "41.5M"),
}


def preset(name: str) -> ModelConfig:
    return load_config(name).model


def count(cfg: ModelConfig) -> int:
    with torch.device("meta"):
        return trainable(build_captioner(cfg, VOCAB))


def variant(name: str, changes: dict) -> ModelConfig:
    """Preset ``name`` with ``box_encoding`` or encoder-attention options replaced."""
    cfg = preset(name)
    if "box_encoding" in changes:
        return dataclasses.replace(cfg, box_encoding=changes["box_encoding"])
    attention = cfg.encoder_self_attention
    return dataclasses.replace(cfg, encoder_self_attention=Spec(attention.name, {**attention.options, **changes}))


def geometric_parts(cfg: ModelConfig) -> dict[str, int]:
    """Parameters of the geometric-bias modules by part, summed over the encoder layers."""
    with torch.device("meta"):
        model = build_captioner(cfg, VOCAB)
    parts: dict[str, int] = {}
    for name, parameter in model.named_parameters():
        if ".geometric_bias." in name:
            part = name.split(".geometric_bias.")[1]
            parts[part] = parts.get(part, 0) + parameter.numel()
    return parts


def mcan_backbone(preset_name: str) -> int:
    """Trainable parameters of the co-attention backbone of a VQA preset (the word and answer counts do not
    enter it)."""
    with torch.device("meta"):
        return trainable(build_vqa_model(preset(preset_name), 100, 3129).backbone)


def main() -> None:
    args = parse_args(__doc__, repeats=0)
    rows = []
    for layers, paper in TABLE_1.items():
        counts = [count(dataclasses.replace(preset(name), encoder_layers=layers, decoder_layers=layers)) for name in ("san", "n-san")]
        rows.append(f"| {layers} | {counts[0]:,} | {counts[1]:,} | {counts[1] - counts[0]:+,} | {paper} |")
    san = count(preset("san"))
    variants = []
    for label, (name, changes, paper) in TABLE_4.items():
        total = count(variant(name, changes))
        variants.append(f"| {label} | {total:,} | {total - san:+,} | {total / 1e6:.1f}M | {paper} |")
    query = geometric_parts(preset("g-san"))
    content = geometric_parts(variant("g-san", {"phi": ["content_independent"]}))
    d_g80 = count(variant("g-san", {"d_g": 80}))
    with torch.device("meta"):
        model = build_captioner(preset("san"), VOCAB)
    encoder_layer, decoder_layer = trainable(model.encoder.layers[0]), trainable(model.decoder.layers[0])
    per_layer_content = sum(content.values()) // 4
    mcan, mcan_gsa = mcan_backbone("vqa-mcan"), mcan_backbone("vqa-mcan-gsa")
    body = f"""Vocabulary {VOCAB}, 2048-d regions, d=512, 8 heads, FFN 2048, untied output layer with bias (the presets);
trainable parameters counted on models built on the meta device — the totals `vlattn profile --config
<preset> --vocab-size 9487` prints.

Table 1 (L encoder + L decoder layers):

| L | SAN | N-SAN | N-SAN - SAN | paper (both) |
|---|---|---|---|---|
{chr(10).join(rows)}

Table 4 and Table 6 (L = 4):

| model | ours | - SAN | ours rounded | paper |
|---|---|---|---|---|
{chr(10).join(variants)}

Accounting for the differences:

- **SAN** matches Table 1 at every L. Per layer pair: encoder layer {encoder_layer:,} (4 projections of
  512 x 512 + 512, FFN 2,099,712, two LayerNorms) + decoder layer {decoder_layer:,} (two attentions) =
  {encoder_layer + decoder_layer:,}, the paper's 7.35-7.4M step between rows. The fixed part at L = 1 is the region projection 2048 x 512 + 512 (+ a
  1,024-parameter LayerNorm after it, shared with the M2 encoder; the paper's "dense layer + ReLU" has none),
  the word embedding 9487 x 512 and the output layer 512 x 9487 + 9487. Without the input LayerNorm every
  total is 1,024 lower and rounds the same.
- **N-SAN** has no parameters of its own (Sec. 5.4). Ours is 512 lower per encoder layer: the bias of the
  query projection is dropped because instance normalisation subtracts every channel's mean and cancels it
  exactly (vlattn/attention/nsa.py); Table 1 prints equal counts at 0.1M precision, as ours round.
- **absolute**: sinusoidal, no parameters, as Table 4 prints.
- **content-independent**: + {sum(content.values()):,} = 4 layers x {per_layer_content:,} (FC 4 -> 64 with bias, 320, Eq. 9;
  w_g of 8 heads x 64, 512, Eq. 11). Sec. 5.4's "about 2k additional parameters" is of the order of this
  variant (with one w_g shared by the heads it would be 4 x 384 = 1,536), not of the query-dependent NG-SAN
  it is written about (Table 6: 41.5M = 1.3M more than SAN).
- **query-/key-dependent**: + {sum(query.values()):,} = 4 layers x {sum(query.values()) // 4:,} (FC 320 + W_Q' or W_K'
  512 x 512 + 512 = 262,656): the per-head geometric queries (8 heads x d_g = 64) cost one d x d projection
  per layer. The paper's 41.5M is 1.25M-1.35M above SAN (given its rounding), ours 1.05M (NG-SAN 41.2M, as
  N-SAN's dropped biases come off too): 0.2M-0.3M are not explained by anything the paper describes. It gives
  neither d_g nor the exact form of the projections; a per-head d_g of 80 (W_Q' 512 x 640) would give
  {d_g80:,} ({d_g80 / 1e6:.1f}M), but nothing in the paper says so, and we keep d_g = d / heads = 64
  (option `d_g`).
- Parts of the query-dependent geometric bias over the 4 layers: {', '.join(f'`{k}` {v:,}' for k, v in query.items())}.

Table 9 (VQA, MCAN + GSA; the paper prints no parameter count for it): the MCAN-small backbone of
vlattn/presets/vqa-mcan.yaml has {mcan:,} parameters, that of vlattn/presets/vqa-mcan-gsa.yaml (query-dependent GSA in the 6
image self-attention layers) {mcan_gsa:,}: + {mcan_gsa - mcan:,} = 6 x {(mcan_gsa - mcan) // 6:,}, the same geometric bias per
layer as in G-SAN's encoder."""
    publish("NG-SAN parameters", body, args)


if __name__ == "__main__":
    main()
