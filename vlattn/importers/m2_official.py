"""Import a checkpoint of the released M2 code (aimagelab/meshed-memory-transformer, the
``Transformer(MemoryAugmentedEncoder, MeshedDecoder)`` of its ``train.py``/``test.py``) as a vlattn M2.

The architecture is read from the tensors (layers, d, d_ff, region size, memory slots, vocabulary, position
rows); the number of heads cannot be (the projections are d x d whatever the split) and defaults to the
released 8. The imported config selects every ``official`` option of :mod:`vlattn.models.m2` (residual
placement, frozen position table, padding rules, initialisation), so the imported model computes what the
released one computes (``tests/models/test_m2_official.py`` checks log-probabilities and beam outputs against
an independent re-implementation of the released forward pass and beam search).

Every released tensor is mapped exactly once (:func:`tensor_map`): a missing, unexpected or mis-shaped one
is a :class:`~vlattn.errors.DataError` naming it. The decoder's runtime-state buffers (``running_keys``,
``running_values``, ``running_mask_self_attention``, ``running_seq``: empty defaults of its stateful
decoding, saved by ``state_dict()``) carry no weights; they are checked for their default shapes and dropped.

The vocabulary: the released ``vocab.pkl`` is a pickled torchtext-style object, which vlattn never unpickles.
Export its word table once, in the released code's environment (its ``data`` package must be importable)::

    python -c "import pickle; v = pickle.load(open('vocab.pkl', 'rb')); open('vocab.txt', 'w').write('\\n'.join(v.itos) + '\\n')"

``vocab.txt`` holds one word per line in index order (``<unk> <pad> <bos> <eos>`` first). vlattn's vocabulary
puts ``<pad> <bos> <eos> <unk>`` first, so the rows of the word embedding and of the output layer are permuted
accordingly (:meth:`~vlattn.data.vocab.Vocabulary.from_ordered`); the model is otherwise unchanged.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from torch import Tensor

from vlattn.config import Config, ModelConfig, Spec, config_from_dict, config_to_dict
from vlattn.tasks import check_components
from vlattn.data.vocab import Vocabulary, read_word_list
from vlattn.data.vqa_answers import AnswerVocabulary
from vlattn.data.wordpiece import WordPieceVocabulary
from vlattn.errors import DataError
from vlattn.models import build_captioner

# what the released test.py evaluates with (beam 5, 20 words, repeated words collapsed, 50 regions);
# the defaults of an imported run's config unless --config gives others
RELEASED_EVAL = {"beam_size": 5, "max_len": 20, "collapse_repeats": True}
RELEASED_MAX_REGIONS = 50
RELEASED_HEADS = 8
RELEASED_DROPOUT = 0.1
OFFICIAL_OPTIONS = {
    "connectivity": "meshed", "gating": "sigmoid", "residual": "official", "positions": "table",
    "padding": "official", "padded_regions": RELEASED_MAX_REGIONS, "init": "official",
}
_PROJECTIONS = {"fc_q": "q_proj", "fc_k": "k_proj", "fc_v": "v_proj", "fc_o": "out_proj"}
_AFFINE = ("weight", "bias")

Transform = Callable[[Tensor], Tensor]


@dataclass(frozen=True)
class ReleasedLayout:
    """The architecture a released state dict describes."""

    encoder_layers: int
    decoder_layers: int
    gates: int  # fc_alpha1..G per decoder layer: the encoder levels each decoder layer attends
    d_model: int
    feature_dim: int
    d_ff: int
    slots: int  # memory slots per encoder layer; 0 = plain self-attention (the "w/o memory" ablation)
    vocab_size: int
    max_positions: int  # position-table rows - 1 (row 0 is the padding position)


@dataclass(frozen=True)
class Pair:
    """One released tensor and the vlattn tensor it becomes."""

    released: str
    ours: str
    transform: Transform | None = None


@dataclass
class Imported:
    """A released state dict mapped onto vlattn: the config, vocabulary and state dict of the model."""

    config: Config
    vocab: Vocabulary | WordPieceVocabulary
    state: dict[str, Tensor]
    layout: ReleasedLayout | None  # what the tensors describe, when the format has more to say than the config
    dropped: list[str] = field(default_factory=list)  # runtime-state buffers, heads of another stage
    answers: AnswerVocabulary | None = None  # the answer classifier's labels (VQA models)
    partial: bool = False  # a variant of the released model: load the tensors that fit, the model initialises the rest


def _indices(state: dict[str, Tensor], pattern: str) -> set[int]:
    return {int(m.group(1)) for key in state if (m := re.fullmatch(pattern, key))}


def _require(state: dict[str, Tensor], key: str, dims: int, source: object) -> Tensor:
    if key not in state:
        raise DataError("missing tensor (not a released M2 checkpoint?)", path=source, item=key)
    if state[key].dim() != dims:
        raise DataError(f"expected {dims} dimensions, got shape {tuple(state[key].shape)}", path=source, item=key)
    return state[key]


def infer_layout(state: dict[str, Tensor], source: object = None) -> ReleasedLayout:
    """The architecture of a released state dict (errors name the tensor that is missing or odd)."""
    encoder = _indices(state, r"encoder\.layers\.(\d+)\..+")
    decoder = _indices(state, r"decoder\.layers\.(\d+)\..+")
    gates = _indices(state, r"decoder\.layers\.0\.fc_alpha(\d+)\.weight")
    if not encoder or not decoder:
        raise DataError("no encoder.layers.* / decoder.layers.* tensors: not a released M2 checkpoint", path=source)
    projection = _require(state, "encoder.fc.weight", 2, source)
    memory = "encoder.layers.0.mhatt.attention.m_k"
    layout = ReleasedLayout(
        encoder_layers=max(encoder) + 1,
        decoder_layers=max(decoder) + 1,
        gates=max(gates, default=0),
        d_model=projection.shape[0],
        feature_dim=projection.shape[1],
        d_ff=_require(state, "encoder.layers.0.pwff.fc1.weight", 2, source).shape[0],
        slots=_require(state, memory, 3, source).shape[1] if memory in state else 0,
        vocab_size=_require(state, "decoder.word_emb.weight", 2, source).shape[0],
        max_positions=_require(state, "decoder.pos_emb.weight", 2, source).shape[0] - 1,
    )
    if layout.gates != layout.encoder_layers:
        raise DataError(
            f"the decoder layers gate {layout.gates} encoder levels (fc_alpha1..{layout.gates}) but the encoder has "
            f"{layout.encoder_layers} layers: the released decoder then reads levels 1..{layout.gates} only, which "
            "vlattn's meshed connectivity (every level) does not represent", path=source,
        )
    return layout


def _attention(src: str, dst: str, norm: str) -> list[Pair]:
    """A released ``MultiHeadAttention`` (projections inside ``.attention``, its own LayerNorm)."""
    pairs = [Pair(f"{src}.attention.{theirs}.{p}", f"{dst}.{ours}.{p}")
             for theirs, ours in _PROJECTIONS.items() for p in _AFFINE]
    return pairs + [Pair(f"{src}.layer_norm.{p}", f"{norm}.norm.{p}") for p in _AFFINE]


def _feed_forward(src: str, dst: str) -> list[Pair]:
    """A released ``PositionWiseFeedForward`` (its LayerNorm is our feed-forward AddNorm)."""
    pairs = [Pair(f"{src}.pwff.{fc}.{p}", f"{dst}.ffn.{fc}.{p}") for fc in ("fc1", "fc2") for p in _AFFINE]
    return pairs + [Pair(f"{src}.pwff.layer_norm.{p}", f"{dst}.ffn_norm.norm.{p}") for p in _AFFINE]


def _drop_batch_axis(tensor: Tensor) -> Tensor:
    """Released memory slots (1, m, d) -> ours (m, d)."""
    if tensor.shape[0] != 1:
        raise ValueError(f"expected a leading axis of 1, got shape {tuple(tensor.shape)}")
    return tensor[0]


def tensor_map(layout: ReleasedLayout, word_order: list[int]) -> list[Pair]:
    """Every released tensor of ``layout`` and where it goes; ``word_order`` permutes vocabulary rows."""
    def rows(tensor: Tensor) -> Tensor:
        if tensor.shape[0] != len(word_order):
            raise ValueError(f"{tensor.shape[0]} rows but the word list has {len(word_order)} words")
        return tensor[word_order]

    pairs = [Pair(f"encoder.fc.{p}", f"encoder.input_proj.0.{p}") for p in _AFFINE]
    pairs += [Pair(f"encoder.layer_norm.{p}", f"encoder.input_proj.3.{p}") for p in _AFFINE]
    for i in range(layout.encoder_layers):
        src, dst = f"encoder.layers.{i}", f"encoder.layers.{i}"
        pairs += _attention(f"{src}.mhatt", f"{dst}.self_attn", f"{dst}.attn_norm")
        if layout.slots:
            pairs += [Pair(f"{src}.mhatt.attention.{theirs}", f"{dst}.self_attn.{ours}", _drop_batch_axis)
                      for theirs, ours in (("m_k", "memory_keys"), ("m_v", "memory_values"))]
        pairs += _feed_forward(src, dst)
    pairs += [Pair("decoder.word_emb.weight", "decoder.embed.weight", rows),
              Pair("decoder.pos_emb.weight", "decoder.positions.table")]
    for i in range(layout.decoder_layers):
        src, dst = f"decoder.layers.{i}", f"decoder.layers.{i}"
        pairs += _attention(f"{src}.self_att", f"{dst}.self_attn", f"{dst}.self_norm")
        pairs += _attention(f"{src}.enc_att", f"{dst}.cross.attention", f"{dst}.cross.norm")
        pairs += [Pair(f"{src}.fc_alpha{g + 1}.{p}", f"{dst}.cross.gate_proj.{g}.{p}")
                  for g in range(layout.gates) for p in _AFFINE]
        pairs += _feed_forward(src, dst)
    return pairs + [Pair("decoder.fc.weight", "decoder.output.weight", rows)]


def runtime_buffers(layout: ReleasedLayout) -> dict[str, tuple[int, ...]]:
    """The released decoder's stateful-decoding buffers and their saved (empty default) shapes."""
    buffers = {"decoder.running_mask_self_attention": (1, 1, 0), "decoder.running_seq": (1,)}
    for i in range(layout.decoder_layers):
        for name in ("running_keys", "running_values"):
            buffers[f"decoder.layers.{i}.self_att.{name}"] = (0, layout.d_model)
    return buffers


