"""Methods beside plain masked reconstruction: EMA teachers (data2vec), HOG targets (MaskFeat), attention-guided masking (AttMask)."""
