"The training layer: the objectives and the learners (one process, FSDP2 / DTensor, Megatron-core)."