def released_config(layout: ReleasedLayout, heads: int = RELEASED_HEADS, base: Config | None = None) -> Config:
    """The config of the imported model: ``base``'s data/train/eval sections (default: vlattn's defaults with
    the released evaluation settings) and the model section the layout describes, all options official."""
    if base is None:
        base = Config()
        base.data.max_regions = RELEASED_MAX_REGIONS
        for key, value in RELEASED_EVAL.items():
            setattr(base.eval, key, value)
    encoder = Spec("memory", {"slots": layout.slots, "init": "official"}) if layout.slots else Spec("mha")
    if layout.d_model % heads:
        raise DataError(f"d_model {layout.d_model} is not divisible by --heads {heads}")
    config = copy.deepcopy(base)
    config.model = ModelConfig(
        kind="m2", feature_dim=layout.feature_dim, d_model=layout.d_model, num_heads=heads, d_ff=layout.d_ff,
        encoder_layers=layout.encoder_layers, decoder_layers=layout.decoder_layers, dropout=RELEASED_DROPOUT,
        max_positions=layout.max_positions, tie_embeddings=False, output_bias=False, box_input=False,
        encoder_self_attention=encoder, options=dict(OFFICIAL_OPTIONS),
    )
    config = config_from_dict(config_to_dict(config))  # checked as a loaded config is
    check_components(config)
    return config


