"""Split-K orders of a device's GEMM library, as the order probes recorded them (FPRev's method,
:mod:`blockfma.probes.order`, run by :mod:`blockfma.experiments.torch_orders`).

A split-K GEMM (:func:`blockfma.torch.compute.split_k`) cuts K into ``parts`` contiguous ranges, each summed
from +0, the partial sums added one after the other in binary32.  :data:`RECORDED` holds, per (device, fp32
route), the (m, n, k) shapes whose order the probe recovered as such a split (``kind == "split-k"``,
``combine == "sequential"``) and how many parts; ``tests/test_torch_emulate_more.py`` holds it to
``data/hardware/h100-torch-order.json.gz``.  Only those exact shapes are known (cuBLAS picks its split by
heuristics of the shape, the GPU and its version; the record: torch 2.11.0+cu130, CUDA 13.0, an H100 80GB
HBM3): other shapes run unsplit.  fp16 and bf16 GEMMs were unsplit chains of fused 16-blocks at every
recorded shape; fp32 at 128 x 128 x 256 without TF32 an interleaved order, not a contiguous split (not used).
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["RECORDED", "recorded", "check_plan"]

Shape = tuple[int, int, int]

#: (device preset, "tf32" or "fp32") -> {(m, n, k): parts}; "fp32" is torch's fp32 matmul with TF32 off
RECORDED: dict[tuple[str, str], dict[Shape, int]] = {
    ("H100", "tf32"): {(16, 16, 64): 2, (128, 128, 64): 2, (16, 16, 256): 8, (128, 128, 256): 4,
                       (16, 16, 1024): 16, (128, 128, 1024): 16},
    ("H100", "fp32"): {(16, 16, 64): 2, (128, 128, 64): 2, (16, 16, 256): 8, (16, 16, 1024): 32,
                       (128, 128, 1024): 16},
}


def recorded(device: str, kind: str) -> tuple[tuple[Shape, int], ...]:
    """The recorded split-K plan of ``device``'s fp32 GEMMs (``kind`` "tf32" or "fp32") as a Route holds it:
    sorted ((m, n, k), parts) pairs; empty where nothing is recorded."""
    return tuple(sorted(RECORDED.get((device, kind), {}).items()))


def check_plan(plan: Mapping[Shape, int], name: str = "split_k") -> tuple[tuple[Shape, int], ...]:
    """A user's ``{(m, n, k): parts}`` as a Route holds it, each key three non-negative ints and each
    ``parts`` an int from 1 to k (ValueError naming the entry otherwise)."""
    from ..arguments import ArgumentError, Shown

    if not isinstance(plan, Mapping):
        raise ArgumentError(name, Shown(repr(plan)), "must be a dict {(m, n, k): parts}",
                            fix="e.g. {(16, 16, 256): 8}")
    out = []
    for shape, parts in plan.items():
        ok_shape = isinstance(shape, tuple) and len(shape) == 3 and all(
            isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in shape)
        ok_parts = (isinstance(parts, int) and not isinstance(parts, bool) and ok_shape
                    and 1 <= parts <= max(1, shape[2]))
        if not (ok_shape and ok_parts):
            raise ArgumentError(name, Shown(f"{{{shape!r}: {parts!r}}}"), "each entry must be (m, n, k): parts "
                                "with ints m, n, k >= 0 and 1 <= parts <= k", fix="e.g. {(16, 16, 256): 8}")
        out.append((shape, parts))
    return tuple(sorted(out))
