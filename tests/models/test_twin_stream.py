"""The twin-stream SLA VQA model (Sec. 3.4) and its plain stacked-attention twin: shapes, the stream exchange
(each unit's hidden input is the other stream's previous attended value), the positional bias on the visual
stream, padding, pooling and classifier, gradients, config errors."""

from __future__ import annotations

import pytest
import torch
from registry_cases import FEATURE_DIM, random_boxes
from torch import nn

from vlattn.config import ModelConfig
from vlattn.validation import load_valid_config
from vlattn.errors import ConfigError
from vlattn.layers.pooling import masked_mean
from vlattn.models.question import QuestionEncoder
from vlattn.models.twin_stream import TwinStreamVQA, build_twin_stream, question_state

WORDS, ANSWERS, M = 30, 7, 8


def twin(attention: str = "sla", seed: int = 0, model_options: dict | None = None, **unit_options) -> TwinStreamVQA:
    options = {"attention": {"name": attention, "options": unit_options}, "word_dim": 6, "lstm_dim": 5, "fusion_dim": 9,
               "features": "raw", **(model_options or {})}
    torch.manual_seed(seed)
    cfg = ModelConfig(kind="twin_stream", feature_dim=FEATURE_DIM, d_model=M, dropout=0.0, options=options)
    return build_twin_stream(cfg, WORDS, ANSWERS).eval()


def vqa_inputs(batch: int = 3, regions: int = 6, length: int = 5, seed: int = 1) -> dict[str, torch.Tensor]:
    """Row b has b padded regions and b padded question words."""
    generator = torch.Generator().manual_seed(seed)
    region_mask = torch.ones(batch, regions, dtype=torch.bool)
    question_mask = torch.ones(batch, length, dtype=torch.bool)
    for row in range(1, batch):
        region_mask[row, regions - row:] = False
        question_mask[row, length - row:] = False
    questions = torch.randint(4, WORDS, (batch, length), generator=generator).masked_fill(~question_mask, 0)
    return {
        "features": torch.randn(batch, regions, FEATURE_DIM, generator=generator) * region_mask[..., None],
        "boxes": random_boxes(batch, regions, generator),
        "region_mask": region_mask,
        "questions": questions,
        "question_mask": question_mask,
    }


@pytest.mark.parametrize("attention", ["sla", "stacked"])
def test_shapes_padding_and_gradients(attention: str) -> None:
    model, inputs = twin(attention), vqa_inputs()
    logits = model(inputs)
    assert logits.shape == (3, ANSWERS) and torch.isfinite(logits).all()
    noisy = {**inputs,
             "features": inputs["features"] + 50 * torch.randn_like(inputs["features"]) * ~inputs["region_mask"][..., None],
             "questions": torch.where(inputs["question_mask"], inputs["questions"], torch.randint_like(inputs["questions"], 4, WORDS)),
             "boxes": torch.where(inputs["region_mask"][..., None], inputs["boxes"], torch.rand_like(inputs["boxes"]))}
    torch.testing.assert_close(model(noisy), logits)
    order = torch.tensor([3, 0, 5, 1, 4, 2])
    permuted = {**inputs, **{key: inputs[key][:, order] for key in ("features", "boxes", "region_mask")}}
    torch.testing.assert_close(model(permuted), logits)
    model.train()
    model(inputs).logsumexp(-1).sum().backward()
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name


@pytest.mark.parametrize("attention", ["sla", "stacked"])
@pytest.mark.parametrize("units", [1, 2, 3])
def test_streams_exchange_their_attended_values(attention: str, units: int) -> None:
    """Visual unit 1 reads the question state, textual unit 1 the pooled image; unit t > 1 of each stream reads
    the other stream's attended value of unit t - 1, sum_k alpha_k^(t-1) x_k."""
    model, inputs = twin(attention, units=units), vqa_inputs()
    queries: dict[tuple[str, int], torch.Tensor] = {}
    for stream in ("visual", "textual"):
        for t, unit in enumerate(getattr(model, stream).units):
            unit.query_proj.register_forward_pre_hook(lambda _, args, key=(stream, t): queries.__setitem__(key, args[0]))
    with torch.no_grad():
        visual, textual = model.streams(inputs)
        words = model.question(inputs["questions"], inputs["question_mask"])
        question = question_state(words, inputs["question_mask"])
    torch.testing.assert_close(queries["visual", 0], question[:, None])
    torch.testing.assert_close(queries["textual", 0], masked_mean(inputs["features"], inputs["region_mask"])[:, None])
    assert len(visual.weights) == len(textual.weights) == units
    for t in range(1, units):
        seen = (visual.weights[t - 1][:, 0] @ inputs["features"])  # (B, 1, D)
        read = (textual.weights[t - 1][:, 0] @ words)  # (B, 1, 2H)
        torch.testing.assert_close(queries["visual", t], read)
        torch.testing.assert_close(queries["textual", t], seen)


