"""Causal Attention, one CATT module (Yang et al. 2021, "Causal Attention for Vision-Language Tasks", Sec. 3.2,
Fig. 4): in-sample attention (IS-ATT, Eq. 6) and cross-sample attention (CS-ATT, Eq. 7) with the same queries,

    Z^  = V_I Softmax(Q_I^T K_I)    K_I, V_I: the site's keys/values (the current sample)         (Eq. 6)
    X^  = V_C Softmax(Q_C^T K_C)    K_C = V_C: a global dictionary of K entries, learned end to end (Eq. 7)
    out = fuse(Z^, X^)              [Z^; X^] or Linear([Z^; X^]) (:mod:`vlattn.catt.fusion`)      (Eq. 5)

the NWGM estimate of the front-door adjustment P(Y|do(X)) (Eq. 3, 5). Two registered mechanisms:

- ``catt``: IS-ATT and CS-ATT are multi-head scaled dot-product attention with the output projection W^H
  (supplementary Eq. 24); any site (encoder/decoder self-attention, cross-attention, VQA);
- ``catt_additive``: both are additive attention (supplementary Sec. 9, Eq. 23: a_n = w^T tanh(W_k k_n + W_q q)),
  BUTD+CATT's top-down site: cross sites, LSTM-state queries of another size than the regions.

Options (:class:`CausalAttention.Options`): ``dictionary`` (:class:`~vlattn.catt.dictionary.DictionaryOptions`:
K, k-means / random / file initialisation), ``source`` (``image``: the entries live in the region-feature space and
k-means runs over the training regions, e.g. BUTD's raw 2048-d features; ``word``: over the word embeddings), the
entries having the site's key size; ``share`` (one parameter set for IS-ATT and CS-ATT, so Q_C = Q_I and the
outputs stay in one space — the paper's choice for the Transformer and LXMERT; False is Table 6's "w/o Share");
``fusion`` (``concat``, the paper's; ``concat_linear`` returns the width of one attention, as a Transformer site
needs). ``catt`` shares by default; ``catt_additive`` does not (the paper states sharing for the Transformer and
LXMERT only; BUTD's outputs are weighted sums of raw features, in one space either way).

Masks, ``bias`` and the site's ``cache`` apply to IS-ATT only: the dictionary is never masked, has no geometry, and
its projections do not depend on the sample (made from a batch of one and broadcast to every row). Sites that make
their cache through :func:`~vlattn.attention.cache.site_cache` get a :class:`CausalKVCache`, which also keeps
CS-ATT's projections of the dictionary, so a decoding (or an LSTM's teacher-forced pass, one call per word)
projects the K entries once instead of at every call. ``need_weights``
returns IS-ATT's weights, the attention over the sample that the paper visualises (Fig. 7). Shared, the parameters
added to the inner attention are exactly the dictionary's K x D_k (plus 2w x w + w for ``concat_linear``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from torch import Tensor, nn

from vlattn.attention.additive import AdditiveAttention
from vlattn.attention.base import AttentionContext, AttentionDims, AttentionOutput, Capabilities, Site
from vlattn.attention.cache import KeyValueSource, Projector, SharedKVCache, reorder_state
from vlattn.attention.mha import MultiHeadAttention
from vlattn.catt.dictionary import DictionaryOptions, GlobalDictionary, Source
from vlattn.catt.fusion import Fusion, StreamFusion

DICTIONARY_CONTEXT = AttentionContext(Site.CROSS)  # CS-ATT: the sample's queries over the dictionary


class CausalKVCache:
    """The cache of one CATT site: IS-ATT's keys/values through ``in_sample`` (the cache the site made) and CS-ATT's
    projections of the dictionary in ``dictionary``, computed on first use from the batch of one (1, K, ...) and
    shared by every row, never reordered. Within one forward pass with gradients, they flow through that one
    projection."""

    def __init__(self, in_sample: KeyValueSource, dictionary: SharedKVCache | None = None) -> None:
        self.in_sample = in_sample
        self.dictionary = SharedKVCache() if dictionary is None else dictionary

    def fetch(self, project: Projector) -> tuple[Tensor, Tensor]:
        """IS-ATT's keys/values through the site's cache."""
        return self.in_sample.fetch(project)

    def reorder(self, index: Tensor) -> CausalKVCache:
        """Rows ``index`` (B',) of the site's cache; the dictionary's projections as they are."""
        return CausalKVCache(reorder_state(self.in_sample, index), self.dictionary)


class CausalAttention(nn.Module):
    """IS-ATT over the site's keys/values and CS-ATT over a global dictionary, fused (see the module docstring).

    ``forward(query (B,Nq,Dq), key (B,Nk,Dk), value (B,Nk,Dk))`` -> ``out`` (B, Nq, out_dim), weights (B, H, Nq, Nk)
    of IS-ATT when asked for.
    """

    inner: ClassVar[type[nn.Module]] = MultiHeadAttention
    capabilities: ClassVar[Capabilities] = MultiHeadAttention.capabilities

    @dataclass
    class Options:
        """``dictionary``: size and initialisation; ``source``: ``image`` or ``word`` (what k-means runs over);
        ``share``: IS-ATT and CS-ATT share their parameters; ``fusion``: ``concat`` or ``concat_linear``."""

        dictionary: DictionaryOptions = field(default_factory=DictionaryOptions)
        source: Source = "image"
        share: bool = True
        fusion: Fusion = "concat"

    def __init__(self, dims: AttentionDims, options: Options | None = None) -> None:
        super().__init__()
        options = options or self.Options()
        self.in_sample = self.inner(dims)
        self.cross_sample = None if options.share else self.inner(dims)
        self.dictionary = GlobalDictionary(dims.k_dim, options.source, options.dictionary,
                                           where="options.dictionary")  # K_C = V_C, (K, Dk)
        self.fusion = StreamFusion(self.in_sample.out_dim, options.fusion)
        self.out_dim = self.fusion.out_dim
        self.num_heads = getattr(self.in_sample, "num_heads", 1)

    def wrap_cache(self, cache: KeyValueSource) -> CausalKVCache:
        """The site's ``cache`` with room for the dictionary's projections (:func:`~vlattn.attention.cache.site_cache`)."""
        return CausalKVCache(cache)

    def zero_key_channels(self, count: int) -> None:
        """Declare the last ``count`` channels of the site's keys non-features (``model.box_input``'s box channels,
        appended by a model whose site attends the raw regions, e.g. Up-Down's top-down site): the dictionary
        entries get ``count`` fixed zero channels (as Transformer+CATT's image dictionary does) and an image
        dictionary's k-means runs over the raw feature width. Call at build time, before ``prepare``."""
        dictionary = self.dictionary
        self.dictionary = GlobalDictionary(dictionary.entries.shape[1] + dictionary.zero_channels, dictionary.source,
                                           dictionary.options, zero_channels=count)

    @property
    def cross_sample_attention(self) -> nn.Module:
        """The module of CS-ATT: IS-ATT's own when shared."""
        return self.in_sample if self.cross_sample is None else self.cross_sample

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        *,
        mask: Tensor | None = None,
        bias: Tensor | None = None,
        cache: KeyValueSource | None = None,
        context: AttentionContext | None = None,
        need_weights: bool = False,
    ) -> AttentionOutput:
        """Fused Z^ and X^ for ``query`` (B, Nq, Dq); ``mask``/``bias`` concern ``key``/``value`` only, and so does
        ``cache`` unless it is a :class:`CausalKVCache` (then its ``dictionary`` keeps CS-ATT's projections)."""
        dictionary_cache = None
        if isinstance(cache, CausalKVCache):
            cache, dictionary_cache = cache.in_sample, cache.dictionary
        in_sample = self.in_sample(
            query, key, value, mask=mask, bias=bias, cache=cache, context=context, need_weights=need_weights
        )  # Z^, (B, Nq, w)
        entries = self.dictionary()[None]  # (1, K, Dk), broadcast over the batch
        cross_sample = self.cross_sample_attention(
            query, entries, entries, cache=dictionary_cache, context=DICTIONARY_CONTEXT
        ).out  # X^, (B, Nq, w)
        return AttentionOutput(self.fusion(in_sample.out, cross_sample), in_sample.weights)


class AdditiveCausalAttention(CausalAttention):
    """CATT with additive IS-ATT and CS-ATT (BUTD+CATT): ``forward(query (B,Nq,Dq), key (B,Nk,Dk), value (B,Nk,Dk))``
    -> ``out`` (B, Nq, 2 Dk) with ``concat``."""

    inner = AdditiveAttention
    capabilities = AdditiveAttention.capabilities

    @dataclass
    class Options(CausalAttention.Options):
        """As :class:`CausalAttention.Options`; not shared by default."""

        share: bool = False
