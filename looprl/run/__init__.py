"The run layer: settings, the update loop, workers, transports, data, tasks, rewards, evaluation, logs, plans."
