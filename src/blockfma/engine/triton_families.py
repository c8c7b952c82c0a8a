"""The Triton blocks of the step families of :mod:`blockfma.engine.triton`: the FMA chain, pairwise and
exact-fused (see there for the plan around the blocks; this module holds their blocks).

Every operation is exact integer arithmetic on the operands' binary32 bits, rounded once by the shared integer rounding
(``triton_kernel.round_value``); no float addition or multiplication of values happens, so Triton's FMA contraction, the
GPU's flush-to-zero settings and the interpreter's numpy arithmetic cannot change a bit.

* **Two terms** (an FMA ``a*b + d``: a product of at most 48 bits and an addend of 24; the pairwise
  family's ``c + s``): :func:`_sum2`.  Both are placed at the unit ``2**(top - 60)``, ``top`` the larger
  one's leading bit plus one; the larger one is then exact (its last bit lies at most 48 bits below
  ``top``), the smaller one, where it reaches below that unit, is floored there and its lost remainder
  kept as a sticky bit: the sum ``X`` (floored) and the exact sum then lie in the same open interval
  ``(X, X + 1)`` units, which holds no multiple of the unit; a term below the unit lies 12 bits or more
  below ``top``, so the sum is at least ``2**(top - 2)`` and every rounding boundary of a format of at
  most 24 bits (and of 53 bits) is such a multiple: ``2X + 1`` at half the unit rounds as the exact sum
  in every mode, flushed or not.
* **Many terms** (an exact-fused block: L products and C, any exponent span): a Kulisch accumulator of
  ``NL`` limbs of 32 bits at fixed places ``2**(LO + 32 i)`` covering every binary32 encoding of the
  model's formats (``LO`` the lowest last place a product or C can have) and the carries of up to
  ``2**31`` terms.  Each term adds its bits to the limbs it covers (integer adds: exact in any order, so
  a block of more than ``LP`` products is summed in chunks of ``LP`` lanes into an accumulator tensor,
  and a block of at most ``LP`` goes straight to the next step); the limbs are then read from the lowest
  up, carrying, for the sum and its negation at once: the final carry gives the sign, and the leading
  limbs of the magnitude, 31 to 62 bits, with a sticky bit for every nonzero limb below, rounded to odd
  at 53 bits, give the rounding its input.
* Rounding to odd at 53 bits (:func:`_odd53`) keeps every later rounding to 24 bits or fewer exact, in
  every mode, with subnormals or flush (tininess before rounding: a value below ``2**emin`` stays below).

Special values follow IEEE 754 per operation (FMA chain, pairwise), or
:func:`blockfma.engine.rules.fused_specials` per block (exact-fused), and exact zeros the IEEE sign
(:func:`blockfma.engine.rules.zero_sign`) or +0 (``exact_zero="positive"``).

Its blocks (:func:`fma_block`, :func:`pairwise_block`, :func:`exact_block`) are variants of the one kernel skeleton,
:func:`.triton_gemm.gemm_kernel`; they call the shared helpers of :mod:`.triton_kernel` as attributes of that module.
"""
# mypy: ignore-errors
# ruff: noqa: E741, RUF059
from __future__ import annotations

import triton
import triton.language as tl

from . import triton_kernel as tk

__all__ = ["fma_block", "pairwise_block", "exact_block"]


