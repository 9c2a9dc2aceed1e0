"""Dataclass configs with YAML in and out; unknown keys are rejected with the key named.

Modules never receive a whole config: builders read the fields they need and pass explicit
arguments. ``load_config(name_or_path, overrides)`` reads a shipped preset (:mod:`vlattn.presets`) or a YAML/JSON
file, resolves its ``base`` chain and applies ``--set section.key=value`` overrides. This module checks what a config
says by itself (keys, types, choices, ranges); the components it names (task, model kind, mechanisms and their
placement, schedules) are checked against their registries by :mod:`vlattn.validation` (``load_valid_config``), a
layer above the registries.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml

from vlattn import shipped_presets as presets
from vlattn.errors import ConfigError
from vlattn.io import atomic_write_text

T = TypeVar("T")

# Upper bounds of the sizes a config sets, checked when it loads (every size has one: without it a config could
# allocate without limit, or build a million layers, while it is validated). They lie far above any published
# model of the five papers; what memory allows is checked beside them, from the weights of the model the config
# describes (vlattn.models.footprint).
MAX_WIDTH = 1 << 16  # a feature, model, feed-forward, embedding or hidden width; slots, dictionary entries
MAX_LAYERS = 64  # encoder or decoder layers
MAX_HEADS = 1024  # attention heads, groups, units, glimpses, channels
MAX_LENGTH = 1 << 16  # positions, regions, caption and question words, decoding steps
MAX_BATCH = 1 << 16  # images or questions in a batch, beams, samples per image
MAX_WORKERS = 256  # data-loader worker processes
MAX_CACHE_MB = 1 << 20  # MiB of decoded regions kept in memory (1 TiB)
MAX_SAMPLE = 1 << 24  # regions or words drawn for a k-means dictionary
MAX_VOCAB = 1 << 22  # words or candidate answers (vlattn profile)
MAX_DEPTH = 32  # nesting of mappings and lists in a config file or override
_INT64 = 1 << 63


def bounded(default: Any = dataclasses.MISSING, *, factory: Any = dataclasses.MISSING, ge: float | None = None,
            gt: float | None = None, le: float | None = None, lt: float | None = None) -> Any:
    """A dataclass field whose value (or every element of a list value) must lie in the given bounds;
    :func:`_build` checks them when a config loads and names the key on failure."""
    bounds = {"ge": ge, "gt": gt, "le": le, "lt": lt}
    return field(default=default, default_factory=factory, metadata={"bounds": {k: v for k, v in bounds.items() if v is not None}})


_BOUND_TESTS = {"ge": (lambda v, b: v >= b, ">="), "gt": (lambda v, b: v > b, ">"),
                "le": (lambda v, b: v <= b, "<="), "lt": (lambda v, b: v < b, "<")}


def _check_bounds(value: Any, bounds: dict[str, float], where: str) -> None:
    for item in value if isinstance(value, list) else [value]:
        if item is None or isinstance(item, str):  # an optional value left unset, or a named choice ("auto")
            continue
        for name, bound in bounds.items():
            test, symbol = _BOUND_TESTS[name]
            if not test(item, bound):
                raise ConfigError(f"config key {where}: must be {symbol} {bound}, got {item!r}")


@dataclass
class Spec:
    """A component chosen by name from a registry (attention mechanism, feed-forward, schedule, ...) with
    its component-specific options; the options are validated against the component's ``Options``
    dataclass when the config loads."""

    name: str
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"Spec name: expected a component name, got {self.name!r}")
        if not isinstance(self.options, dict):
            raise ConfigError(f"Spec {self.name} options: expected a mapping, got {self.options!r}")


class Section:
    """A config section that validates itself when constructed — from YAML, by hand (``ModelConfig(dropout=2.0)``)
    or by ``dataclasses.replace`` — as a loaded config is (:func:`validate_fields`); ``KEY`` is its key in
    :class:`Config` (``""`` for the whole config)."""

    KEY: typing.ClassVar[str] = ""

    def __post_init__(self) -> None:
        validate_fields(self, self.KEY)


def spec(name: str, **options: Any) -> Any:
    """A :class:`Spec` field defaulting to component ``name`` with ``options``."""
    return field(default_factory=lambda: Spec(name, dict(options)))


@dataclass
class ModelConfig(Section):
    """Model architecture. ``kind`` selects a builder in ``vlattn.models.MODELS``; ``options`` are the
    kind's own options (validated against its ``Options`` dataclass)."""

    KEY: typing.ClassVar[str] = "model"

    kind: str = "transformer"
    feature_dim: int = bounded(2048, ge=1, le=MAX_WIDTH)
    d_model: int = bounded(512, ge=1, le=MAX_WIDTH)
    num_heads: int = bounded(8, ge=1, le=MAX_HEADS)
    d_ff: int = bounded(2048, ge=1, le=MAX_WIDTH)
    encoder_layers: int = bounded(3, ge=0, le=MAX_LAYERS)
    decoder_layers: int = bounded(3, ge=1, le=MAX_LAYERS)
    dropout: float = bounded(0.1, ge=0.0, lt=1.0)
    # dropout on the attention weights and on the summed word + position embeddings, beyond the paper's
    # placement (sub-layer outputs): None = the kind's paper default (transformer: none on the weights, `dropout`
    # on the embeddings, Vaswani et al. Sec. 5.4; m2: neither, M2 Sec. 4.2; mcan, mcan_catt: `dropout` on the
    # weights, as MCAN's released code; catt: `dropout` on both, as its released LXMERT/BERT code)
    attention_dropout: float | None = bounded(None, ge=0.0, lt=1.0)
    embedding_dropout: float | None = bounded(None, ge=0.0, lt=1.0)
    # how dropout layers draw their masks: torch's Bernoulli draw, or uniform draws compared with p (the same
    # distribution, other random numbers, ~1.6x faster on the CPU; vlattn/layers/dropout.py)
    dropout_mask: Literal["bernoulli", "uniform"] = "bernoulli"
    max_positions: int = bounded(64, ge=1, le=MAX_LENGTH)
    tie_embeddings: bool = False
    output_bias: bool = True
    box_input: bool = False  # append normalised box channels to the region features (vlattn.layers.boxes)
    box_encoding: Literal["none", "sinusoidal"] = "none"  # NG-SAN Table 4 "absolute": added to the encoder input
    encoder_self_attention: Spec = spec("mha")
    decoder_self_attention: Spec = spec("mha")
    decoder_cross_attention: Spec = spec("mha")
    feed_forward: Spec = spec("plain")
    # a local GloVe-format text file initialising the question word embeddings of VQA models (never downloaded)
    word_vectors: str | None = None
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class DataConfig(Section):
    """Where the data lives and how captions, questions and regions are cut.

    Captioning reads ``karpathy``; VQA reads, for each split ``s`` of ``vqa_splits`` (train, val, test),
    ``questions``/``annotations`` with ``{split}`` replaced by each file subtype listed for ``s``
    (VQA v2: ``{train: [train2014], val: [val2014], test: [test2015]}``; MCAN trains on
    ``[train2014, val2014]``). ``vocab_splits``/``vocab_min_count`` choose the text the word vocabulary is
    built from (captions or questions); ``answer_min_count`` the training answers kept as candidates.
    ``zero_image`` zeroes every region feature and box (the question-only ablation). ``region_cache_mb``: the
    decoded, checked regions of the images read so far are kept in memory up to this many MiB per loaded data set
    (and DataLoader worker) when the whole feature store fits in it, else every read goes to the store
    (:class:`~vlattn.data.features.cache.CachedStore`; 0 reads every time).
    """

    KEY: typing.ClassVar[str] = "data"

    root: str = "data/synth"
    karpathy: str = "dataset.json"
    features: str = "features"
    vocab_min_count: int = bounded(5, ge=1)
    vocab_splits: list[str] = field(default_factory=lambda: ["train"])
    max_regions: int = bounded(50, ge=1, le=MAX_LENGTH)
    max_caption_len: int = bounded(20, ge=1, le=MAX_LENGTH)
    num_workers: int = bounded(0, ge=0, le=MAX_WORKERS)
    region_cache_mb: int = bounded(512, ge=0, le=MAX_CACHE_MB)
    questions: str = "vqa/questions_{split}.json"
    annotations: str = "vqa/annotations_{split}.json"
    vqa_splits: dict[str, list[str]] = field(
        default_factory=lambda: {"train": ["train"], "val": ["val"], "test": ["test"]}
    )
    max_question_len: int = bounded(14, ge=1, le=MAX_LENGTH)
    # how questions become ids: MCAN's words (a vocabulary built from the training questions) or BERT's uncased
    # WordPiece over the local vocab.txt `wordpiece_vocab` (relative to `root`; LXMERT: [CLS] pieces [SEP])
    question_tokens: Literal["words", "wordpiece"] = "words"
    # the VQA task's question files: VQA v2 (`questions` + `annotations`) or GQA's balanced questions (`questions`
    # only: their answers and types are in the same file; vlattn/data/gqa.py)
    format: Literal["vqa", "gqa"] = "vqa"
    wordpiece_vocab: str = "vocab.txt"
    answer_min_count: int = bounded(9, ge=1)
    zero_image: bool = False

    def check(self, where: str) -> None:
        for split, subtypes in self.vqa_splits.items():
            if not isinstance(subtypes, list) or not subtypes or not all(isinstance(s, str) for s in subtypes):
                raise ConfigError(f"config key {where}.vqa_splits.{split}: expected a non-empty list of file subtypes, "
                                  f"got {subtypes!r}")
        for key in ("questions", "annotations"):
            if "{split}" not in getattr(self, key):
                raise ConfigError(f"config key {where}.{key}: the file pattern needs a {{split}} placeholder")


