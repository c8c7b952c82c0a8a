"""The one Triton kernel of :mod:`blockfma.engine.triton`: the skeleton that walks the model's step plan over
K (see there for what it computes and why it is exact), with the families' blocks as compile-time variants.

``gemm_kernel`` takes the operands, the sizes and the strides at run time, and everything else as one compile-time
structure ``S`` (:class:`blockfma.engine.triton.Kernel`): the plan's step (C fused into every block or added after, a
store into the output format) and the block's parameters ``S.BLOCK`` (:class:`blockfma.engine.triton.Block`), whose
``FAMILY`` (the family's name) and ``FAST`` (the path) pick the block function here; Triton prunes the branches that the
structure rules out when it compiles, so each model compiles to its own kernel, as if written for it alone.  A narrow C
(``c_input_format``: Volta's and Turing's fp16 C) is a second block structure, ``S.FIRST``, whose C emin the first step
reads.  How a family adds its GPU block: docs/engines.md, "The kernel skeleton".
"""
# mypy: ignore-errors
from __future__ import annotations

from collections import namedtuple

import triton
import triton.language as tl

from . import triton_families as tf, triton_kernel as tk, triton_scaled as ts

__all__ = ["gemm_kernel", "Tile"]


#: What a block reads, made once per program: the operands' pointers (A, B, the step's product order, the
#: scales of A and B), the fast paths' row pointers of A (and of its exponent codes, and scales) and column
#: pointers of B (and of its exponent codes, and scales) (rows and columns past M and N repeat the last one: their
#: results are not stored), this tile's rows, columns and lanes, the sizes (KM: K, or None under EVEN, where no
#: product lies past K and the fast paths' loads take no mask), the block width at run time and the strides.
Tile = namedtuple("Tile", "a_ptr b_ptr order_ptr sa_ptr sb_ptr a_rows ea_rows b_cols eb_cols sa_rows sb_cols rm rn "
                          "lane M N K KM BL sam sak sbk sbn sebk ssam ssak ssbk ssbn")


@triton.jit
def _block(t, k0, j, d, B: tl.constexpr):
    """The block of products j .. j + BL of the step at k0 with C ``d``, by its family's block function."""
    if B.FAMILY == "truncated-fused" or B.FAMILY == "late-c":
        d = tk.fused_block(t, k0, j, d, B)
    elif B.FAMILY == "scaled-fused":
        d = ts.scaled_block(t, k0, j, d, B)
    elif B.FAMILY == "exact-fused":
        d = tf.exact_block(t, k0, j, d, B)
    elif B.FAMILY == "pairwise":
        d = tf.pairwise_block(t, k0, j, d, B)
    else:
        tl.static_assert(B.FAMILY == "fma-chain", "a family without a GPU block")
        d = tf.fma_block(t, k0, j, d, B)
    return d


@triton.jit(do_not_specialize=["M", "N", "K", "KP", "W", "BL"])  # one compilation per model, not per shape
def gemm_kernel(a_ptr, b_ptr, c_ptr, d_ptr, order_ptr, ea_ptr, sa_ptr, sb_ptr, M, N, K, KP, W, BL, strides,
                S: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVEN: tl.constexpr = False):
    """D = A @ B + C by the model's plan: steps of W products (KP = K padded to whole steps), each in blocks
    of BL; C fused into every block (``S.C_FUSED``), or the step's blocks chained from +0, stored into the
    output format (``S.STORE``) and C added by one IEEE addition.  ``strides``: A's, B's, C's, D's, A's
    exponent codes' (the fast paths', ``triton._exponent_codes``) and the scales' (two each).
    C's exponent is read at the block's C emin, in the first step at ``S.FIRST``'s (``S.NARROW_C``)."""
    sam, sak, sbk, sbn, scm, scn, sdm, sdn, seam, _, ssam, ssak, ssbk, ssbn = strides
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    if EVEN:  # tiles that divide M and N, steps K: no masks, no clamps (the compiler can then vectorize loads, stores)
        out_mask = None
        d = tl.load(c_ptr + rm[:, None] * scm + rn[None, :] * scn)
        rmc = rm
        rnc = rn
    else:
        out_mask = (rm[:, None] < M) & (rn[None, :] < N)
        d = tl.load(c_ptr + rm[:, None] * scm + rn[None, :] * scn, mask=out_mask, other=0.0)
        rmc = tl.minimum(rm, M - 1)
        rnc = tl.minimum(rn, N - 1)
    eb_cols = ea_ptr + M * seam + rnc  # B's exponent codes follow A's (triton._exponent_codes)
    t = Tile(a_ptr, b_ptr, order_ptr, sa_ptr, sb_ptr, a_ptr + rmc * sam, ea_ptr + rmc * seam, b_ptr + rnc * sbn,
             eb_cols, sa_ptr + rmc * ssam, sb_ptr + rnc * ssbn, rm, rn, tl.arange(0, S.BLOCK.LP), M, N, K,
             None if EVEN else K, BL, sam, sak, sbk, sbn, (N + 3) // 4 * 4, ssam, ssak, ssbk, ssbn)
    BLOCK: tl.constexpr = S.BLOCK  # structures passed on: constexprs by name (Triton 3.6 passes no plain objects)
    FIRST: tl.constexpr = S.FIRST
    OUT: tl.constexpr = S.OUT
    for k0 in range(0, KP, W):
        if S.C_FUSED:
            acc = d
        else:
            acc = tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float32)  # the step's blocks start from +0
        for j in range(0, W, BL):
            if S.NARROW_C:
                if k0 == 0:  # the first step's block reads the C given at its own format's emin
                    acc = _block(t, k0, j, acc, FIRST)
                else:
                    acc = _block(t, k0, j, acc, BLOCK)
            else:
                acc = _block(t, k0, j, acc, BLOCK)
        if S.STORE:
            acc = tk.store_output(acc, OUT)
        if S.C_FUSED:
            d = acc
        else:
            d = tk.add_c(acc, d, OUT)
    tl.store(d_ptr + rm[:, None] * sdm + rn[None, :] * sdn, d, mask=out_mask)
