"""Trainable parameters of Transformer+CATT (vlattn/presets/catt.yaml), MCAN+CATT (vlattn/presets/vqa-catt.yaml),
LXMERT+CATT (vlattn/presets/vqa-lxmert-catt.yaml) and BUTD+CATT (vlattn/presets/updown-catt.yaml) beside the model without CATT of the same shape (for BUTD+CATT: vlattn/presets/updown.yaml),
with the increment split into its parts, against the CATT paper's statement
(supplementary Sec. 9: with IS-ATT and CS-ATT sharing their parameters, "the increments of the trainable parameters
only come from the global image and word embedding dictionaries"; the paper gives no totals). Written to
benchmarks/RESULTS.md ("## CATT parameters"). Built on the meta device (no weights allocated).
"""

from __future__ import annotations

from dataclasses import replace

import torch
from results import parse_args, publish
from torch import nn

from vlattn.config import ModelConfig, load_config
from vlattn.models import build_captioner, build_vqa_model

WORDS, ANSWERS = 10201, 3129  # COCO Karpathy vocabulary (words seen >= 5 times); VQA v2 candidate answers
CATT_OPTIONS = ("image_dictionary", "word_dictionary", "share", "fusion", "dictionary_space", "cross_queries",
                "chain_cross")
WORDPIECES = 30522  # LXMERT's bert-base-uncased vocabulary
VARIANTS = {  # row -> options over the preset's
    "shared, concat (paper)": {},
    "shared, concat_linear (released code's fc)": {"fusion": "concat_linear"},
    "w/o Share, concat": {"share": False},
}
BUTD_VARIANTS = {  # row -> options of the top-down site's catt_additive over vlattn/presets/updown-catt.yaml's
    "unshared, concat (vlattn/presets/updown-catt.yaml)": {},
    "shared, concat": {"share": True},
    "unshared, concat_linear": {"fusion": "concat_linear"},
}
SECOND_STREAM = ("cross_sample", "cross_encoder", "cross_decoder",  # the CS stream's own layers (w/o Share)
                 "cs_language_layers", "cs_object_layers", "cs_cross_layers")


def count(model: nn.Module, keep=lambda name: True) -> int:
    return sum(p.numel() for name, p in model.named_parameters() if keep(name))


def build(cfg: ModelConfig) -> nn.Module:
    with torch.device("meta"):
        if cfg.kind in ("catt", "transformer", "updown"):
            return build_captioner(cfg, WORDS)
        return build_vqa_model(cfg, WORDPIECES if cfg.kind.startswith("lxmert") else WORDS, ANSWERS)


def baseline(cfg: ModelConfig) -> ModelConfig:
    """The model without CATT: the Transformer of the same shape, or MCAN with MCAN's options."""
    kind = {"catt": "transformer", "mcan_catt": "mcan", "lxmert_catt": "lxmert"}[cfg.kind]
    options = {} if kind == "transformer" else {k: v for k, v in cfg.options.items() if k not in CATT_OPTIONS}
    return replace(cfg, kind=kind, options=options)


def row(name: str, cfg: ModelConfig, base_cfg: ModelConfig | None = None) -> str:
    """| model | base | +CATT | increment | dictionaries | reader | CS layers |: increment = the three parts; the base
    is ``base_cfg`` or :func:`baseline`."""
    model, base = build(cfg), build(base_cfg or baseline(cfg))
    total, reference = count(model), count(base)
    dictionaries = count(model, lambda n: "dictionary" in n)
    layers = count(model, lambda n: any(part in n.split(".") for part in SECOND_STREAM))
    predictor = total - reference - dictionaries - layers
    return (f"| {name} | {reference:,} | {total:,} | +{total - reference:,} | {dictionaries:,} | {predictor:,} | "
            f"{layers:,} |")


