"""The tasks layer: prompt and message rows, task generators, answer extraction, rewards, and how a
run names its reward."""
