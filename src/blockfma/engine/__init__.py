"""The fast engine: every algorithm family array-at-a-time (numpy), blocks chained over k.

``api`` checks inputs and chains blocks; ``kernels`` holds one block of each family; ``wide`` does exact
multi-word sums for the families that round an exact value once.
"""

from .api import dot, gemm, last_backend, resolve_model

__all__ = ["dot", "gemm", "last_backend", "resolve_model"]
