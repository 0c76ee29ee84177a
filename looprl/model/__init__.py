"The model layer: configs, the family registry and the families, the looped models, their kernels and latents, checkpoints."