def map_state_dict(
    state: dict[str, Tensor], words: list[str], *, heads: int = RELEASED_HEADS, base: Config | None = None,
    source: object = None, vocab_source: object = None,
) -> Imported:
    """Map a released state dict and its word list onto a vlattn M2 (see the module docstring)."""
    layout = infer_layout(state, source)
    vocab, order = Vocabulary.from_ordered(words, path=vocab_source)
    if len(words) != layout.vocab_size:
        raise DataError(f"the word list has {len(words)} words but decoder.word_emb.weight has "
                        f"{layout.vocab_size} rows", path=vocab_source)
    config = released_config(layout, heads, base)
    expected = build_captioner(config.model, len(vocab), pad_id=Vocabulary.PAD).state_dict()
    pairs = tensor_map(layout, order)
    runtime = runtime_buffers(layout)
    known = {pair.released for pair in pairs}
    extra = sorted(set(state) - known - set(runtime))
    if extra:
        raise DataError(f"unexpected tensor ({len(extra)} in all) for the inferred layout {layout}", path=source,
                        item=extra[0])
    missing = [pair.released for pair in pairs if pair.released not in state]
    if missing:
        raise DataError(f"missing tensor ({len(missing)} in all)", path=source, item=missing[0])
    for name, shape in runtime.items():
        if name in state and tuple(state[name].shape) != shape:
            raise DataError(f"runtime-state buffer has shape {tuple(state[name].shape)}, expected the empty "
                            f"default {shape}", path=source, item=name)
    mapped: dict[str, Tensor] = {}
    for pair in pairs:
        tensor = state[pair.released]
        try:
            value = pair.transform(tensor) if pair.transform else tensor
        except ValueError as err:
            raise DataError(str(err), path=source, item=pair.released) from None
        target = expected[pair.ours]
        if value.shape != target.shape:
            raise DataError(f"shape {tuple(tensor.shape)} does not fit {pair.ours} {tuple(target.shape)}",
                            path=source, item=pair.released)
        mapped[pair.ours] = value.to(target.dtype).contiguous()
    uncovered = sorted(set(expected) - set(mapped))
    if uncovered:  # the pairs and the model disagree: a bug, not bad input
        raise AssertionError(f"no released tensor maps to {uncovered[:3]}")
    return Imported(config, vocab, mapped, layout, dropped=sorted(set(runtime) & set(state)))


def read_released(
    checkpoint: str | Path, word_list: str | Path | None, *, heads: int | None = None, base: Config | None = None,
    answers: str | Path | None = None,
) -> Imported:
    """Read ``checkpoint`` (its ``state_dict`` entry, safely) and ``word_list``, and map them."""
    from vlattn.importers.torchfile import load_state_dict

    if word_list is None:
        raise DataError("--vocab: the m2-official format needs the released word list (docs/m2-official.md)")
    if answers is not None:
        raise DataError("--answers: an m2-official checkpoint is a captioner; it has no answers")
    heads = RELEASED_HEADS if heads is None else heads
    state = load_state_dict(checkpoint)
    return map_state_dict(state, read_word_list(word_list), heads=heads, base=base, source=checkpoint,
                          vocab_source=word_list)