@dataclass
class TrainConfig(Section):
    """Optimisation, validation and logging for the XE and SCST stages. ``schedule``/``scst_schedule`` name
    a schedule of ``vlattn.training.schedules.SCHEDULES`` with its own options."""

    KEY: typing.ClassVar[str] = "train"

    seed: int = bounded(1234, ge=0, lt=1 << 63)  # NumPy's generators refuse negative seeds
    epochs: int = bounded(20, ge=0)
    patience: int = bounded(0, ge=0)  # end XE after this many epochs without a better val CIDEr (0: never)
    batch_size: int = bounded(50, ge=1, le=MAX_BATCH)
    # captioning XE: > 0 sorts each pool of this many batches of the epoch's permutation by caption length before
    # cutting it into batches (shuffled), so a batch is padded to little more than its captions (vlattn/training/
    # loop.py); the XE loss is then divided by a batch's expected token count, so every token weighs the same in
    # every batch
    length_buckets: int = bounded(0, ge=0)
    label_smoothing: float = bounded(0.0, ge=0.0, lt=1.0)
    grad_clip: float = bounded(0.0, ge=0.0)
    adam_betas: list[float] = bounded(factory=lambda: [0.9, 0.98], ge=0.0, lt=1.0)
    adam_eps: float = bounded(1e-8, gt=0.0)
    weight_decay: float = bounded(0.0, ge=0.0)
    schedule: Spec = spec("noam", warmup=10000, scale=1.0)
    lr_scaling: Literal["none", "sqrt_groups"] = "none"  # sqrt_groups: XE rate x sqrt(k) (LW-Transformer IV-C)
    # VQA: binary cross-entropy over the answers, summed over answers and questions (MCAN's released code),
    # summed over answers and averaged over questions, or averaged over both
    bce_reduction: Literal["sum", "sum_answers", "mean"] = "sum"
    val_decoding: Literal["greedy", "beam"] = "greedy"
    val_max_images: int = bounded(0, ge=0)
    max_steps: int = bounded(0, ge=0)
    log_every: int = bounded(50, ge=1)
    checkpoint_every: int = bounded(0, ge=0)
    # SCST stage (M2 section 4.2: fixed learning rate 5e-6; "step"/"noam" select the paper schedules)
    scst_schedule: Spec = spec("constant", lr=5e-6)
    scst_epochs: int = bounded(10, ge=0)
    scst_patience: int = bounded(0, ge=0)
    scst_adam_betas: list[float] | None = None  # None: adam_betas
    scst_samples: int = bounded(5, ge=1, le=MAX_BATCH)
    scst_sampling: Literal["beam", "sample"] = "beam"
    scst_baseline: Literal["mean", "mean-others", "greedy"] = "mean"
    scst_batch_size: int = bounded(50, ge=1, le=MAX_BATCH)
    # "tokens": sum of log-prob x advantage over the batch's tokens / their number (self-critical.pytorch);
    # "steps": per sample the mean over the max_len decoding steps (0 after EOS), then the mean over samples (M2)
    scst_loss_normalise: Literal["tokens", "steps"] = "tokens"
    # stop computing an image once all its samples/beams have ended (vlattn/decoding/active.py): the same samples for
    # the same dropout masks, less work; in training mode dropout then draws fewer random numbers (other masks)
    scst_skip_finished: bool = False
    # GPU options (vlattn/precision.py): autocast dtype of training steps and validation, torch.compile of the layers
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    compile: bool = False

    def check(self, where: str) -> None:
        for key in ("adam_betas", "scst_adam_betas"):
            betas = getattr(self, key)
            if betas is not None and (len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas)):
                raise ConfigError(f"config key {where}.{key}: expected two numbers in [0, 1), got {betas!r}")
        if self.scst_baseline == "mean-others" and self.scst_samples < 2:
            raise ConfigError(f"config key {where}.scst_samples: the mean-others baseline needs >= 2, got {self.scst_samples}")