@triton.jit
def _fold(x, LOG2: tl.constexpr, OP: tl.constexpr):
    """x (BM, 2**LOG2, BN) folded over axis 1 by a balanced tree of OP (0: +, 1: max, 2: min), (BM, BN): exact
    for integers, and elementwise work only (Triton's interpreter runs a tl.reduce with a jitted combine
    function element by element, which the wide limb and lane axes here cannot afford)."""
    for _ in tl.static_range(LOG2):
        lo, hi = tl.split(tl.permute(tl.reshape(x, (x.shape[0], x.shape[1] // 2, 2, x.shape[2])), (0, 1, 3, 2)))
        if OP == 0:
            x = lo + hi
        elif OP == 1:
            x = tl.maximum(lo, hi)
        else:
            x = tl.minimum(lo, hi)
    return tl.reshape(x, (x.shape[0], x.shape[2]))


@triton.jit
def _odd53(mag, unit):
    """``mag * 2**unit`` (int64, 0 <= mag < 2**63) rounded to odd at 53 bits: (mag' < 2**53, unit')."""
    sh = tl.where(mag >= (1 << 53), tk.lead(tl.maximum(mag >> 11, 1)) + 11 - 52, 0)
    t = mag >> sh
    t = t | ((t << sh) != mag).to(tl.int64)
    return t, unit + sh


@triton.jit
def _floor_at(m, sh, neg):
    """(floor((-1)**neg * m * 2**-sh) as a signed int64, whether it dropped anything) for 0 <= m < 2**49,
    where the result fits (a left shift for sh < 0)."""
    t = tk.cut(m, sh, neg, True)  # the magnitude, cut toward minus infinity
    right = tl.minimum(tl.maximum(sh, 0), 62)
    left = tl.minimum(tl.maximum(-sh, 0), 62)
    inexact = (tk.cut(m, sh, neg, False) << right) != (m << left)
    return tl.where(neg, -t, t), inexact


@triton.jit
def _sum2(m1, l1, n1, m2, l2, n2):
    """(negative, magnitude < 2**53, unit, zero) of the exact sum (-1)**n1 m1 2**l1 + (-1)**n2 m2 2**l2
    (int64 0 <= m < 2**49), the magnitude rounded to odd at 53 bits (the module docstring says why)."""
    none = -(1 << 20)
    t1 = tl.where(m1 > 0, tk.lead(tl.maximum(m1, 1)) + l1 + 1, none)
    t2 = tl.where(m2 > 0, tk.lead(tl.maximum(m2, 1)) + l2 + 1, none)
    top = tl.maximum(t1, t2)
    top = tl.where(top == none, 0, top)  # two zeros: any unit in range
    u = top - 60
    x1, i1 = _floor_at(m1, u - l1, n1)
    x2, i2 = _floor_at(m2, u - l2, n2)
    x = x1 + x2
    sticky = i1 | i2
    v = tl.where(sticky, 2 * x + 1, x)
    neg = v < 0
    mag, unit = _odd53(tl.where(neg, -v, v), tl.where(sticky, u - 1, u))
    return neg, mag, unit, v == 0


@triton.jit
def _finish(neg, mag, unit, zero, only_zeros, all_neg, any_neg, B: tl.constexpr):
    """(the value, float64, and +0 of its shape): ``mag * 2**unit`` of sign ``neg`` rounded once into the format; an
    exact zero sum (``zero``) is -0 by the IEEE rule (rules.zero_sign: every term a zero and all of them -0, or in MODE
    4, toward minus infinity, any -0 term or a cancellation) under IEEE_ZERO, else +0; formats without -0 give +0."""
    R: tl.constexpr = B.R  # a structure passed on: named as a constexpr (Triton 3.6 passes no plain objects)
    v = tk.round_value(mag, unit, neg, R)
    plus = (mag * 0).to(tl.float64)
    v = tk.zero_pick(v, tl.where(zero, 0, 1), plus, only_zeros, all_neg, any_neg, B)
    return v, plus


@triton.jit
def fma_block(t, k0, j, d, B: tl.constexpr):
    """One IEEE fusedMultiplyAdd ``R(a*b + d)`` of product j of the step at k0 of the tile ``t``: a (BM, 1),
    b (1, BN), d (BM, BN) binary32 values; float32."""
    a, b = tk.load_block(t, k0, j, B)
    na, ma, la, ea, za, nan_a, inf_a = tk.decode(a, -126)
    nb, mb, lb, eb, zb, nan_b, inf_b = tk.decode(b, -126)
    nd, md, ld, ed, zd, nan_d, inf_d = tk.decode(d, -126)
    pm = ma * mb  # (BM, 1) x (1, BN): (BM, BN)
    pn = na ^ nb
    pl = la + lb
    pz = za | zb
    neg, mag, unit, zero = _sum2(pm, pl, pn, md, ld, nd)
    v, plus = _finish(neg, mag, unit, zero, pz & zd, pn & nd, pn | nd, B)
    nan = nan_d
    pos = inf_d & ~nd
    ninf = inf_d & nd
    if B.SPECIALS:  # the one product's NaN (a NaN factor, inf * 0) and infinity
        pnan = tl.reshape(tk.product_nan(nan_a, inf_a, za, nan_b, inf_b, zb), (pm.shape[0], pm.shape[1]))
        pinf = (inf_a | inf_b) & ~pnan
        nan = nan | pnan
        pos = pos | (pinf & ~pn)
        ninf = ninf | (pinf & pn)
    return tk.with_specials(v, plus, nan, pos, ninf)


@triton.jit
def pairwise_block(t, k0, j, c, B: tl.constexpr):
    """One pairwise block of the step at k0, at j, of the tile ``t``: a (BM, L), b (L, BN), c (BM, BN),
    L = 2**LOG2L.  Each product rounded to nearest even into the C format (``B.FC``: an IEEE multiplication,
    a zero product's sign the xor of the factors'), a balanced tree of IEEE additions in that format
    (``add_c``: nearest even), then ``R(c + s)``."""
    a, b = tk.load_block(t, k0, j, B)
    na, ma, la, ea, za, nan_a, inf_a = tk.decode(a, -126)
    nb, mb, lb, eb, zb, nan_b, inf_b = tk.decode(b, -126)
    pm, pn, pl, _ = tk.products(na, ma, la, za, nb, mb, lb, zb)
    FC: tl.constexpr = B.FC
    pv = tk.round_value(pm, pl, pn, FC)
    plus3 = (pm * 0).to(tl.float64)
    if not B.FC.NEG_ZERO:
        pv = tl.where(pv == 0, plus3, pv)
    if B.SPECIALS:
        pnan = tk.product_nan(nan_a, inf_a, za, nan_b, inf_b, zb)
        pinf = (inf_a[:, :, None] | inf_b[None, :, :]) & ~pnan
        x = tk.with_specials(pv, plus3, pnan, pinf & ~pn, pinf & pn)
    else:
        x = pv.to(tl.float32)
    LOG2L: tl.constexpr = B.LOG2L
    for _ in tl.static_range(LOG2L):  # one level of the tree: lanes 2i and 2i + 1
        y = tl.permute(tl.reshape(x, (x.shape[0], x.shape[1] // 2, 2, x.shape[2])), (0, 1, 3, 2))
        lo, hi = tl.split(y)
        x = tk.add_c(lo, hi, FC)
    s = tl.reshape(x, (x.shape[0], x.shape[2]))
    ns, ms, ls, es, zs, nan_s, inf_s = tk.decode(s, -126)
    nc, mc, lc, ec, zc, nan_c, inf_c = tk.decode(c, -126)
    neg, mag, unit, zero = _sum2(mc, lc, nc, ms, ls, ns)
    v, plus = _finish(neg, mag, unit, zero, zs & zc, ns & nc, ns | nc, B)
    return tk.with_specials(v, plus, nan_s | nan_c, (inf_s & ~ns) | (inf_c & ~nc), (inf_s & ns) | (inf_c & nc))


@triton.jit
def _piece(m, l, i: tl.constexpr, LO: tl.constexpr):
    """The bits of m * 2**l (0 <= m < 2**49) in limb i, of weight 2**(LO + 32 i): an int64 in [0, 2**32)."""
    s = l - (LO + 32 * i)  # the term's last place above the limb's
    sl = tl.minimum(tl.maximum(s, 0), 31)
    sr = tl.minimum(tl.maximum(-s, 0), 63)
    piece = tl.where(s >= 0, (m & ((1 << (32 - sl)) - 1)) << sl, (m >> sr) & 0xFFFFFFFF)
    return tl.where(s >= 32, 0, piece)


@triton.jit
def _limbs_add(acc, m, l, neg, ax, NL: tl.constexpr, LO: tl.constexpr, LOG2LP: tl.constexpr):
    """The Kulisch accumulator ``acc`` (BM, NLP, BN; limb i of weight 2**(LO + 32 i)) plus the terms
    (-1)**neg * m * 2**l (BM, 2**LOG2LP lanes, BN), each cut into the 32-bit pieces of its limbs."""
    for i in tl.static_range(NL):
        piece = _piece(m, l, i, LO)
        acc = acc + tl.where(ax == i, _fold(tl.where(neg, -piece, piece), LOG2LP, 0)[:, None, :], 0)
    return acc


@triton.jit
def _lead_limbs(x, i: tl.constexpr, top, hi, nx, low, below, prev):
    """The leading-limb state after limb i (value x in [0, 2**32)) of a sum read from its lowest limb up:
    top (the highest nonzero limb so far, -1: none), hi and nx (that limb and the one below), low (a
    nonzero limb below those two), below (a nonzero limb below i - 1), prev (limb i)."""
    nz = x != 0
    top = tl.where(nz, i, top)
    hi = tl.where(nz, x, hi)
    nx = tl.where(nz, prev, nx)
    low = tl.where(nz, below, low)
    return top, hi, nx, low, below | (prev != 0), x


@triton.jit
def _exact_sum(pm, pl, pn, mc, lc, nc, acc, ax, NL: tl.constexpr, LO: tl.constexpr, LOG2L: tl.constexpr,
               LOG2NL: tl.constexpr, ONE_CHUNK: tl.constexpr):
    """(negative, magnitude < 2**53 rounded to odd, unit, zero) of the exact sum of the block's terms: the
    products (-1)**pn pm 2**pl (BM, lanes, BN) where ONE_CHUNK, else the limbs of ``acc``, and C.

    From the lowest limb up, each limb's sum plus the carry from below is split into its 32 bits and the
    carry (floor) for the next; the sum and its negation are read so at once, the final carry (-1 or 0)
    gives the sign, and the chain of the magnitude keeps its leading limbs and a sticky bit below them."""
    zero2 = mc * 0
    cp = zero2
    cn = zero2
    tp = (zero2 - 1).to(tl.int32)
    hp, xp, lp, bp, pp = zero2, zero2, zero2 != 0, zero2 != 0, zero2
    tn, hn, xn, ln, bn, pv = tp, zero2, zero2, lp, bp, zero2
    for i in tl.static_range(NL):
        if ONE_CHUNK:
            piece = _piece(pm, pl, i, LO)
            part = _fold(tl.where(pn, -piece, piece), LOG2L, 0)
        else:
            part = _fold(tl.where(ax == i, acc, 0), LOG2NL, 0)
        pc = _piece(mc, lc, i, LO)
        part = part + tl.where(nc, -pc, pc)
        v = part + cp
        cp = v >> 32
        w = cn - part
        cn = w >> 32
        tp, hp, xp, lp, bp, pp = _lead_limbs(v & 0xFFFFFFFF, i, tp, hp, xp, lp, bp, pp)
        tn, hn, xn, ln, bn, pv = _lead_limbs(w & 0xFFFFFFFF, i, tn, hn, xn, ln, bn, pv)
    neg = cp < 0
    top = tl.where(neg, tn, tp)
    hi = tl.where(neg, hn, hp)
    nx = tl.where(neg, xn, xp)
    low = tl.where(neg, ln, lp)
    mag = (hi << 30) | (nx >> 2) | (low | ((nx & 3) != 0)).to(tl.int64)  # 31 to 62 bits, rounded to odd
    mag, unit = _odd53(mag, LO + 32 * top.to(tl.int64) - 30)
    return neg, mag, unit, top < 0


@triton.jit
def exact_block(t, k0, j0, d, B: tl.constexpr):
    """One exact-fused block: the BL products j0 .. j0 + BL - 1 of the step at k0 (through order_ptr where
    ORDERED; those past K are the plan's +0 padding) and C = d, summed exactly in limbs (ONE_CHUNK: the
    block's BL <= LP products at once; else in chunks of LP lanes, into an accumulator of NL limbs), rounded
    once; special values by rules.fused_specials.  float32 (BM, BN)."""
    LP: tl.constexpr = B.LP
    LOG2L: tl.constexpr = B.LOG2L
    NLP: tl.constexpr = B.NLP
    BLOCK_M: tl.constexpr = d.shape[0]
    BLOCK_N: tl.constexpr = d.shape[1]
    BL, lane, rm, rn = t.BL, t.lane, t.rm, t.rn
    ax = tl.arange(0, NLP)[None, :, None]
    acc = tl.full((BLOCK_M, NLP, BLOCK_N), 0, tl.int64)
    nc, mc, lc, ec, zc, nan_c, inf_c = tk.decode(d, -126)
    nan = nan_c
    pos = inf_c & ~nc
    ninf = inf_c & nc
    only_zeros = zc
    all_neg = nc
    any_neg = nc
    pm = tl.full((BLOCK_M, LP, BLOCK_N), 0, tl.int64)
    pl = pm
    pt = pm != 0
    for jj in range(0, BL, LP):
        idx = jj + lane
        inblock = idx < BL
        if B.ORDERED:
            kk = k0 + tl.load(t.order_ptr + j0 + idx, mask=inblock, other=0)
        else:
            kk = k0 + j0 + idx
        live = inblock & (kk < t.K)
        a = tl.load(t.a_ptr + rm[:, None] * t.sam + kk[None, :] * t.sak, mask=(rm[:, None] < t.M) & live[None, :],
                    other=0.0)
        b = tl.load(t.b_ptr + kk[:, None] * t.sbk + rn[None, :] * t.sbn, mask=live[:, None] & (rn[None, :] < t.N),
                    other=0.0)
        a = tk.widen(a, B.STANDIN)
        b = tk.widen(b, B.STANDIN)
        na, ma, la, ea, za, nan_a, inf_a = tk.decode(a, -126)
        nb, mb, lb, eb, zb, nan_b, inf_b = tk.decode(b, -126)
        pm, pn, pl, pz = tk.products(na, ma, la, za, nb, mb, lb, zb)
        pt = pn & ~pz
        if not B.ONE_CHUNK:
            acc = _limbs_add(acc, pm, pl, pt, ax, B.NL, B.LO, LOG2L)
        in3 = inblock[None, :, None]  # lanes of the block (padding products are +0 * +0 terms)
        only_zeros = only_zeros & (_fold(tl.where(in3, pz.to(tl.int32), 1), LOG2L, 2) == 1)
        all_neg = all_neg & (_fold(tl.where(in3, pn.to(tl.int32), 1), LOG2L, 2) == 1)
        any_neg = any_neg | (_fold(tl.where(in3, pn.to(tl.int32), 0), LOG2L, 1) == 1)
        if B.SPECIALS:
            pnan = tk.product_nan(nan_a, inf_a, za, nan_b, inf_b, zb)
            pinf = (inf_a[:, :, None] | inf_b[None, :, :]) & ~pnan
            nan = nan | (_fold(pnan.to(tl.int32), LOG2L, 1) == 1)
            pos = pos | (_fold((pinf & ~pn).to(tl.int32), LOG2L, 1) == 1)
            ninf = ninf | (_fold((pinf & pn).to(tl.int32), LOG2L, 1) == 1)
    neg, mag, unit, zero = _exact_sum(pm, pl, pt, mc, lc, nc & ~zc, acc, ax, B.NL, B.LO, LOG2L, B.LOG2NL, B.ONE_CHUNK)
    v, plus = _finish(neg, mag, unit, zero, only_zeros, all_neg, any_neg, B)
    return tk.with_specials(v, plus, nan, pos, ninf)