def test_positional_bias_on_the_visual_stream_only() -> None:
    model, inputs = twin("sla", units=2), vqa_inputs()
    assert model.visual.positional is not None and model.textual.positional is None
    assert model.textual.units[0].position_proj is None
    with torch.no_grad():
        before = model.streams(inputs)[0].weights[0]
        model.visual.positional.proj.weight.zero_()
        model.visual.positional.proj.bias.zero_()
        assert (model.streams(inputs)[0].weights[0] - before).abs().amax() > 1e-3
    plain = twin("stacked")
    assert not hasattr(plain.visual, "positional")


def test_pooling_and_classifier() -> None:
    """logits = classifier([pool(conv(z_vis)), pool(conv(z_text))]) with the mean over real positions only."""
    model, inputs = twin("sla", units=2), vqa_inputs()
    with torch.no_grad():
        visual, textual = model.streams(inputs)
        pooled = []
        for stream, state, mask in ((model.visual, visual, inputs["region_mask"]),
                                    (model.textual, textual, inputs["question_mask"])):
            latent = state.latent.positions[:, 0]  # (B, K, m): s^(T)
            mean = torch.stack([latent[b, mask[b]].mean(0) for b in range(3)])
            pooled.append(stream.readout.latent_proj(mean) + stream.readout.summary_proj(state.latent.summary[:, 0]))
        torch.testing.assert_close(model(inputs), model.classifier(torch.cat(pooled, dim=-1)))


def test_question_state_is_each_directions_final_state() -> None:
    """h^(0),text = [h_n forward, h_n backward] of the bi-LSTM run on each question's real words alone."""
    model, inputs = twin(), vqa_inputs()
    encoder = model.question
    with torch.no_grad():
        state = question_state(encoder(inputs["questions"], inputs["question_mask"]), inputs["question_mask"])
        for row in range(3):
            words = inputs["questions"][row, inputs["question_mask"][row]]
            _, (final, _) = encoder.lstm(encoder.word_embedding(words)[None])  # final: (2, 1, H)
            torch.testing.assert_close(state[row], final[:, 0].flatten())


def test_l2_features_and_glorot_initialisation() -> None:
    """``features: l2`` normalises each region before the streams (so scaling a region changes nothing);
    ``init: glorot`` draws weights from U(-a, a), a = sqrt(6 / (fan_in + fan_out)), and zeroes the biases."""
    model, inputs = twin(model_options={"features": "l2", "init": "glorot"}), vqa_inputs()
    scale = 1 + 9 * torch.rand(3, 6, 1)
    torch.testing.assert_close(model({**inputs, "features": inputs["features"] * scale}), model(inputs))
    raw = twin(model_options={"features": "raw"})
    assert not torch.allclose(raw({**inputs, "features": inputs["features"] * scale}), raw(inputs))
    scaled = []  # every weight divided by its bound a: U(-1, 1) pooled, standard deviation 1/sqrt(3)
    for name, parameter in model.named_parameters():
        if name.rsplit(".", 1)[-1].startswith("bias"):
            assert not parameter.any(), name
        elif parameter.dim() == 2:
            scaled.append(parameter.detach().flatten() / (6 / sum(parameter.shape)) ** 0.5)
    pooled = torch.cat(scaled)
    assert pooled.abs().max() <= 1 and abs(pooled.std() - 3 ** -0.5) < 0.03
    assert not model.question.word_embedding.weight[0].any()  # the padding row


@pytest.mark.parametrize("attention", ["sla", "stacked"])
@pytest.mark.parametrize(
    ("overrides", "weights", "words"),
    [
        ({"dropout": 0.3}, 0.3, None),  # the default: model.dropout on the weights, nothing on the words
        ({"dropout": 0.3, "attention_dropout": 0.0, "embedding_dropout": 0.2}, 0.0, 0.2),
        ({"dropout": 0.0, "attention_dropout": 0.4, "embedding_dropout": 0.0}, 0.4, None),
    ],
)
def test_attention_and_embedding_dropout_options(attention: str, overrides: dict, weights: float, words) -> None:
    """model.attention_dropout replaces model.dropout on both streams' attention weights; model.embedding_dropout
    adds one dropout module on the question words; the classifier keeps model.dropout."""
    options = {"attention": {"name": attention}, "word_dim": 6, "lstm_dim": 5, "fusion_dim": 9}
    model = build_twin_stream(ModelConfig(feature_dim=FEATURE_DIM, d_model=M, options=options, **overrides),
                              WORDS, ANSWERS)
    assert model.visual.dropout == model.textual.dropout == weights
    assert [m.p for m in model.question.modules() if isinstance(m, nn.Dropout)] == ([] if words is None else [words])
    assert [m.p for m in model.classifier.modules() if isinstance(m, nn.Dropout)] == [overrides["dropout"]]


@pytest.mark.parametrize("attention", ["sla", "stacked"])
def test_attention_dropout_reaches_the_weights(attention: str) -> None:
    """With model.dropout 0, a train-mode forward equals the eval-mode one unless model.attention_dropout is set."""
    inputs = vqa_inputs()
    for rate, stochastic in ((None, False), (0.5, True)):
        cfg = ModelConfig(feature_dim=FEATURE_DIM, d_model=M, dropout=0.0, attention_dropout=rate,
                          options={"attention": {"name": attention}, "word_dim": 6, "lstm_dim": 5, "fusion_dim": 9})
        model = build_twin_stream(cfg, WORDS, ANSWERS)
        evaluated = model.eval()(inputs)
        torch.manual_seed(0)
        trained = model.train()(inputs)
        assert torch.allclose(trained, evaluated) != stochastic