@dataclass
class EvalConfig(Section):
    """Decoding and scoring options on which the anchor implementations differ."""

    KEY: typing.ClassVar[str] = "eval"

    # "auto": after training, the size among beam_candidates (1 = greedy) with the best validation CIDEr-D, recorded
    # with the best checkpoint (vlattn/tasks/beam_choice.py); vlattn eval / caption decode with it
    beam_size: int | Literal["auto"] = bounded(5, ge=1, le=MAX_BATCH)
    beam_candidates: list[int] = bounded(factory=lambda: [1, 3, 5], ge=1, le=MAX_BATCH)
    max_len: int = bounded(20, ge=1, le=MAX_LENGTH)
    length_penalty: float = bounded(0.0, ge=0.0)
    collapse_repeats: bool = False
    batch_size: int = bounded(50, ge=1, le=MAX_BATCH)
    cider_df_mode: Literal["image", "caption"] = "image"
    reward_include_eos: bool = False
    # bias metrics of `vlattn eval` (CHAIR, A@Attr; vlattn.data.bias): "auto" (the synthetic lexicon when the data
    # root holds scenes.json), "synthetic", "off", or a CHAIR synonym file (relative to the data root)
    bias_lexicon: str = "auto"
    bias_instances: list[str] = field(default_factory=list)  # COCO instances_*.json adding ground-truth objects
    # GPU options (vlattn/precision.py) of vlattn eval / caption decoding
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    compile: bool = False
    # CPU option of captioning: decoding (vlattn eval / caption, validation) computes the vocabulary projection with
    # oneDNN from a weight packed once (vlattn/layers/packed.py; float32, no gradients; equal up to float rounding)
    packed_output: bool = False

    def check(self, where: str) -> None:
        if not self.beam_candidates:
            raise ConfigError(f"config key {where}.beam_candidates: needs at least one beam size (1 = greedy)")


