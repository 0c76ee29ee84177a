"The rollout layer: counter-based sampling, the engines (looprl's and vLLM), publications, adaptive exit, traces."
