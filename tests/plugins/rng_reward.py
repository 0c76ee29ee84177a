"A reward that draws from every global generator, so that a run's results depend on each generator's state."
import random
import numpy as np
import torch
from looprl.tasks.rewards import math_reward

def noisy_math_reward(response: str, label: str) -> float:
    "The math reward plus 10⁻³ × (a Python, a NumPy and a torch uniform draw)."
    return math_reward(response, label) + 1e-3 * (random.random() + float(np.random.random()) + float(torch.rand(())))

def broken_reward(response: str, label: str) -> float:
    "A reward that fails on the first answer containing a 7."
    if "7" in response: raise ValueError("cannot score a 7")
    return 0.0