@dataclass
class Config(Section):
    """The whole run: the task (a name in ``vlattn.tasks.TASKS``: ``captioning``, ...), model, data, training,
    evaluation."""

    task: str = "captioning"
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)


def _build(cls: type, data: Any, where: str) -> Any:
    """Instantiate dataclass ``cls`` from a mapping, rejecting unknown keys (named with their path), then validate
    it (:func:`validate_fields`)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where or 'config'}: expected a mapping, got {type(data).__name__}")
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        valid = ", ".join(sorted(fields)) or "(none)"
        raise ConfigError(f"unknown config key {where + '.' if where else ''}{unknown[0]!s}; valid keys: {valid}")
    kwargs = {}
    for key, value in data.items():
        hint, path = hints[key], f"{where}.{key}" if where else key
        kwargs[key] = _build(hint, _over_default(fields[key], value), path) if dataclasses.is_dataclass(hint) else value
    built = cls(**kwargs)
    if not isinstance(built, Section):  # a Section validated itself
        validate_fields(built, where)
    return built


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def validate_fields(obj: Any, where: str) -> None:
    """Check every field of dataclass instance ``obj`` (the config section or options at key ``where``): nested
    sections and :class:`Spec` components are instances of their class, leaves match their type hints
    (``Literal`` choices, ``Optional``; ints are promoted to floats in place), :func:`bounded` ranges hold; then
    the class's own ``check(where)`` if any. Failures are a ``ConfigError`` naming the key."""
    hints = _hints(type(obj))
    for f in dataclasses.fields(obj):
        hint, value, path = hints[f.name], getattr(obj, f.name), f"{where}.{f.name}" if where else f.name
        if dataclasses.is_dataclass(hint):
            if not isinstance(value, hint):
                raise ConfigError(f"config key {path}: expected a {hint.__name__}, got {value!r}")
        else:  # object.__setattr__: component options classes may be frozen
            object.__setattr__(obj, f.name, _coerce(hint, value, path))
        if "bounds" in f.metadata:
            _check_bounds(getattr(obj, f.name), f.metadata["bounds"], path)
    if hasattr(obj, "check"):
        obj.check(where)


