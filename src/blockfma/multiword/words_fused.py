"""The split of binary32 data into tf32 or bf16 words (3xtf32, bf16x9, ...) on torch tensors in one Triton pass
per operand, bit for bit :func:`.split.split_words`: :func:`words_kernel` reads each float64 entry once and
writes its p words, in the unit's dtype, as the unit takes them, with what the checks need (the largest and
smallest nonzero |x|, the entries that are not binary32 values) in one row per block; :func:`split` reads
those for both operands in one synchronisation and answers None where the checks need the unfused path (data
beyond binary32, or beyond the words' range, or small enough to lose bits to underflow), which then runs
them.  Used where :func:`.tensors.fused_here`; imported then (Triton fixes its mode at the kernels'
definition).
"""
# mypy: ignore-errors
from __future__ import annotations

from typing import Any

import triton
import triton.language as tl

from .. import formats as _formats

__all__ = ["CUT", "BLOCK", "words_kernel", "split"]

CUT = {"tf32": 13, "bf16": 16}
"""Bits of the binary32 pattern below the last fraction bit of each word format whose exponent range is
binary32's (so a word is the pattern rounded or cut there; subnormals have the same quantum in both)."""
BLOCK = 1024


@triton.jit
def _max(a, b):  # the reductions' combining steps, ours (triton.language's own are not interpreted where
    return tl.maximum(a, b)  # Triton was imported before TRITON_INTERPRET was set)


@triton.jit
def _min(a, b):
    return tl.minimum(a, b)


@triton.jit
def _add(a, b):
    return a + b


@triton.jit
def words_kernel(x_ptr, out_ptr, stats_ptr, N, P: tl.constexpr, CUT: tl.constexpr, RNE: tl.constexpr,
                 BLOCK: tl.constexpr):
    """out[q, i] = the q-th word of x[i] (as :func:`.arrays.round_to` rounds binary32 values: the pattern's low
    CUT bits rounded to nearest even, a carry into the exponent the rounding up, or cut), each residual in
    float32 (exact); stats[block] = (max |x|, min nonzero |x|, entries that are not binary32 values)."""
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = i < N
    x = tl.load(x_ptr + i, mask=inside, other=0.0)
    ax = tl.abs(x)
    r = tl.where(ax <= 3.4028234663852886e38, x, 0.0).to(tl.float32)  # beyond binary32: not its value, no inf
    tl.store(stats_ptr + tl.program_id(0) * 3, tl.reduce(ax, 0, _max))
    tl.store(stats_ptr + tl.program_id(0) * 3 + 1, tl.reduce(tl.where(ax == 0, float("inf"), ax), 0, _min))
    tl.store(stats_ptr + tl.program_id(0) * 3 + 2, tl.reduce((r.to(tl.float64) != x).to(tl.float64), 0, _add))
    for q in tl.static_range(P):
        b = r.to(tl.int32, bitcast=True)
        if RNE:
            b = b + ((1 << (CUT - 1)) - 1 + ((b >> CUT) & 1))
        w = (b & ~((1 << CUT) - 1)).to(tl.float32, bitcast=True)
        tl.store(out_ptr + q * N + i, w.to(out_ptr.dtype.element_ty), mask=inside)
        r = r - tl.where(tl.abs(w) < float("inf"), w, 0.0)  # (an infinite word: beyond the range, refused)


def split(torch: Any, A: Any, B: Any, low: str, p: int, rne: bool, dtype: Any) -> tuple[list, list] | None:
    """The p words of A and B (contiguous float64 tensors of binary32 values) in ``dtype``, or None where the
    unfused split must run (see the module)."""
    f, words, stats = _formats.get(low), [], []
    for X in (A, B):
        out = torch.empty((p, *X.shape), dtype=dtype, device=X.device)
        grid = triton.cdiv(X.numel(), BLOCK)
        st = torch.empty((grid, 3), dtype=torch.float64, device=X.device)
        words_kernel[(grid,)](X, out, st, X.numel(), P=p, CUT=CUT[low], RNE=rne, BLOCK=BLOCK)
        stats += [st[:, 0].max(), st[:, 1].min(), st[:, 2].sum()]
        words.append(list(out.unbind(0)))
    got = torch.stack(stats).tolist()
    ok = all(hi <= f.max and lo >= 2.0 ** (f.emin + 23) and not bad for hi, lo, bad in (got[:3], got[3:]))
    return (words[0], words[1]) if ok else None
