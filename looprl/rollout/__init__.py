"The rollout layer: counter-based sampling, the engines (looprl's and vLLM), weight publications, adaptive exit, traces."