def _default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def _over_default(section: dataclasses.Field, value: Any) -> Any:
    """A partial mapping for a nested section completed from the section's default: ``schedule: {options:
    {warmup: 400}}`` keeps the default schedule's name. A :class:`Spec` naming another component than its
    default takes nothing from it (the default's options belong to the default component)."""
    if not isinstance(value, dict):
        return value
    default = _default(section)
    if default is dataclasses.MISSING:
        return value
    if isinstance(default, Spec) and value.get("name", default.name) != default.name:
        return value
    return {**dataclasses.asdict(default), **value}


def _coerce(hint: Any, value: Any, where: str) -> Any:
    """Check/convert a leaf value against its type hint (int/float/bool/str/list/dict/Literal/Optional)."""
    origin = typing.get_origin(hint) or hint
    if origin is typing.Literal:
        if value not in typing.get_args(hint):
            choices = ", ".join(map(str, typing.get_args(hint)))
            raise ConfigError(f"config key {where}: {value!r} is not one of: {choices}")
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in typing.get_args(hint):
            return None
        options = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        if len(options) == 1:
            return _coerce(options[0], value, where)
        for option in options:  # e.g. int | Literal["auto"]: the first type the value fits
            try:
                return _coerce(option, value, where)
            except ConfigError:
                pass
        expected = " or ".join(_type_name(option) for option in options)
        raise ConfigError(f"config key {where}: expected {expected}, got {value!r}")
    if origin is float and isinstance(value, (int, float, str)) and not isinstance(value, bool):
        try:  # YAML 1.1 reads "5e-6" (no dot) as a string
            number = float(value)
        except (ValueError, OverflowError):
            number = None
        if number is not None and math.isfinite(number):
            return number
        if number is not None:
            raise ConfigError(f"config key {where}: expected a finite number, got {value!r}")
    if origin is int and isinstance(value, int) and not isinstance(value, bool):
        if not -_INT64 <= value < _INT64:
            raise ConfigError(f"config key {where}: {value} is outside the 64-bit integer range")
        return value
    if origin is str and isinstance(value, str) and any("\ud800" <= char <= "\udfff" for char in value):
        # a YAML "\ud800" escape: not text, and no path, file or name can hold it
        raise ConfigError(f"config key {where}: holds a lone UTF-16 surrogate, not text")
    if origin in (bool, str) and isinstance(value, origin):
        return value
    if origin is list and isinstance(value, list):
        (item,) = typing.get_args(hint) or (Any,)
        return [_coerce(item, element, f"{where}[{i}]") for i, element in enumerate(value)]
    if origin is dict and isinstance(value, dict):
        return dict(value)
    if hint is Any:
        return value
    raise ConfigError(f"config key {where}: expected {getattr(hint, '__name__', hint)}, got {value!r}")


def _type_name(hint: Any) -> str:
    """``int``, ``one of: auto``, ...: a type hint as an error message names it."""
    if typing.get_origin(hint) is typing.Literal:
        return "one of: " + ", ".join(map(str, typing.get_args(hint)))
    return getattr(hint, "__name__", str(hint))


def parse_options(cls: type, options: dict[str, Any] | Any, where: str) -> Any:
    """The ``Options`` dataclass ``cls`` of a component from a mapping (validated as config keys are, errors
    naming ``where``); an instance of ``cls`` is returned as it is."""
    if isinstance(options, cls):
        return options
    return _build(cls, options if options is not None else {}, where)


def lookup(registry: dict[str, T], name: str, what: str, where: str) -> T:
    """``registry[name]``, or a ``ConfigError`` naming the key ``where`` and listing the valid names."""
    if name not in registry:
        raise ConfigError(f"{where}: unknown {what} {name!r}; valid names: {', '.join(sorted(registry))}")
    return registry[name]


def value_at(cfg: Any, key: str) -> Any:
    """The value at the dotted config ``key`` (``train.scst_epochs``) of a config."""
    node = cfg
    for part in key.split("."):
        node = getattr(node, part)
    return node


