__version__ = "0.1.0"

from . import families  # registers the shipped model families (looprl.registry)
