"""Block-scaled MMA (the scaled-fused family: PTX ``mma.block_scale``, ``tcgen05.mma.block_scale``) in the
engines: how a scale enters a term, written once for every engine (:func:`fold`, :func:`group_terms`), and
the block that sums those terms as truncated-fused does (:func:`block`, numpy arrays or torch tensors).

The rule is docs/semantics.md's "scaled-fused" (the reference's :func:`blockfma.reference.scaled_fused_block`
is the oracle's own copy): with a scale per product each operand is *folded* with its scale (:func:`fold`:
value ``x s``, exponent ``E(x) + E(s)``) and the block is a truncated-fused block over the folded operands;
with ``scale_group`` G each group's exact sum times ``sa sb`` is one term (:func:`group_terms`; a zero term
is negative when all G products are); then C, the cut, the exact sum and one rounding
(:func:`blockfma.engine.array.aligned_sum`); a NaN scale makes the block NaN, before every other rule.

Everything is exact in float64 within the bounds :func:`supports` checks (the presets all lie within them);
the caller runs the exact reference for the others.  The Triton kernel (``backend="triton"``,
:mod:`.triton_scaled`) follows the same rule on integers (a significand and an exponent per operand and
scale) within the same bounds: it runs the models :func:`supports` accepts (and refuses the others by name).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..formats import Format
from ..model import Model
from ..plan import Index, Plan, array_index
from . import array, rules
from .kernels import Blocks

__all__ = ["supports", "lowest_bit", "fold", "group_sums", "group_sums_matmul", "group_terms",
           "block", "group_chain", "width", "runs_groups", "ScaledBlocks", "per_product"]

def lowest_bit(fmt: Format) -> int:
    """The exponent of the last place of the smallest nonzero value of ``fmt``."""
    return fmt.emin - fmt.precision + 1


def supports(model: Model) -> bool:
    """Whether :func:`block` computes this block-scaled model exactly in float64: products of the inputs
    exact, C and results within binary32, every term (a_i sa_i b_i sb_i, or a group's sum times sa sb)
    an exact float64, and the cut terms' sum below 2**53 (F plus the bits a term lies above its exponent
    plus the carries of L + 1 terms); exponents far inside float64's range."""
    if not model.block_scaled or model.block_width is None or model.product_exponent != "sum":
        return False
    fa, fb, fs, fc = model.input_format, model.b_format, model.scale_format, model.c_format
    F, ez, L, G = model.fraction_bits, model.e_zero, model.block_width, model.option("scale_group")
    if F is None or ez is None or abs(ez) > 900 or F < 0:
        return False
    if not (rules.products_exact_in_float64(fa, fb) and rules.values_in_binary32(fc)
            and rules.values_in_binary32(model.result_format)):
        return False
    if G is None:
        bits = fa.precision + fb.precision + 2 * fs.precision  # a sa b sb, exactly
        above = 4  # each factor x < 2**(E(x) + 1)
        terms = L + 1
        top = fa.emax + fb.emax + 2 * fs.emax + above
    else:
        top = fa.emax + 1 + fb.emax + 1 + (G - 1).bit_length()  # |sum of G products| < 2**top
        bits = top - (lowest_bit(fa) + lowest_bit(fb)) + 2 * fs.precision  # the sum times sa sb, exactly
        above = top + 2  # the term lies below 2**(E(sa) + E(sb) + above)
        terms = L // G + 1
        top += 2 * fs.emax + 2
    low = lowest_bit(fa) + lowest_bit(fb) + 2 * lowest_bit(fs)
    return (bits <= 53 and F + above + terms.bit_length() <= 53
            and max(top, fc.emax + 1, -ez) + F <= 900 and low - max(top, fc.emax + 1) >= -900)


# --- the rule: how a scale enters a term ---------------------------------------------------------------
def fold(xp: Any, fmt: Format, x: Any, fs: Format, s: Any) -> tuple[Any, Any]:
    """An operand folded with its scale (``scale_group`` None): ``(x s, E_fmt(x) + E_fs(s))``, the exponent
    :data:`rules.NO_EXPONENT` where ``x`` or ``s`` is zero (the term is then a zero at e_zero).  Finite
    ``x`` and ``s`` (float64, exact product within :func:`supports`)."""
    ex, es = array.fmt_exponent(xp, fmt, x), array.fmt_exponent(xp, fs, s)
    zero = (ex == rules.NO_EXPONENT) | (es == rules.NO_EXPONENT)
    return x * s, xp.where(zero, rules.NO_EXPONENT, ex + es)