def main() -> None:
    args = parse_args(__doc__, repeats=0)
    rows = []
    for preset, label in (("catt", "Transformer+CATT 6+6, d=512"),
                          ("vqa-catt", "MCAN+CATT (MCAN-small)")):
        cfg = load_config(preset).model
        for variant, options in VARIANTS.items():
            rows.append(row(f"{label}, {variant}", replace(cfg, options={**cfg.options, **options})))
    lxmert = load_config("vqa-lxmert-catt").model
    for variant, options in VARIANTS.items():
        rows.append(row(f"LXMERT+CATT 9+5+5, d=768, {variant}", replace(lxmert, options={**lxmert.options, **options})))
    rows.append(row("LXMERT+CATT, the released code's options (vlattn/presets/vqa-lxmert-catt-official.yaml)",
                    load_config("vqa-lxmert-catt-official").model))
    butd, updown = load_config("updown-catt").model, load_config("updown").model
    site = butd.decoder_cross_attention
    for variant, options in BUTD_VARIANTS.items():
        top_down = replace(site, options={**site.options, **options})
        rows.append(row(f"BUTD+CATT, LSTMs 1024, D#1000, {variant}", replace(butd, decoder_cross_attention=top_down),
                        updown))
    body = f"""Trainable parameters with {WORDS:,} words (COCO Karpathy, words seen >= 5 times), {ANSWERS:,} VQA answers,
2048-d regions, dictionaries of 500 entries each for the Transformer and MCAN (the paper's setting) and one image
dictionary of 1000 entries for BUTD (supplementary Sec. 9). "base" is the same model without CATT (`kind:
transformer` of the same shape; `kind: mcan` with MCAN's options; vlattn/presets/updown.yaml, the same Up-Down with
additive top-down attention). The increment is split into the dictionaries, the widening of what reads [Z^; X^]
("reader": the word classifier, the answer classifier, BUTD's language LSTM) and the cross-sample stream's own
layers; the three parts add up to the increment exactly.

| model | base | +CATT | increment | dictionaries | reader | CS layers |
|---|---|---|---|---|---|---|
{chr(10).join(rows)}

The paper (supplementary Sec. 9) states that with shared parameters the increments "only come from the global
image and word embedding dictionaries": 500 x 2048 (image, in the RoI feature space) + 500 x 512 (word, in the
512-d word-embedding space) = 1,280,000 for the captioner, which is our dictionaries column. Every other
parameter of the increment is accounted for:

- reader, `concat` (the paper's reading of Fig. 5, "concatenated and input into the final predictor"): the
  classifier reads [Z^; X^], so its weight doubles its input side: +{WORDS:,} x 512 = {WORDS * 512:,} for the
  captioner, +{ANSWERS:,} x 1024 = {ANSWERS * 1024:,} for MCAN+CATT (MCAN's fused vector is 1024-d). The paper's
  statement leaves this out; a predictor that reads a concatenation cannot avoid it.
- reader, `concat_linear` (the released LXMERT+CATT code's `fc` over the concatenation): a Linear(2w -> w)
  before an unchanged classifier, 2 x 512 x 512 + 512 = 524,800 (captioner) and 2 x 1024 x 1024 + 1024 =
  2,098,176 (MCAN+CATT).
- MCAN+CATT's word dictionary lives in MCAN's 300-d word-embedding space (500 x 300, entered through the
  question LSTM), its image dictionary in the 2048-d region space.
- `w/o Share` (Table 6) adds a second copy of every encoder and decoder layer (the CS layers column).
- LXMERT+CATT (base: LXMERT of vlattn/presets/vqa-lxmert.yaml, {WORDPIECES:,} WordPieces): the dictionaries 500 x
  2048 (image, region-feature space) + 500 x 768 (word, WordPiece-embedding space) = {500 * 2048 + 500 * 768:,}; the
  reader is the pooler, Linear(2 x 768 -> 768) over [Z^; X^] under `concat` (+768 x 768 = {768 * 768:,}; the heads
  read the pooled vector, unchanged), or the released `fc_lang` and `fc_visn`, 2 x (2 x 768 x 768 + 768) =
  {2 * (2 * 768 * 768 + 768):,}, under `concat_linear`; the released options keep both dictionaries in the 768-d
  hidden space (2 x 500 x 768).
- BUTD+CATT (vlattn/presets/updown-catt.yaml beside vlattn/presets/updown.yaml): the image dictionary 1000 x 2048 =
  {1000 * 2048:,}; the language LSTM reads [Z^; X^; h^1] instead of [v^; h^1], so its input weights widen by one
  2048-d vector: 4 x 1024 x 2048 = {4 * 1024 * 2048:,} (the reader column); unshared (our reading, docs/catt.md),
  CS-ATT has its own Eq. 23 layers W_k (2048 -> 512), W_q (1024 -> 512) and w (512 -> 1), with biases:
  {2048 * 512 + 512 + 1024 * 512 + 512 + 512 + 1:,} (the CS layers column). Shared, the dictionary and the
  widening are the whole increment; `concat_linear` replaces the widening by a Linear(2 x 2048 -> 2048) before
  an unchanged language LSTM, {2 * 2048 * 2048 + 2048:,}. The paper gives no BUTD+CATT totals and states no
  parameter count for it.
"""
    publish("CATT parameters", body, args)


if __name__ == "__main__":
    main()