def test_embedding_dropout_on_the_question_words() -> None:
    """Each LSTM input element is the word embedding's, zeroed or scaled by 1 / (1 - p) (inverted dropout)."""
    encoder = QuestionEncoder(WORDS, 6, 5, embedding_dropout=0.5).train()
    seen: list[torch.Tensor] = []
    encoder.lstm.register_forward_pre_hook(lambda _, args: seen.append(args[0]))
    questions = vqa_inputs()["questions"]
    torch.manual_seed(0)
    encoder(questions)
    embedded = encoder.word_embedding(questions)  # (B, L, E)
    kept = seen[0] != 0
    assert 0 < kept.float().mean() < 1
    torch.testing.assert_close(seen[0][kept], 2 * embedded[kept])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"attention": {"name": "additive"}}, r"model\.options\.attention\.name: unknown twin-stream attention 'additive'"),
        ({"attention": {"name": "sla", "options": {"units": 0}}}, r"model\.options\.attention\.options\.units: must be >= 1"),
        ({"attention": {"name": "stacked", "options": {"position": "grid"}}}, r"unknown config key model\.options\.attention\.options\.position"),
        ({"fusion_dim": 0}, r"model\.options\.fusion_dim: must be >= 1"),
    ],
)
def test_config_errors_name_the_key(options, message) -> None:
    with pytest.raises(ConfigError, match=message):
        build_twin_stream(ModelConfig(feature_dim=FEATURE_DIM, d_model=M, options=options), WORDS, ANSWERS)


def sla_stream_parameters(key: int, query: int, m: int, units: int, out: int, bias_cells: int = 0) -> int:
    """Parameters of an SLA stream by the formulas of Sec. 3.3 with our choices (vlattn/attention/sla.py): unit t
    has W_v (key x m + m), W_h (query x m), W_u (m); unit 1 also W_z on v (key x m) and on b_pos (P = 1: m) when
    there is a bias; units t > 1 W_z on s (m x m) and on a (key x m); the positional bias FC(h) (query x cells +
    cells); the readout's 1x1 convolution ((m + key) x out + out)."""
    unit = key * m + m + query * m + m
    first = unit + key * m + (m if bias_cells else 0)
    later = (units - 1) * (unit + m * m + key * m)
    bias = query * bias_cells + bias_cells if bias_cells else 0
    return first + later + bias + (m + key) * out + out


@pytest.mark.parametrize("preset", ["vqa-sla", "vqa-stacked"])
def test_table_1_presets_by_configuration(preset: str) -> None:
    """The Sec. 4.1.2 setup (14 x 14 grid, L2, 300-d words, bi-LSTM 512, 26 words, Adam (0.9, 0.999), batch 800,
    Glorot), T = 3 and m = 1024; the two presets differ in the units only; parameters by the formulas."""
    cfg = load_valid_config(preset)
    sla = load_valid_config("vqa-sla")
    assert cfg.task == "vqa" and cfg.model.kind == "twin_stream" and cfg.data.max_question_len == 26
    assert (cfg.model.feature_dim, cfg.data.max_regions, cfg.train.batch_size) == (2048, 196, 800)
    assert cfg.train.adam_betas == [0.9, 0.999]
    options = cfg.model.options
    assert (options["word_dim"], options["lstm_dim"], options["features"], options["init"]) == (300, 512, "l2", "glorot")
    assert options["attention"]["options"]["units"] == 3 and cfg.model.d_model == 1024
    differs = {key for key in options if options[key] != sla.model.options[key]}
    assert differs <= {"attention"} and cfg.data == sla.data and cfg.train == sla.train
    words, answers, m, fusion = 100, 3129, 1024, options["fusion_dim"]
    with torch.device("meta"):
        model = build_twin_stream(cfg.model, words, answers)
    question = words * 300 + 2 * (4 * 512 * (300 + 512) + 2 * 4 * 512)
    classifier = 2 * fusion * fusion + fusion + fusion * answers + answers
    if options["attention"]["name"] == "sla":
        assert options["attention"]["options"]["position"] == "grid" and options["attention"]["options"]["grid_cells"] == 196
        streams = (sla_stream_parameters(2048, 1024, m, 3, fusion, bias_cells=196)
                   + sla_stream_parameters(1024, 2048, m, 3, fusion))
    else:
        streams = 3 * (2048 * m + m + 1024 * m + m) + 2048 * fusion + fusion
        streams += 3 * (1024 * m + m + 2048 * m + m) + 1024 * fusion + fusion
    assert sum(p.numel() for p in model.question.parameters()) == question
    assert sum(p.numel() for p in model.classifier.parameters()) == classifier
    assert sum(p.numel() for p in model.parameters()) == question + streams + classifier
