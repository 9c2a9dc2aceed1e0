"""Every difference between vlattn/presets/m2.yaml (the paper reading) and vlattn/presets/m2-official.yaml (the released
code's model and recipe), key by key with its reason, plus the differences of the released recipe that are not
config keys; written to benchmarks/PARAMETERS.md ("M2 presets: paper vs released recipe"). A key that differs
without a reason below is an error, so the table cannot fall behind the presets
(``tests/models/test_m2_official.py`` also checks the section against the presets).
"""

from __future__ import annotations

from typing import Any

from results import PARAMETERS, parse_args, publish

from vlattn.config import config_to_dict, load_config

PAPER, OFFICIAL = "m2", "m2-official"

# dotted key -> why the released code has the other value (file:line references are to the released repository)
REASONS = {
    "model.max_positions": "`MeshedDecoder(len(vocab), 54, ...)`: a 55-row position table (row 0 = padding)",
    "model.encoder_self_attention.options.init": "memory slots Xavier-uniform over (1, m, d), scaled at use by "
                                                 "sqrt(d_k) and sqrt(m) (the paper: N(0, 1/d_k), N(0, 1/m))",
    "model.options.residual": "an AddNorm per encoder level inside the shared `enc_att` module, no outer AddNorm; "
                              "no attention-weight or embedding dropout (`docs/m2-official.md`)",
    "model.options.positions": "`nn.Embedding.from_pretrained(sinusoids, freeze=True)`, then overwritten by the "
                               "model-wide Xavier pass: a frozen random table",
    "model.options.padding": "encoder mask `sum(LayerNorm(x)) == 0` (masks nothing once trained); pad tokens masked "
                             "in the decoder",
    "model.options.padded_regions": "`ImageDetectionsField(max_detections=50)` zero-pads every image to 50 regions",
    "model.options.init": "`Transformer.init_weights`: Xavier-uniform on every parameter with more than one dimension",
    "data.max_caption_len": "`TextField` without `fix_length`: captions are not truncated (53 words fill the table)",
    "train.epochs": "at most 100 epochs for XE + SCST together; each stage ends on patience",
    "train.patience": "XE ends after 5 epochs without a better validation CIDEr (then SCST starts from the best)",
    "train.schedule.options.epoch_offset": "`scheduler.step()` also at the start of every `train_xe` epoch, and "
                                           "`lambda_lr` adds 1 to the step: s = step + epoch + 2",
    "train.val_decoding": "validation CIDEr from beam search (beam 5, 20 words) with repeated words collapsed",
    "train.scst_adam_betas": "`Adam(model.parameters(), lr=5e-6)` for SCST: PyTorch's default betas",
    "train.scst_epochs": "at most the rest of the 100 epochs",
    "train.scst_patience": "SCST also ends after 5 epochs without a better validation CIDEr",
    "train.scst_batch_size": "`batch_size // 5` = 10 images per SCST batch, 5 beams each (50 sequences)",
    "train.scst_loss_normalise": "`-torch.mean(log_probs, -1) * (reward - reward_baseline)`: each beam's log-prob "
                                 "sum / 20 steps, then the mean over beams",
    "eval.collapse_repeats": "`' '.join(k for k, g in itertools.groupby(words))` before scoring (test.py, train.py)",
    "eval.cider_df_mode": "`Cider(PTBTokenizer.tokenize(ref_caps_train))`: one document per training caption",
}

NOT_KEYS = """Differences of the released recipe that are not config keys (and why they are left as they are):

- Tokenisation: the released code tokenises training captions with spaCy (punctuation removed) and scores with
  the PTB tokenizer; vlattn uses the Karpathy split file's tokens for vocabularies and rewards and the Python
  PTB tokenizer for validation (`vlattn eval` can use Java's). The vocabulary can differ by a few rare words.
- Data order and epoch length: the released XE loader drops the last incomplete batch (`drop_last=True`) and
  shuffles with its own RNG; vlattn keeps the last batch (one step more per epoch) and draws a seeded
  permutation per epoch (exactly resumable).
- Early stopping ties: the released code counts an equal validation CIDEr as an improvement (`>=`); vlattn needs
  a strictly better one (a tie of CIDEr-D floats across epochs does not happen in practice).
- Best checkpoint across stages: the released code keeps one best across XE and SCST (an SCST epoch must beat
  the best XE CIDEr to become best); vlattn's SCST run directory keeps its own best.
- Validation also decodes the test split every epoch in the released script (reporting only); vlattn does not.
- Decoding details that cannot matter for a trained model (exact score ties after a chosen pad token; `<pad>`,
  `<bos>` printed by the released `TextField.decode`): `docs/m2-official.md`, "Decoding".
- The vocabulary: both presets build it from the training and validation captions (supplementary A.1 and the
  released `build_vocab(train_dataset, val_dataset, min_freq=5)`)."""


def leaves(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted leaf keys of nested dicts (lists and scalars are leaves)."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            out.update(leaves(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def differences() -> dict[str, tuple[Any, Any]]:
    """Dotted key -> (paper value, official value) for every key whose values differ."""
    paper, official = (leaves(config_to_dict(load_config(path))) for path in (PAPER, OFFICIAL))
    keys = sorted(set(paper) | set(official))
    return {k: (paper.get(k), official.get(k)) for k in keys if paper.get(k) != official.get(k)}


def main() -> None:
    args = parse_args(__doc__, repeats=0)
    diff = differences()
    unexplained = sorted(set(diff) - set(REASONS))
    if unexplained:
        raise SystemExit(f"no reason given for the differing keys {unexplained}")
    rows = "\n".join(f"| `{key}` | `{paper}` | `{official}` | {REASONS[key]} |" for key, (paper, official) in diff.items())
    body = f"""`{PAPER}` (the paper's reading) against `{OFFICIAL}` (the released `train.py --batch_size 50 --m 40
--head 8 --warmup 10000` and `test.py`); every other key is equal. The model options are explained in
`docs/m2-official.md`; "M2 official vs released code" above shows what each model option changes on the same
weights.

| key | m2.yaml | m2-official.yaml | released code |
|---|---|---|---|
{rows}

{NOT_KEYS}"""
    publish("M2 presets: paper vs released recipe", body, args, PARAMETERS)


if __name__ == "__main__":
    main()
