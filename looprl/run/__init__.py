"The run layer: settings, the update loop, workers and transports, plans, checkpoints, evaluation, logs."
