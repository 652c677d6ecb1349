"""Training pipeline for the default model: corpus, task generators, BD3-LM objective, LoRA trainer."""