def config_from_dict(data: dict[str, Any]) -> Config:
    """Build a :class:`Config` from nested dicts (YAML or JSON), rejecting unknown keys, wrong types, choices and
    values out of range (each a one-line ``ConfigError`` naming the key). The named components, and the keys set
    that nothing reads, are checked by :func:`vlattn.tasks.check_components`."""
    return _build(Config, data, "")


def named_keys(data: dict[str, Any] | None = None, overrides: Iterable[str] = ()) -> set[str]:
    """The ``section.key`` (or top-level) keys given in the mapping ``data`` and by the ``overrides`` items."""
    keys = {".".join(override_key(item).split(".")[:2]) for item in overrides}
    for name, value in (data or {}).items():
        keys |= {f"{name}.{key}" for key in value} if isinstance(value, dict) else {name}
    return keys


SECTIONS = ("model", "data", "train", "eval")




def set_keys(cfg: Config) -> list[str]:
    """The dotted keys of ``cfg``'s sections whose values differ from the defaults, in section order."""
    keys = []
    for section in SECTIONS:
        values = getattr(cfg, section)
        keys += [f"{section}.{f.name}" for f in dataclasses.fields(values) if getattr(values, f.name) != _default(f)]
    return keys


def config_to_dict(cfg: Config) -> dict[str, Any]:
    """Nested plain dicts, suitable for YAML/JSON."""
    return dataclasses.asdict(cfg)


def _shown(item: str, limit: int = 80) -> str:
    """``item`` quoted for an error message, cut to ``limit`` characters (an override can be any length)."""
    return repr(item if len(item) <= limit else item[:limit] + "...")


def _parse_override(item: str) -> tuple[list[str], Any]:
    if "=" not in item:
        raise ConfigError(f"override {_shown(item)}: expected key=value, e.g. train.epochs=3")
    key, raw = item.split("=", 1)
    try:
        value = parse_text(raw, "yaml")
    except ConfigError as err:
        raise ConfigError(f"override {_shown(item)}: the value is {err}") from None
    return key.strip().split("."), value


