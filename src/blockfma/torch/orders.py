"""Library plans: how a device's GEMM library (cuBLAS) splits K for a shape, each decision with its evidence.

A split-K GEMM (:func:`blockfma.torch.compute.split_k`) cuts K into ``parts`` contiguous runs of ``tile``-wide
k-tiles (ceil(T / parts) tiles each, T = ceil(k / tile); the last runs may be shorter), each summed from +0 into
fp32 by the route's model, the partial sums added one after the other in binary32 (the only combination the
records show).  :data:`RECORDED` holds, per (device preset, route kind), the (m, n, k) shapes whose order the
order probes recovered (:mod:`blockfma.experiments.torch_orders`, FPRev's method) and how many parts (1: the
record shows one chain over K); ``scripts/record_plans.py`` (``from_survey``) derives it from such a survey or
from its own replay records, and ``tests/test_torch_emulate_more.py`` holds it to :data:`RECORD`.  Route
kinds: "fp16", "bf16", "tf32" (fp32 with TF32 allowed), "fp32" (TF32 off), fp8 ``_scaled_mm`` as "e4m3fn",
"e5m2" or "e4m3fn*e5m2" (A's format, B's).  cuBLAS picks its split by heuristics of the shape, GPU and version:
a shape, device or kind no record decides runs unsplit, said as an assumption (:meth:`Plans.decide`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

from ..evidence import Basis, Evidence

__all__ = ["RECORD", "RECORDED", "TILE", "Decision", "Plans", "check_plan"]

Shape = tuple[int, int, int]
RECORD = ("h100-torch-order.json.gz (H100 80GB HBM3, torch 2.11.0+cu130, CUDA 13.0): FPRev order probe of "
          "torch.matmul, the tree verified")
#: (device preset, route kind) -> {(m, n, k): parts}, from :data:`RECORD`; 300 random rows verify each.  fp32 at
#: 128 x 128 x 256 (interleaved, no contiguous split) and bf16 at k = 1024 (not probed) decide nothing.
RECORDED: dict[tuple[str, str], dict[Shape, int]] = {
    ("H100", "tf32"): {(16, 16, 64): 2, (128, 128, 64): 2, (16, 16, 256): 8, (128, 128, 256): 4,
                       (16, 16, 1024): 16, (128, 128, 1024): 16, **dict.fromkeys(
                           ((1024, 1024, 64), (1024, 1024, 256), (1024, 1024, 1024)), 1)},
    ("H100", "fp32"): {(16, 16, 64): 2, (128, 128, 64): 2, (16, 16, 256): 8, (16, 16, 1024): 32,
                       (128, 128, 1024): 16, **dict.fromkeys(
                           ((1024, 1024, 64), (1024, 1024, 256), (1024, 1024, 1024)), 1)},
    ("H100", "fp16"): dict.fromkeys(((m, m, k) for m in (16, 128, 1024) for k in (64, 256, 1024)), 1),
    ("H100", "bf16"): dict.fromkeys(((m, m, k) for m in (16, 128, 1024) for k in (64, 256)), 1),
}
#: (device preset, route kind) -> k-tile of the split (peer: mmaemu 0.1.0 on an H100 PCIe, cuBLASLt 12.8.3.14:
#: the sm_90 fp8 kernels split runs of 128-wide k-tiles); 1 elsewhere (the recorded splits are even)
TILE = {("H100", kind): 128 for kind in ("e4m3fn", "e5m2", "e4m3fn*e5m2", "e5m2*e4m3fn")}


@dataclass(frozen=True)
class Decision:
    """How a GEMM of ``shape`` runs: ``parts`` contiguous runs of ``tile``-wide k-tiles, and why."""

    shape: Shape
    parts: int
    tile: int
    evidence: Evidence

    @property
    def text(self) -> str:
        if self.parts == 1:
            return "unsplit: one chain over K"
        tiles = f" of {self.tile}-wide k-tiles" if self.tile > 1 else ""
        return (f"split-K: K cut into {self.parts} contiguous parts{tiles}, each summed from +0 into fp32, the "
                "partial sums added in fp32 one after the other, then the route's epilogue")


@dataclass(frozen=True)
class Plans:
    """The split-K decisions of one library for one route kind: ``library`` the device as the user named it
    (None: ``model=``, no library), ``kind`` the route kind, ``given`` the user's ``split_k=`` entries (they win
    over the record), ``tile`` the k-tile of a split."""

    library: str | None = None
    kind: str = ""
    given: tuple[tuple[Shape, int], ...] = ()
    tile: int = 1

    @functools.lru_cache(maxsize=4096)  # noqa: B019 (Plans are few, frozen values; every GEMM asks)
    def decide(self, m: int, n: int, k: int) -> Decision:
        """The decision for (m, n, k) with its evidence: the user's, the record's, or "no record: run unsplit"."""
        shape, table = (m, n, k), RECORDED.get((self.library, self.kind), {})
        if shape in dict(self.given):
            parts = dict(self.given)[shape]
            return Decision(shape, parts, self.tile, Evidence(f"the split-K plan of {shape} ({parts} parts)",
                                                              Basis.ASSUMED, "given by split_k="))
        if shape in table:
            how = "unsplit" if table[shape] == 1 else f"split-K in {table[shape]} contiguous parts"
            return Decision(shape, table[shape], self.tile, Evidence(
                f"{self.library} {self.kind} GEMMs of {shape} run {how}", Basis.RECORDED, RECORD, 300))
        where = (f"{self.library} {self.kind}" if (self.library, self.kind) in RECORDED else
                 f"{self.library}'s {self.kind} GEMMs" if self.library else "model=, or a route without fp32 sums")
        return Decision(shape, 1, self.tile, Evidence(
            f"the split-K plan of {shape}", Basis.ASSUMED, f"no record for this shape ({where}; the records: "
            "H100 80GB HBM3, torch 2.11.0+cu130, CUDA 13.0): run unsplit"))


def check_plan(plan: Mapping[Shape, int], name: str = "split_k") -> tuple[tuple[Shape, int], ...]:
    """A user's ``{(m, n, k): parts}`` as :class:`Plans` holds it, each key three non-negative ints and each
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
