"""LXMERT+CATT (kind ``lxmert_catt``) against an independent functional reference written from CATT's Fig. 6 / Sec.
4.2 (the paper's reading) and from the authors' released ``src/lxrt/modeling.py`` (``bert_type ft_same``,
``cross_type g2g``: the ``official`` options), reading the model's weights by name and computing every attention,
LayerNorm and feed-forward with plain tensor operations; cross-sample attention over identical dictionary entries
against its closed form (uniform weights); which dictionary reaches which output; the parameter count in closed
form; k-means dictionaries from the data through the model's ``prepare`` step; the presets build; the refused
settings."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import Tensor

from vlattn.config import ModelConfig, load_config
from vlattn.data.features import RegionFeatures, open_store, write_memmap
from vlattn.data.regions import RegionSampler
from vlattn.errors import ConfigError
from vlattn.models import build_vqa_model
from vlattn.models.lxmert import Lxmert
from vlattn.training.prepare import PrepareResources, prepare_model

SIZE = dict(vocab=40, d=16, heads=2, d_ff=24, language=2, objects=2, cross=3, features=6, positions=20)
OFFICIAL = dict(fusion="concat_linear", dictionary_space="hidden", cross_queries="stream", chain_cross=False)
EPS = 1e-12


def config(cross: int = SIZE["cross"], **options: object) -> ModelConfig:
    dictionaries = {"image_dictionary": {"size": 5, "init": "random"}, "word_dictionary": {"size": 4, "init": "random"}}
    return ModelConfig(
        kind="lxmert_catt", feature_dim=SIZE["features"], d_model=SIZE["d"], num_heads=SIZE["heads"], d_ff=SIZE["d_ff"],
        encoder_layers=SIZE["language"], decoder_layers=cross, max_positions=SIZE["positions"], dropout=0.0,
        options={"object_layers": SIZE["objects"], **dictionaries, **options},
    )


def build(seed: int = 0, cross: int = SIZE["cross"], **options: object) -> Lxmert:
    """A tiny model whose every tensor is redrawn at a scale where mistakes show (BERT's 0.02 flattens them)."""
    torch.manual_seed(seed)
    model = build_vqa_model(config(cross, **options), SIZE["vocab"], 3).eval()
    with torch.no_grad():
        for name, tensor in model.named_parameters():
            scale = 0.5 if name.endswith("entries") else 0.3
            tensor.copy_(torch.randn_like(tensor) * scale + (1.0 if name.endswith("norm.weight") else 0.0))
    return model


def inputs(batch: int = 3, words: int = 6, regions: int = 5, seed: int = 1) -> dict[str, Tensor]:
    """Row b has b padded words and b padded regions."""
    g = torch.Generator().manual_seed(seed)
    question_mask = torch.ones(batch, words, dtype=torch.bool)
    region_mask = torch.ones(batch, regions, dtype=torch.bool)
    for row in range(1, batch):
        question_mask[row, words - row:] = False
        region_mask[row, regions - row:] = False
    corner = torch.rand(batch, regions, 2, generator=g) * 0.6
    return {"questions": torch.randint(1, SIZE["vocab"], (batch, words), generator=g).masked_fill(~question_mask, 0),
            "question_mask": question_mask, "features": torch.randn(batch, regions, SIZE["features"], generator=g),
            "boxes": torch.cat([corner, corner + 0.1 + torch.rand(batch, regions, 2, generator=g) * 0.3], -1),
            "region_mask": region_mask}


# ----------------------------------------------------------------------------------------------------------------
# the reference: plain tensor operations over the weights, named as vlattn stores them


class Reference:
    def __init__(self, model: Lxmert) -> None:
        self.p = {name.removeprefix("encoder."): t.detach() for name, t in model.state_dict().items()}
        self.heads = SIZE["heads"]

    def linear(self, name: str, x: Tensor) -> Tensor:
        return x @ self.p[f"{name}.weight"].T + self.p[f"{name}.bias"]

    def norm(self, name: str, x: Tensor) -> Tensor:
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return (x - mean) / torch.sqrt(var + EPS) * self.p[f"{name}.weight"] + self.p[f"{name}.bias"]

    def attention(self, name: str, q: Tensor, kv: Tensor, key_mask: Tensor | None) -> Tensor:
        """Multi-head scaled dot-product attention of ``q`` (B, n, d) over ``kv`` (B|1, m, d)."""
        kv = kv.expand(q.shape[0], -1, -1)
        b, n, d = q.shape
        h, dh = self.heads, d // self.heads

        def split(x: Tensor) -> Tensor:
            return x.reshape(b, -1, h, dh).transpose(1, 2)

        scores = split(self.linear(f"{name}.q_proj", q)) @ split(self.linear(f"{name}.k_proj", kv)).transpose(-1, -2)
        scores = scores / math.sqrt(dh)
        if key_mask is not None:
            scores = scores.masked_fill(~key_mask[:, None, None, :], float("-inf"))
        heads = scores.softmax(-1) @ split(self.linear(f"{name}.v_proj", kv))
        return self.linear(f"{name}.out_proj", heads.transpose(1, 2).reshape(b, n, d))

    def layer(self, name: str, q: Tensor, kv: Tensor, key_mask: Tensor | None) -> Tensor:
        """A BERT layer whose attention reads ``q`` over ``kv``, the residual over ``q``; the exact GeLU."""
        a = self.norm(f"{name}.attn_norm.norm", q + self.attention(f"{name}.self_attn", q, kv, key_mask))
        hidden = self.linear(f"{name}.ffn.fc1", a)
        hidden = 0.5 * hidden * (1 + torch.erf(hidden / math.sqrt(2)))
        return self.norm(f"{name}.ffn_norm.norm", a + self.linear(f"{name}.ffn.fc2", hidden))

    def cross(self, name: str, q: Tensor, kv: Tensor, key_mask: Tensor) -> Tensor:
        return self.norm(f"{name}.cross_norm.norm", q + self.attention(f"{name}.cross_attn", q, kv, key_mask))

    def regions(self, features: Tensor, boxes: Tensor) -> Tensor:
        return (self.norm("regions.feature_norm", self.linear("regions.feature_proj", features))
                + self.norm("regions.box_norm", self.linear("regions.box_proj", boxes))) / 2

    def encode(self, x: dict[str, Tensor], *, official: bool, fusion: str,
               shared: bool = True) -> tuple[Tensor, Tensor, Tensor]:
        p = self.p
        cs = "" if shared else "cs_"  # the CS stream's layers: the IS stream's, or copies named cs_*
        lmask, vmask = x["question_mask"], x["region_mask"]
        length = x["questions"].shape[1]
        lang = self.norm("words.norm", p["words.word.weight"][x["questions"]] + p["words.position.weight"][:length]
                         + p["words.token_type.weight"][0])
        visn = self.regions(x["features"], x["boxes"])
        m_lang, m_visn = p["word_dictionary.entries"], p["image_dictionary.entries"]
        if not official:  # the paper's reading: the dictionaries pass the input embeddings (a zero box for regions)
            m_lang = self.norm("words.norm", m_lang)
            m_visn = self.regions(m_visn, torch.zeros(len(m_visn), 4))
        m_lang, m_visn = m_lang[None], m_visn[None]
        for i in range(SIZE["language"]):  # the released BertLayer ft_same: the CS call reads the IS stream's input
            lang, m_lang = (self.layer(f"language_layers.{i}", lang, lang, lmask),
                            self.layer(f"{cs}language_layers.{i}", lang, m_lang, None if i == 0 else lmask))
        for i in range(SIZE["objects"]):
            visn, m_visn = (self.layer(f"object_layers.{i}", visn, visn, vmask),
                            self.layer(f"{cs}object_layers.{i}", visn, m_visn, None if i == 0 else vmask))
        encoded = (m_lang, m_visn)
        for i in range(len([k for k in p if k.startswith("cross_layers") and k.endswith("cross_norm.norm.weight")])):
            name, cs_name = f"cross_layers.{i}", f"{cs}cross_layers.{i}"
            cs_lang, cs_visn = encoded if official else (m_lang, m_visn)
            lang_att = self.cross(name, lang, visn, vmask)
            visn_att = self.cross(name, visn, lang, lmask)
            if official:  # g2g: the CS stream queries itself, in the cross- and in the self-attention
                m_lang_att = self.cross(cs_name, cs_lang, cs_visn, vmask)
                m_visn_att = self.cross(cs_name, cs_visn, cs_lang, lmask)
                m_lang = self.layer(f"{cs_name}.language", m_lang_att, m_lang_att, lmask)
                m_visn = self.layer(f"{cs_name}.vision", m_visn_att, m_visn_att, vmask)
            else:  # Fig. 6b: the sample's queries over the other stream's CS states, then over the own CS states
                m_lang_att = self.cross(cs_name, lang, cs_visn, vmask)
                m_visn_att = self.cross(cs_name, visn, cs_lang, lmask)
                m_lang = self.layer(f"{cs_name}.language", lang_att, m_lang_att, lmask)
                m_visn = self.layer(f"{cs_name}.vision", visn_att, m_visn_att, vmask)
            lang = self.layer(f"{name}.language", lang_att, lang_att, lmask)
            visn = self.layer(f"{name}.vision", visn_att, visn_att, vmask)
        language, vision = torch.cat([lang, m_lang], -1), torch.cat([visn, m_visn], -1)
        if fusion == "concat_linear":
            language, vision = self.linear("language_fusion.proj", language), self.linear("vision_fusion.proj", vision)
        return language, vision, torch.tanh(self.linear("pooler", language[:, 0]))


@pytest.mark.parametrize("options", [{}, {"fusion": "concat_linear"}, {"share": False}, OFFICIAL,
                                     {**OFFICIAL, "share": False}],
                         ids=["paper", "paper-linear", "paper-unshared", "official", "official-unshared"])
def test_forward_equals_the_reference(options: dict) -> None:
    model = build(**options)
    x = inputs()
    with torch.no_grad():
        ours = model.encode(x)
        expected = Reference(model).encode(x, official=options.get("cross_queries") == "stream",
                                           fusion=options.get("fusion", "concat"), shared=options.get("share", True))
    for mine, theirs in zip((ours.language, ours.vision, ours.pooled), expected, strict=True):
        # padded positions carry values the reference computes the same way; compare everything
        torch.testing.assert_close(mine, theirs, atol=2e-5, rtol=0)
    assert ours.language.shape[-1] == model.output_dim == (32 if options.get("fusion", "concat") == "concat" else 16)


def test_unshared_streams_use_their_own_layers() -> None:
    """``share: false``: scaling the CS stream's own language layers' output projections leaves the IS stream as
    it was and changes the CS half of the vision output (after 3 cross-modality layers it descends from the
    language CS stream)."""
    model = build(share=False)
    x = inputs()
    with torch.no_grad():
        before = model.encode(x)
        for layer in model.encoder.cs_language_layers:
            layer.self_attn.out_proj.weight.mul_(2.0)
        after = model.encode(x)
    d = SIZE["d"]
    for old, new in ((before.language, after.language), (before.vision, after.vision)):
        torch.testing.assert_close(new[..., :d], old[..., :d], atol=0, rtol=0)
    assert not torch.allclose(after.vision[..., d:], before.vision[..., d:], atol=1e-3)


def test_cross_sample_attention_over_identical_entries_is_uniform() -> None:
    """Every entry the same vector e: CS-ATT's weights are uniform whatever the query, so the first language
    layer's CS sub-layer output is LN(w + W_o (W_v e~ + b_v) + b_o) with e~ = LN_words(e), hand-derived."""
    model = build(cross=1)
    e = torch.randn(SIZE["d"])
    x = inputs()
    enc = model.encoder
    with torch.no_grad():
        enc.word_dictionary.entries.copy_(e.expand_as(enc.word_dictionary.entries))
        layer = enc.language_layers[0]
        words = enc.words(x["questions"])
        entries = enc.dictionary_entries()[0]  # (1, K, d)
        attended = layer.self_attn(words, entries, entries).out
        embedded = enc.words.norm(e)
        value = layer.self_attn.out_proj(layer.self_attn.v_proj(embedded))  # (d,): one value for every query
        torch.testing.assert_close(attended, value.expand_as(attended), atol=1e-5, rtol=0)
        # and permuting the entries changes nothing (a set, never masked)
        enc.word_dictionary.entries.copy_(torch.randn_like(enc.word_dictionary.entries))
        first = model.encode(x)
        enc.word_dictionary.entries.copy_(enc.word_dictionary.entries.flip(0))
        torch.testing.assert_close(model.encode(x).language, first.language, atol=1e-6, rtol=0)


@pytest.mark.parametrize("cross", [1, 2, 3])
def test_which_dictionary_reaches_the_pooled_vector(cross: int) -> None:
    """Paper reading: a CS stream of a cross-modality layer reads the other modality's CS states (the residual is
    over the sample), so the pooled vector sees the image dictionary after an odd number of such layers and the
    word dictionary after an even one; the vision output the other. The released g2g layers read both."""
    for options, expected in (({}, {"image" if cross % 2 else "word"}), (OFFICIAL, {"image", "word"})):
        model = build(cross=cross, **options)
        pooled = model.encode(inputs()).pooled
        entries = {"image": model.encoder.image_dictionary.entries, "word": model.encoder.word_dictionary.entries}
        grads = torch.autograd.grad(pooled.square().sum(), list(entries.values()), allow_unused=True)
        reached = {name for name, grad in zip(entries, grads, strict=True) if grad is not None}
        assert reached == expected, options


def test_parameters_in_closed_form() -> None:
    """Beyond plain LXMERT of the same config: K_v x D + K_w x d, and the fusion (concat: the pooler's second d x d;
    concat_linear: 2 (2d x d + d)); share: false adds every layer once more."""
    def count(model: torch.nn.Module) -> int:
        return sum(p.numel() for p in model.parameters())

    d, feature = SIZE["d"], SIZE["features"]
    plain_cfg = config()
    plain = count(build_vqa_model(ModelConfig(**{**plain_cfg.__dict__, "kind": "lxmert",
                                                 "options": {"object_layers": SIZE["objects"]}}), SIZE["vocab"], 3))
    dictionaries = 5 * feature + 4 * d
    assert count(build()) == plain + dictionaries + d * d
    assert count(build(fusion="concat_linear")) == plain + dictionaries + 2 * (2 * d * d + d)
    assert count(build(**OFFICIAL)) == plain + 5 * d + 4 * d + 2 * (2 * d * d + d)
    layers = sum(count(module) for module in build().backbone_layers())
    unshared = build(share=False)
    assert count(unshared) == plain + dictionaries + d * d + layers
    assert sum(count(module) for module in unshared.backbone_layers()) == 2 * layers  # what `vlattn profile` counts


def test_kmeans_dictionaries_from_the_data(tmp_path) -> None:
    """``prepare`` of a fresh model: the image dictionary's entries become the centres of the training regions'
    clusters (raw feature space), the word dictionary's the count-weighted clusters of the WordPiece table."""
    centres = np.eye(SIZE["features"], dtype=np.float32)[:3] * 10  # 3 clusters of 6-d regions
    rng = np.random.default_rng(0)
    data = (centres[rng.integers(3, size=60)] + rng.normal(0, 0.1, (60, SIZE["features"]))).astype(np.float32)
    boxes = np.tile(np.array([[0, 0, 4, 4]], dtype=np.float32), (3, 1))
    write_memmap(tmp_path / "features", [(i, RegionFeatures(data[3 * i:3 * i + 3], boxes, 8, 8)) for i in range(20)])
    model = build_vqa_model(config(image_dictionary={"size": 3, "init": "kmeans"},
                                   word_dictionary={"size": 2, "init": "kmeans"}), SIZE["vocab"], 3)
    table = model.word_embeddings.weight
    with torch.no_grad():  # words 1-2 near +5, words 3-4 near -5 (word 4 counted 3 times), the rest unused
        table[1:3], table[3:5] = 5.0, -5.0
        table[2] += 0.2
        table[4] -= 0.4
    counts = torch.zeros(SIZE["vocab"])
    counts[1:5] = torch.tensor([1.0, 1.0, 1.0, 3.0])

    def resources() -> PrepareResources:
        return PrepareResources(seed=0, regions=RegionSampler(open_store(tmp_path / "features"), list(range(20)), 3),
                                word_embeddings=table.detach(), word_counts=counts)

    prepared = prepare_model(model, resources)
    assert {"encoder.word_dictionary", "encoder.image_dictionary"} <= set(prepared)
    image = model.encoder.image_dictionary.entries.detach().numpy()
    assert np.linalg.norm(centres[:, None] - image[None], axis=-1).min(axis=1).max() < 0.2
    words = sorted(model.encoder.word_dictionary.entries.detach()[:, 0].tolist())
    assert words == pytest.approx([-5.0 - 0.4 * 3 / 4, 5.0 + 0.2 / 2], abs=1e-4)  # the count-weighted means


def test_presets_build_and_are_the_papers_setting() -> None:
    paper, official = load_config("vqa-lxmert-catt").model, load_config("vqa-lxmert-catt-official").model
    assert paper.kind == official.kind == "lxmert_catt"
    assert paper.options["image_dictionary"]["size"] == paper.options["word_dictionary"]["size"] == 500
    assert paper.options["image_dictionary"]["init"] == "kmeans" and paper.options["share"] is True
    assert {k: official.options[k] for k in OFFICIAL} == OFFICIAL
    assert official.options["image_dictionary"]["init"] == official.options["word_dictionary"]["init"] == "random"


@pytest.mark.parametrize(("options", "match"), [
    ({"dictionary_space": "hidden", "image_dictionary": {"size": 5, "init": "kmeans"}},
     r"model\.options\.image_dictionary\.init: dictionary_space 'hidden' has no data to cluster"),
    ({"object_layers": 0}, r"model\.encoder_layers/model\.options\.object_layers: LXMERT\+CATT needs at least one"),
    ({"word_dictionary": {"size": 4, "init": "file"}}, r"model\.options\.word_dictionary\.path: init 'file' needs"),
    ({"cross_queries": "other"}, r"model\.options\.cross_queries"),
])
def test_refused_settings_name_their_key(options: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        build(**options)


def test_geometry_only_mechanisms_are_refused_at_the_cross_sample_sites() -> None:
    cfg = config()
    cfg.decoder_self_attention = type(cfg.decoder_self_attention)("gsa", {})
    with pytest.raises(ConfigError, match=r"model\.decoder_self_attention"):
        build_vqa_model(cfg, SIZE["vocab"], 3)


def test_backbone_madds_are_twice_lxmerts_when_the_dictionaries_are_as_long_as_the_sample() -> None:
    """With K_w = L words and K_v = N regions every CS call has the shapes of its IS call, so the profiled backbone
    (the layers' multiply-adds, also where the model calls a layer's halves as methods) is exactly twice LXMERT's."""
    from vlattn.models.profile import backbone_madds_of

    x = inputs(batch=1, words=4, regions=5)
    cfg = config(image_dictionary={"size": 5, "init": "random"}, word_dictionary={"size": 4, "init": "random"})
    catt = build_vqa_model(cfg, SIZE["vocab"], 3).eval()
    plain = build_vqa_model(ModelConfig(**{**cfg.__dict__, "kind": "lxmert", "options": {"object_layers": SIZE["objects"]}}),
                            SIZE["vocab"], 3).eval()
    assert backbone_madds_of(catt, lambda: catt(x)) == 2 * backbone_madds_of(plain, lambda: plain(x)) > 0
