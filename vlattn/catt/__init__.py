"""Causal Attention (CATT, Yang et al. 2021, "Causal Attention for Vision-Language Tasks") support: the global
dictionaries of cross-sample attention (a learned module with data-dependent k-means initialisation), the k-means
itself (scikit-learn, the optional extra ``catt``), dictionary files written by ``vlattn catt dictionary`` and the
fusion of the in-sample and cross-sample outputs.

The mechanisms are in :mod:`vlattn.attention.catt`, the Transformer+CATT captioner in :mod:`vlattn.models.catt`.
"""
