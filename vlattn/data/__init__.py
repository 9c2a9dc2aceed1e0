"""Data layer: Karpathy splits, vocabularies, region-feature stores, VQA files, synthetic scenes."""
