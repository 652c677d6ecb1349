"""KTO alignment of the diffusion model (training side; serving never imports this package).

`records` (data set format, split by group), `selfplay` (labelled samples of the current model),
`elbo` (shared-mask ELBO log-likelihoods), `loss` (KTO objective, λ from the class balance),
`trainer` (`train_kto`: a LoRA stacked on the merged default model). Serving: `engine.reward`,
`engine.loading.stacked`.
"""
