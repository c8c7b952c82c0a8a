"""The fast engine: every algorithm family array-at-a-time, the model's step plan over k.

``api`` checks inputs and hands them to the engine that ``registry`` chooses (``explain`` says why); ``kernels`` holds
the numpy blocks of the step families and runs the plan (:mod:`blockfma.plan`) with them; ``array`` the fused families'
kernels for numpy and torch; ``wide`` exact multi-word sums for the families that round an exact value once; ``fast``
the compiled kernels (numba), ``gpu`` the GPU engine (torch), ``distributed`` dask arrays tile by tile.
"""

from .api import dot, explain, gemm, last_backend, resolve_model

__all__ = ["dot", "gemm", "explain", "last_backend", "resolve_model"]
