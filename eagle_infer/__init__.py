"""EAGLE speculative decoding: `from eagle_infer import load` (the Python API, eagle_infer/entry/api.py)."""
from .entry.api import load

__all__ = ["load"]
