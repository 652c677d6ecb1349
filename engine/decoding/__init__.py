"""Decoding: the denoiser (`sampler`, `remask`, `expand`), the strategies over the typed step interface
(`steps`: block-causal `blocks`, bidirectional `bidir`, window decoding `window`), captured CUDA-graph
steps (`graphs`)."""