def parse_text(text: str, syntax: Literal["yaml", "json"]) -> Any:
    """The value of a YAML or JSON text, nested at most :data:`MAX_DEPTH` levels; a syntax error or deeper
    nesting is a ``ConfigError`` saying where (``not valid YAML at line 1 column 13: ...``)."""
    try:
        value = json.loads(text) if syntax == "json" else yaml.safe_load(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"not valid JSON at line {err.lineno} column {err.colno}: {err.msg}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"not valid YAML{_yaml_where(err)}") from None
    except RecursionError:  # both parsers recurse once per level of nesting
        raise ConfigError(f"nested more than {MAX_DEPTH} levels deep") from None
    if _depth(value) > MAX_DEPTH:
        raise ConfigError(f"nested more than {MAX_DEPTH} levels deep")
    return value


def _depth(value: Any) -> int:
    """Levels of mappings and lists in ``value`` (a scalar: 0), counted without recursion, stopping once past
    :data:`MAX_DEPTH` (YAML anchors can make a small text a deep or shared structure)."""
    deepest, stack = 0, [(value, 0)]
    while stack and deepest <= MAX_DEPTH:
        node, level = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is not None:
            deepest = max(deepest, level + 1)
            stack.extend((child, level + 1) for child in children)
    return deepest


def override_key(item: str) -> str:
    """The dotted key that an ``a.b.c=value`` override sets."""
    return ".".join(_parse_override(item)[0])


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``a.b.c=value`` overrides (values parsed as YAML) to nested dicts in place."""
    for item in overrides:
        keys, value = _parse_override(item)
        node = data
        for key in keys[:-1]:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {_shown(item)}: {key} is not a section")
        node[keys[-1]] = value
    return data


def _yaml_where(err: yaml.YAMLError) -> str:
    """`` at line L column C: problem`` of a YAML error, on one line."""
    mark = getattr(err, "problem_mark", None)
    where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
    problem = getattr(err, "problem", None) or str(err)
    return f"{where}: {' '.join(str(problem).split())}"


def _parse_file(text: str, source: str, as_json: bool) -> dict[str, Any]:
    """The mapping of a config file's ``text`` (JSON or YAML); errors name ``source``."""
    try:
        data = parse_text(text, "json" if as_json else "yaml") or {}
    except ConfigError as err:
        raise ConfigError(f"{source}: {err}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of config sections, got {type(data).__name__}")
    return data


def _read_file(path: Path) -> str:
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text (byte 0x{err.object[err.start]:02x} at offset {err.start})") from None
    except OSError as err:
        raise ConfigError(f"{path}: cannot read config file: {err.strerror}") from None


def _read_mapping(ref: str | Path, relative_to: Path | None, chain: tuple[str, ...]) -> tuple[str, dict[str, Any]]:
    """The raw mapping of a preset name or config file with its ``base`` chain merged in, and how to name it in
    errors. A file's ``base`` path is relative to the file's directory; ``chain`` (the referring sources) detects
    cycles."""
    if presets.is_name(ref):
        source = f"preset {ref}"
        text = presets.text(str(ref))
        referrer = f"{chain[-1]}: base: " if chain else ""  # a base names the file that asked for it
        if text is None:
            raise ConfigError(f"{referrer}{ref}: no preset of that name (presets: {', '.join(presets.names())}; a "
                              f"config file needs a .yaml/.json suffix or a directory part)")
        data, parent_dir = _parse_file(text, source, as_json=False), None
    else:
        path = Path(ref) if relative_to is None or Path(ref).is_absolute() else relative_to / ref
        source = str(path)
        if chain and not path.is_file():
            raise ConfigError(f"{chain[-1]}: base: {path}: config file not found")
        data, parent_dir = _parse_file(_read_file(path), source, as_json=path.suffix == ".json"), path.parent
    if source in chain:
        raise ConfigError(f"{chain[0]}: base chain {' -> '.join((*chain, source))} is a cycle")
    data.pop("description", None)
    if "base" not in data:
        return source, data
    base = data.pop("base")
    if not isinstance(base, str) or not base:
        raise ConfigError(f"{source}: base: expected a preset name or a config file path, got {base!r}")
    _, inherited = _read_mapping(base, parent_dir, (*chain, source))
    return source, merge_mappings(inherited, data)


def merge_mappings(base: dict[str, Any], child: dict[str, Any]) -> dict[str, Any]:
    """``child`` over ``base``: mappings merge key by key, anything else (lists included) replaces. ``options``
    belong to the component named beside them: a mapping that changes its ``name`` (a :class:`Spec`) or ``kind``
    (the model) does not inherit its base's ``options``."""
    merged = dict(base)
    if any(key in child and child[key] != base.get(key) for key in ("name", "kind")):
        merged.pop("options", None)
    for key, value in child.items():
        old = merged.get(key)
        merged[key] = merge_mappings(old, value) if isinstance(old, dict) and isinstance(value, dict) else value
    return merged


def resolve_config_dict(ref: str | Path | None, overrides: list[str] | None = None) -> dict[str, Any]:
    """The raw mapping of preset name or config file ``ref`` (None: all defaults) with its ``base`` chain merged
    in and ``overrides`` applied, before it is built."""
    data = _read_mapping(ref, None, ())[1] if ref is not None else {}
    return apply_overrides(data, overrides or [])


def config_origin(ref: str | Path | None) -> str:
    """How an error names where a config came from: ``preset NAME``, the file, or ``config`` (the defaults)."""
    return f"preset {ref}" if ref is not None and presets.is_name(ref) else str(ref or "config")


def load_named_config(ref: str | Path | None = None, overrides: list[str] | None = None) -> tuple[Config, set[str]]:
    """:func:`load_config`, and the ``section.key`` keys given explicitly: by the overrides and a shipped preset's
    files. A user's file may be a full dump (``vlattn config show``, a run's config.yaml), so its keys count as
    given only where they differ from the defaults (:func:`set_keys`)."""
    data = resolve_config_dict(ref, overrides)
    shipped = ref is not None and presets.is_name(ref)
    try:
        return config_from_dict(data), named_keys(data if shipped else None, overrides or [])
    except ConfigError as err:
        raise ConfigError(f"{config_origin(ref)}: {err}") from None


def load_config(ref: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """The config of a preset name (``m2``) or a YAML/JSON file (``path/to/run.yaml``; a name has no
    directory part and no suffix), its ``base`` chain resolved, ``overrides`` (``section.key=value``) applied."""
    return load_named_config(ref, overrides)[0]


def save_config(cfg: Config, path: str | Path) -> None:
    """Write the config as JSON (``config.json`` of a checkpoint) or YAML, by suffix; atomically."""
    data = config_to_dict(cfg)
    text = json.dumps(data, indent=2) if str(path).endswith(".json") else yaml.safe_dump(data, sort_keys=False)
    atomic_write_text(path, text)
