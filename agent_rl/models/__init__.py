"""Model assets: loading checkpoints, LoRA identity, the tiny local model and the model families' templates."""
