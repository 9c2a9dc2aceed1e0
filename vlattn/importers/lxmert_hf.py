"""Import an LXMERT checkpoint (format ``lxmert-hf``) as a vlattn VQA run of kind ``lxmert``.

The source is a directory in Hugging Face's layout — ``config.json`` (``LxmertConfig``: heads, feature size,
token types; optional) and ``model.safetensors`` or ``pytorch_model.bin`` — or one weights file (``.safetensors``,
``.bin``, ``.pth``: the released code's ``BEST.pth`` or ``model_LXRT.pth``). Parameter names may be transformers'
(``lxmert.*``, ``answer_head.logit_fc.*``) or the released code's (``bert.*``, ``lxrt_encoder.model.bert.*``,
``logit_fc.*``), possibly behind ``module.`` (:mod:`vlattn.importers.lxmert_names`). The layer counts, widths
and vocabulary size are read from the tensors; heads from ``config.json`` (default 12, the released size).
The released pretraining heads (``cls.*``, ``obj_predict_head.*``) are dropped and listed in ``import.json``.

The answer classifier is required (a run of the ``vqa`` task answers questions): a checkpoint without one, an
encoder to fine-tune, is refused. Its labels come from ``--answers`` (a JSON list in label order, the released
``trainval_label2ans.json``, or an ``{answer: label}`` map) or else from ``config.json``'s ``id2label``. The
WordPiece vocabulary is ``--vocab`` (default ``SOURCE/vocab.txt``); its size must match the word table. A head
over two pooled vectors (the released NLVR2 model) sets ``model.options.images: 2``.

Variants: when the base config (``--config``) is an LXMERT-family model (kind ``lxmert`` or ``lxmert_catt``), the
imported model keeps its kind, attention sites, feed-forward and kind options, with the sizes read from the
checkpoint — LXMERT+CATT (``--config vqa-lxmert-catt``), LW-LXMERT (``--config vqa-lw-lxmert``). Such a model
loads every tensor whose name and shape fit and keeps its own initialisation (the builder's, drawn from
``train.seed``) for the rest: LXMERT+CATT's dictionaries, fusion, pooler under ``concat`` and unshared copies;
LW-LXMERT's group-wise projections (the embeddings, norms, dense merges, FFN expansions, pooler and head load).
``import.json`` lists the initialised parameters and the checkpoint tensors that did not fit. A dictionary to be
fitted by k-means cannot be (the import reads no data): the imported config says ``init: random``, its U(0, 0.01)
draw; ``vlattn catt dictionary`` and ``init: file`` give data-fitted entries to a fresh run instead.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from torch import Tensor

from vlattn.config import Config, config_from_dict, config_to_dict
from vlattn.data.vqa_answers import AnswerVocabulary
from vlattn.data.wordpiece import WordPieceVocabulary
from vlattn.errors import DataError
from vlattn.importers.lxmert_names import ENCODER_PREFIXES, HEAD_PREFIXES, head_names, parameter_names
from vlattn.importers.m2_official import Imported
from vlattn.importers.torchfile import load_state_dict
from vlattn.tasks import check_components

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
DROPPED_PREFIXES = ("cls.", "obj_predict_head.")  # pretraining heads
RUNTIME_BUFFERS = ("embeddings.position_ids",)
RELEASED = {"heads": 12, "token_types": 2, "dropout": 0.1}
LXMERT_KINDS = ("lxmert", "lxmert_catt")  # base kinds whose model section a variant import keeps
DICTIONARIES = ("image_dictionary", "word_dictionary")


def variant_model(base: dict[str, Any], read: dict[str, Any]) -> dict[str, Any]:
    """The base config's LXMERT-family model section with the sizes ``read`` from the checkpoint; dictionaries
    to be fitted by k-means become ``init: random`` (module docstring)."""
    options = {**base.get("options", {}), **read["options"]}
    for name in DICTIONARIES:
        if isinstance(options.get(name), dict) and options[name].get("init", "kmeans") == "kmeans":
            options[name] = {**options[name], "init": "random"}
    return {**base, **read, "kind": base["kind"], "options": options}


def weights_file(source: Path) -> Path:
    """The weights of ``source`` (a directory in transformers' layout, or a file)."""
    if source.is_dir():
        for name in WEIGHT_FILES:
            if (source / name).is_file():
                return source / name
        raise DataError(f"no {' or '.join(WEIGHT_FILES)} in the directory", path=source)
    if not source.is_file():
        raise DataError("checkpoint not found", path=source)
    return source


def read_tensors(path: Path) -> dict[str, Tensor]:
    """A safetensors file or a PyTorch file (read with ``weights_only``)."""
    if path.suffix != ".safetensors":
        return load_state_dict(path)
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except (SafetensorError, OSError) as err:
        raise DataError(f"not a readable safetensors file: {err}", path=path) from None


def read_hf_config(source: Path) -> dict[str, Any]:
    """``config.json`` beside the weights ({} if absent)."""
    file = (source if source.is_dir() else source.parent) / "config.json"
    if not file.is_file():
        return {}
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DataError(f"not a readable JSON file: {err}", path=file) from None
    if not isinstance(data, dict):
        raise DataError("expected a JSON object", path=file)
    return data


def split_state(state: dict[str, Tensor], source: Path) -> tuple[dict[str, Tensor], dict[str, Tensor], list[str]]:
    """The encoder's tensors (names below its prefix), the head's (below its prefix) and the dropped names."""
    encoder: dict[str, Tensor] = {}
    head: dict[str, Tensor] = {}
    dropped: list[str] = []
    for name, tensor in state.items():
        key = name.removeprefix("module.")
        if key.startswith(DROPPED_PREFIXES) or key.endswith(RUNTIME_BUFFERS):
            dropped.append(name)
            continue
        prefix = next((p for p in ENCODER_PREFIXES if key.startswith(p)), None)
        if prefix is not None:
            encoder[key[len(prefix):]] = tensor
            continue
        prefix = next((p for p in HEAD_PREFIXES if key.startswith(p)), None)
        if prefix is None:
            raise DataError("not an LXMERT parameter (expected an lxmert., bert., lxrt_encoder.model.bert., "
                            "answer_head. or logit_fc. name)", path=source, item=name)
        head[key[len(prefix):]] = tensor
    return encoder, head, dropped


def _count(state: dict[str, Tensor], pattern: str) -> int:
    found = {int(m.group(1)) for key in state if (m := re.match(pattern, key))}
    if found != set(range(len(found))):
        raise DataError(f"layers {sorted(found)} of {pattern!r} are not numbered 0..n-1")
    return len(found)


def _shape(state: dict[str, Tensor], key: str, dims: int, source: Path) -> tuple[int, ...]:
    if key not in state:
        raise DataError("missing parameter", path=source, item=key)
    if state[key].dim() != dims:
        raise DataError(f"expected a {dims}-d tensor, got shape {tuple(state[key].shape)}", path=source, item=key)
    return tuple(state[key].shape)


def read_answers(path: Path | None, hf_config: dict[str, Any], count: int, source: Path) -> AnswerVocabulary:
    """The head's labels in label order (see the module docstring)."""
    if path is not None:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise DataError(f"not a readable JSON file: {err}", path=path) from None
        if isinstance(data, dict):
            if not all(isinstance(v, int) for v in data.values()) or sorted(data.values()) != list(range(len(data))):
                raise DataError("expected {answer: label} with labels 0..n-1", path=path)
            data = sorted(data, key=data.__getitem__)
        if not isinstance(data, list) or not all(isinstance(a, str) for a in data):
            raise DataError("expected a JSON list of answers in label order", path=path)
        answers, where = data, path
    else:
        labels = hf_config.get("id2label") or {}
        answers = [labels.get(str(i), labels.get(i)) for i in range(len(labels))]
        if not answers or any(a is None or re.fullmatch(r"LABEL_\d+", str(a)) for a in answers):
            raise DataError("the checkpoint's config names no answers; give --answers (a JSON list in label order, "
                            "LXMERT's trainval_label2ans.json)", path=source)
        where = source
    if len(answers) != count:
        raise DataError(f"{len(answers)} answers for a head of {count} outputs", path=where)
    try:
        return AnswerVocabulary([str(a) for a in answers])
    except DataError as err:
        raise DataError(str(err), path=where) from None


def read_lxmert(
    checkpoint: str | Path, word_list: str | Path | None, *, heads: int | None = None, base: Config | None = None,
    answers: str | Path | None = None,
) -> Imported:
    """Read an LXMERT checkpoint and map it onto vlattn's :class:`~vlattn.models.lxmert.Lxmert`."""
    source = Path(checkpoint)
    file = weights_file(source)
    hf = read_hf_config(source)
    encoder, head, dropped = split_state(read_tensors(file), file)
    if not head:
        raise DataError("no answer classifier (answer_head.logit_fc.* or logit_fc.*): an encoder-only checkpoint "
                        "cannot answer questions", path=file)
    language = _count(encoder, r"encoder\.layer\.(\d+)\.")
    objects = _count(encoder, r"encoder\.r_layers\.(\d+)\.")
    cross = _count(encoder, r"encoder\.x_layers\.(\d+)\.")
    vocab_size, d = _shape(encoder, "embeddings.word_embeddings.weight", 2, file)
    max_positions, _ = _shape(encoder, "embeddings.position_embeddings.weight", 2, file)
    token_types, _ = _shape(encoder, "embeddings.token_type_embeddings.weight", 2, file)
    _, feature_dim = _shape(encoder, "encoder.visn_fc.visn_fc.weight", 2, file)
    ffn = next((k for k in sorted(encoder) if k.endswith(("intermediate.dense.weight", "_inter.dense.weight"))), None)
    d_ff = 4 * d if ffn is None else _shape(encoder, ffn, 2, file)[0]
    num_answers, _ = _shape(head, "3.weight", 2, file)
    head_in = _shape(head, "0.weight", 2, file)[1]
    if head_in % d or head_in // d not in (1, 2):
        raise DataError(f"an answer head over {head_in} inputs fits neither {d} nor {2 * d}", path=file, item="0.weight")
    words = WordPieceVocabulary.from_file(Path(word_list) if word_list is not None else
                                          (source if source.is_dir() else source.parent) / "vocab.txt")
    if len(words) != vocab_size:
        raise DataError(f"{len(words)} WordPiece entries for a word table of {vocab_size} rows",
                        path=word_list or source)
    state = {}
    for old, new in parameter_names(language, objects, cross).items():
        if old not in encoder:
            raise DataError("missing parameter", path=file, item=old)
        state[new] = encoder.pop(old)
    state.update({new: head.pop(old) for old, new in head_names().items() if old in head})
    leftover = sorted(encoder) + sorted(head)
    if leftover:
        raise DataError(f"unexpected parameter(s): {', '.join(leftover[:5])}", path=file)
    model = {
        "kind": "lxmert", "feature_dim": feature_dim, "d_model": d, "d_ff": d_ff,
        "num_heads": int(hf.get("num_attention_heads", heads or RELEASED["heads"])),
        "encoder_layers": language, "decoder_layers": cross, "max_positions": max_positions,
        "dropout": float(hf.get("hidden_dropout_prob", RELEASED["dropout"])),
        "attention_dropout": float(hf.get("attention_probs_dropout_prob", RELEASED["dropout"])),
        "options": {"object_layers": objects, "token_types": token_types, "images": head_in // d},
    }
    data = config_to_dict(base) if base is not None else {}
    variant = base is not None and base.model.kind in LXMERT_KINDS
    if variant:
        model = variant_model(data["model"], model)
    data.update(task="vqa", model=model)
    data.setdefault("data", {}).update(question_tokens="wordpiece")
    config = config_from_dict(data)
    check_components(config)  # checked as a loaded config is
    return Imported(config, words, state, None, dropped, answers=read_answers(
        Path(answers) if answers is not None else None, hf, num_answers, source),
        partial=variant)
