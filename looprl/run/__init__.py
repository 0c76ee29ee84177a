"The run layer: settings, the update loop, workers and transports, data and tasks, rewards, held-out evaluation, logs, plans."
