"The model layer: configs, the family registry and families, the looped models, kernels, latents, checkpoints."
