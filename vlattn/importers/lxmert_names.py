"""The parameter names of LXMERT's released code and of Hugging Face transformers' ``LxmertModel`` (the same
names below their prefixes), mapped to :class:`vlattn.models.lxmert.Lxmert`'s.

Prefixes of the encoder: ``lxmert.`` (transformers), ``bert.`` (the released pretraining model),
``lxrt_encoder.model.bert.`` (the released VQA, GQA and NLVR2 models), each possibly behind ``module.``
(``DataParallel``). The answer classifier is ``answer_head.logit_fc.{0,2,3}`` (transformers' question answering
model, the released pretraining model) or ``logit_fc.{0,2,3}`` (the released fine-tuned models).
"""

from __future__ import annotations

ENCODER_PREFIXES = ("lxmert.", "lxrt_encoder.model.bert.", "bert.")
HEAD_PREFIXES = ("answer_head.logit_fc.", "logit_fc.")

EMBEDDINGS = {"words.word", "words.position", "words.token_type"}  # modules without a bias

# one self-attention + feed-forward layer: released name -> vlattn name
_ATTENTION = {"query": "q_proj", "key": "k_proj", "value": "v_proj"}


def _attention(source: str, target: str, out_dense: str, out_norm: str, attn_norm: str) -> dict[str, str]:
    """The projections of one attention sub-layer and its residual LayerNorm."""
    names = {f"{source}.{old}": f"{target}.{new}" for old, new in _ATTENTION.items()}
    names[out_dense] = f"{target}.out_proj"
    names[out_norm] = attn_norm
    return names


def _stream_layer(source: str, target: str, *, attention: str, output: str, inter: str, ffn_output: str) -> dict[str, str]:
    """A BERT layer: ``attention`` (self-attention module with ``self``/``output``), ``inter``, ``ffn_output``."""
    names = _attention(f"{source}.{attention}.self", f"{target}.self_attn", f"{source}.{attention}.output.dense",
                       f"{source}.{attention}.output.LayerNorm", f"{target}.attn_norm.norm")
    names[f"{source}.{inter}.dense"] = f"{target}.ffn.fc1"
    names[f"{source}.{ffn_output}.dense"] = f"{target}.ffn.fc2"
    names[f"{source}.{ffn_output}.LayerNorm"] = f"{target}.ffn_norm.norm"
    return names


def module_names(language_layers: int, object_layers: int, cross_layers: int) -> dict[str, str]:
    """Released module name (below the encoder prefix) -> vlattn module name (below ``encoder.``); the
    parameters are each module's ``weight`` and ``bias``."""
    names = {
        "embeddings.word_embeddings": "words.word",
        "embeddings.position_embeddings": "words.position",
        "embeddings.token_type_embeddings": "words.token_type",
        "embeddings.LayerNorm": "words.norm",
        "encoder.visn_fc.visn_fc": "regions.feature_proj",
        "encoder.visn_fc.visn_layer_norm": "regions.feature_norm",
        "encoder.visn_fc.box_fc": "regions.box_proj",
        "encoder.visn_fc.box_layer_norm": "regions.box_norm",
        "pooler.dense": "pooler",
    }
    bert = dict(attention="attention", output="output", inter="intermediate", ffn_output="output")
    for i in range(language_layers):
        names.update(_stream_layer(f"encoder.layer.{i}", f"language_layers.{i}", **bert))
    for i in range(object_layers):
        names.update(_stream_layer(f"encoder.r_layers.{i}", f"object_layers.{i}", **bert))
    for i in range(cross_layers):
        source, target = f"encoder.x_layers.{i}", f"cross_layers.{i}"
        names.update(_attention(f"{source}.visual_attention.att", f"{target}.cross_attn",
                                f"{source}.visual_attention.output.dense", f"{source}.visual_attention.output.LayerNorm",
                                f"{target}.cross_norm.norm"))
        for stream, prefix in (("language", "lang"), ("vision", "visn")):
            names.update(_stream_layer(source, f"{target}.{stream}", attention=f"{prefix}_self_att", output="output",
                                       inter=f"{prefix}_inter", ffn_output=f"{prefix}_output"))
    return names


def parameter_names(language_layers: int, object_layers: int, cross_layers: int) -> dict[str, str]:
    """Released parameter name (below the encoder prefix) -> vlattn parameter name of the whole model."""
    return {
        f"{old}.{tensor}": f"encoder.{new}.{tensor}"
        for old, new in module_names(language_layers, object_layers, cross_layers).items()
        for tensor in (("weight",) if new in EMBEDDINGS else ("weight", "bias"))
    }


def head_names() -> dict[str, str]:
    """The answer classifier's parameters below a head prefix -> vlattn's ``head.*``."""
    return {f"{i}.{tensor}": f"head.{i}.{tensor}" for i in (0, 2, 3) for tensor in ("weight", "bias")}