def group_sums(xp: Any, a: Any, b: Any, G: int) -> tuple[Any, Any, Any]:
    """The group-scaled blocks' exact sums, elementwise: for a, b (..., L) (finite float64), each (..., L / G):
    the sum of every G consecutive products (exact within :func:`supports`), whether one of them is
    nonzero, whether all are negative (sign bits: xor of the factors')."""
    p = a * b  # exact
    shape = tuple(p.shape[:-1]) + (p.shape[-1] // G, G)
    groups = p.reshape(shape)
    negative = xp.all((xp.signbit(a) ^ xp.signbit(b)).reshape(shape), axis=-1)
    return xp.sum(groups, axis=-1), xp.any(groups != 0, axis=-1), negative


def group_sums_matmul(a: np.ndarray, bt: np.ndarray, G: int, signs: bool = True
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """:func:`group_sums` of every row of ``a`` (batch, m, K) with every row of ``bt`` (batch, n, K) (B
    transposed), as (batch, m, n, K / G) arrays, by matrix products of float64: every product and partial
    sum is exact within :func:`supports`, so BLAS's order cannot matter; 0/1 matrices count the nonzero and
    the negative products.  ``signs=False`` skips the negative flags (None: +0 exact zeros need none)."""
    batch, m, K = a.shape
    n, ng = bt.shape[1], K // G
    ag = a.reshape(batch, m, ng, G).transpose(0, 2, 1, 3)  # (batch, ng, m, G)
    bg = bt.reshape(batch, n, ng, G).transpose(0, 2, 3, 1)  # (batch, ng, G, n)

    def mm(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(np.matmul(x, y).transpose(0, 2, 3, 1))  # (batch, m, n, ng)

    total = mm(ag, bg)
    nonzero = mm((ag != 0).astype(np.float64), (bg != 0).astype(np.float64)) > 0
    negative = None
    if signs:
        na, nb = np.signbit(ag).astype(np.float64), np.signbit(bg).astype(np.float64)
        negative = (mm(na, 1.0 - nb) + mm(1.0 - na, nb)) == G
    return total, nonzero, negative


def group_terms(xp: Any, model: Model, total: Any, nonzero: Any, negative: Any, sa: Any, sb: Any
                ) -> tuple[Any, Any, Any, Any]:
    """The terms of a group-scaled block (``scale_group`` G), the rule: from each group's exact sum of its G products,
    whether one is nonzero and whether all are negative (:func:`group_sums`), and its scales sa, sb (finite), ``(value,
    exponent, zero, negative)``: the sum times sa sb; ``E_fs(sa) + E_fs(sb)``, or ``e_zero`` where every product is zero
    or sa sb is (a sum that cancels keeps the scales' exponent); whether the value is zero; the sign of a zero term
    (negative when all G products are)."""
    fs = model.scale_format
    scale = sa * sb  # exact
    value = total * scale  # exact
    e = xp.where(~nonzero | (scale == 0), model.e_zero, array.fmt_exponent(xp, fs, sa) + array.fmt_exponent(xp, fs, sb))
    return value, e, value == 0, negative


def block(xp: Any, model: Model, a: Any, b: Any, c: Any, sa: Any, sb: Any, *, products: bool = True) -> Any:
    """One block-scaled block: ``a``, ``b``, ``sa``, ``sb`` (..., L) (one scale per product), ``c`` (...),
    float64, broadcasting, values in their formats; the block's result (...) as a value of the C format.
    ``products=False`` says every a and b is finite.  Specials: a NaN scale gives NaN; then the fused
    families' rules on the unscaled a, b and C (an infinite product stays infinite under a zero scale)."""
    mask, special = rules.fused_specials(xp, a, b, c, products=products)
    nan_scale = xp.any(xp.isnan(sa), axis=-1) | xp.any(xp.isnan(sb), axis=-1)
    mask = mask | nan_scale
    special = xp.where(nan_scale, xp.full_like(special, float("nan")), special)
    if products:
        a, b = array.finite(xp, a), array.finite(xp, b)
    c = array.finite(xp, c)
    sa, sb = xp.where(xp.isnan(sa), 1.0, sa), xp.where(xp.isnan(sb), 1.0, sb)
    G, fs = model.option("scale_group"), model.scale_format
    if G is None:
        a2, ea = fold(xp, model.input_format, a, fs, sa)
        b2, eb = fold(xp, model.b_format, b, fs, sb)
        value = array.truncated_fused(xp, model, a2, b2, c, ea=ea, eb=eb, products=False)
    else:
        value, e, zero, negative = group_terms(xp, model, *group_sums(xp, a, b, G), sa[..., ::G], sb[..., ::G])
        value, s_zero = array.aligned_sum(xp, model, value, e, c)
        value = rules.exact_zero_terms(xp, model, zero, negative, c, s_zero, value)
    return xp.where(mask, special, value)


def group_chain(p: Plan, a: np.ndarray, bt: np.ndarray, c: np.ndarray, sa: np.ndarray, sbt: np.ndarray) -> np.ndarray:
    """A group-scaled plan (a chain of fused blocks) over every row of ``a`` (batch, m, K) with every row of
    ``bt`` (batch, n, K), finite, K padded to whole blocks; ``c`` (batch, m, n); scales per product ``sa``
    (batch, m, K), ``sbt`` (batch, n, K), NaN allowed.  The groups' sums by matrix products
    (:func:`group_sums_matmul`), their terms by :func:`group_terms`, then block after block the
    truncated-fused sum with C; float64 D (batch, m, n).  Holds about 8 float64 per output and group."""
    unit = p.block
    G, T = unit.option("scale_group"), p.block_width // unit.option("scale_group")
    ieee = unit.exact_zero == "ieee"
    total, nonzero, negative = group_sums_matmul(a, bt, G, signs=ieee)
    sa_g, sb_g = sa[:, :, None, ::G], sbt[:, None, :, ::G]
    nan = np.isnan(sa_g).any(axis=-1) | np.isnan(sb_g).any(axis=-1)
    sa_g, sb_g = np.where(np.isnan(sa_g), 1.0, sa_g), np.where(np.isnan(sb_g), 1.0, sb_g)
    value, e, zero, _ = group_terms(np, unit, total, nonzero, None, sa_g, sb_g)
    d = np.asarray(c, dtype=np.float64)
    for start in range(0, value.shape[-1], T):
        ix = slice(start, start + T)
        cf = array.finite(np, d)
        v, s_zero = array.aligned_sum(np, unit, value[..., ix], e[..., ix], cf)
        v = rules.exact_zero_terms(np, unit, zero[..., ix], None if negative is None else negative[..., ix], cf,
                                   s_zero, v)
        d = np.where(np.isfinite(d), v, d)  # an infinite C (an overflow) stays: the products are finite
    return np.where(nan, np.nan, d)


def width(p: Plan) -> int:
    """float64 values the numpy engine holds per output of a block-scaled plan (what a caller divides its
    memory budget by to size a tile of rows): a block's products, or 8 per group for :func:`group_chain`."""
    G = p.block.option("scale_group")
    return max(p.width, 8 * (p.padded // G) if G else 0)


def runs_groups(p: Plan, *arrays: np.ndarray) -> bool:
    """Whether :func:`group_chain` runs this plan: group-scaled, a plain chain of blocks, finite operands."""
    return (p.block.option("scale_group") is not None and p.is_chain and all(np.isfinite(x).all() for x in arrays))


def per_product(s: np.ndarray, block_size: int, padded: int, axis: int = -1) -> np.ndarray:
    """Scales (k / block_size along ``axis``, K's axis) repeated to one per product along K and padded with
    1.0 (the padding products' scale, as the reference pads) to ``padded``."""
    out = np.repeat(s, block_size, axis=axis)
    short = padded - out.shape[axis]
    if short > 0:
        pad = list(out.shape)
        pad[axis] = short
        out = np.concatenate([out, np.ones(pad)], axis=axis)
    return out


class ScaledBlocks(Blocks):
    """The numpy engine's :class:`blockfma.plan.Datapath` of a block-scaled plan: :class:`Blocks` whose block
    is :func:`block` over the products' scales ``sa``, ``sb`` (..., padded), one per product."""

    def __init__(self, p: Plan, a: np.ndarray, b: np.ndarray, sa: np.ndarray, sb: np.ndarray):
        self.model, self.unit, self.a, self.b, self.sa, self.sb = p.model, p.block, a, b, sa, sb
        self.products = not (np.isfinite(a).all() and np.isfinite(b).all())

    def block(self, products: Index, c: np.ndarray) -> np.ndarray:
        ix = array_index(products)
        with np.errstate(invalid="ignore", over="ignore"):
            return block(np, self.unit, self.a[..., ix], self.b[..., ix], c, self.sa[..., ix], self.sb[..., ix],
                         products=self.products)
