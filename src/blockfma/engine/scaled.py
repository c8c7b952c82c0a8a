"""Block-scaled MMA (the scaled-fused family: PTX ``mma.block_scale``, ``tcgen05.mma.block_scale``) in the
engines: how a scale enters a term, written once for every engine (:func:`fold`, :func:`group_terms`), and
the block that sums those terms as truncated-fused does (:func:`block`, numpy arrays or torch tensors).

The rule (docs/semantics.md, the reference's :func:`blockfma.reference.scaled_fused_block` is the oracle's
own copy):

* ``scale_group`` None (k = 32 ``kind::mxf8f6f4``): term i is ``a_i sa_i * b_i sb_i``, its exponent
  ``E_fa(a_i) + E_fs(sa_i) + E_fb(b_i) + E_fs(sb_i)`` (E: floor(log2), at least the format's emin); a zero
  factor or a zero scale makes it a zero term at ``e_zero``.  So each operand is *folded* with its scale
  (:func:`fold`: value ``x s``, exponent ``E(x) + E(s)``) and the block is a truncated-fused block over the
  folded operands with their given exponents;
* ``scale_group`` G (k = 64 ``kind::mxf4``, ``mxf4nvf4``): every G products are summed exactly, the sum
  times ``sa sb`` is a term at exponent ``E_fs(sa) + E_fs(sb)`` alone, at ``e_zero`` where all G products
  are zero or a scale is (:func:`group_terms`); its sign for an exact zero: negative when all G products are;
* then C at its exponent, e_max, every term cut at ``2**(e_max - F)``, exact sum, one rounding
  (:func:`blockfma.engine.array.aligned_sum`); a NaN scale makes the block NaN, before every other rule.

Everything is exact in float64 within the bounds :func:`supports` checks (the presets all lie within them);
the caller runs the exact reference for the others.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import formats as _formats
from ..formats import Format
from ..model import Model
from ..plan import Index, Plan, array_index
from . import array, rules
from .kernels import Blocks

__all__ = ["is_scaled", "scale_format", "supports", "fold", "group_terms", "block", "ScaledBlocks",
           "per_product", "SCALED_BACKENDS"]

#: the backends that run a block-scaled call in an engine (the others are refused by name)
SCALED_BACKENDS = ("auto", "numpy", "numba")


def is_scaled(model: Model) -> bool:
    """Whether ``model`` is block-scaled (takes ``scale_a`` and ``scale_b``)."""
    return model.family.name == "scaled-fused"


def scale_format(model: Model) -> Format:
    return _formats.get(model.option("scale_format"))


def _lowest_bit(fmt: Format) -> int:
    """The exponent of the last place of the smallest nonzero value of ``fmt``."""
    return fmt.emin - fmt.precision + 1


def supports(model: Model) -> bool:
    """Whether :func:`block` computes this block-scaled model exactly in float64: products of the inputs
    exact, C and results within binary32, every term (a_i sa_i b_i sb_i, or a group's sum times sa sb)
    an exact float64, and the cut terms' sum below 2**53 (F plus the bits a term lies above its exponent
    plus the carries of L + 1 terms); exponents far inside float64's range."""
    if not is_scaled(model) or model.block_width is None or model.product_exponent != "sum":
        return False
    fa, fb, fs, fc = model.input_format, model.b_format, scale_format(model), model.c_format
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
        bits = top - (_lowest_bit(fa) + _lowest_bit(fb)) + 2 * fs.precision  # the sum times sa sb, exactly
        above = top + 2  # the term lies below 2**(E(sa) + E(sb) + above)
        terms = L // G + 1
        top += 2 * fs.emax + 2
    low = _lowest_bit(fa) + _lowest_bit(fb) + 2 * _lowest_bit(fs)
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


def group_terms(xp: Any, model: Model, a: Any, b: Any, sa: Any, sb: Any) -> tuple[Any, Any, Any, Any]:
    """The terms of a group-scaled block (``scale_group`` G): for a, b (..., L) and the scales of each group
    sa, sb (..., L / G), finite float64, ``(value, exponent, zero, negative)`` each (..., L / G): the exact
    sum of the group's G products times sa sb; ``E_fs(sa) + E_fs(sb)``, or ``e_zero`` where every product
    is zero or sa sb is; whether the value is zero; whether all G products are negative (the term's sign
    in the sign of an exact zero)."""
    G, fs = model.option("scale_group"), scale_format(model)
    p = a * b  # exact
    shape = tuple(p.shape[:-1]) + (p.shape[-1] // G, G)
    groups = p.reshape(shape)
    total = xp.sum(groups, axis=-1)  # exact: integers in the groups' last place, below 2**53
    scale = sa * sb  # exact
    empty = xp.all(groups == 0, axis=-1) | (scale == 0)
    e = xp.where(empty, model.e_zero, array.fmt_exponent(xp, fs, sa) + array.fmt_exponent(xp, fs, sb))
    value = total * scale  # exact
    negative = xp.all((xp.signbit(a) ^ xp.signbit(b)).reshape(shape), axis=-1)
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
    G, fs = model.option("scale_group"), scale_format(model)
    if G is None:
        a2, ea = fold(xp, model.input_format, a, fs, sa)
        b2, eb = fold(xp, model.b_format, b, fs, sb)
        value = array.truncated_fused(xp, model, a2, b2, c, ea=ea, eb=eb, products=False)
    else:
        value, e, zero, negative = group_terms(xp, model, a, b, sa[..., ::G], sb[..., ::G])
        value, s_zero = array.aligned_sum(xp, model, value, e, c)
        value = rules.exact_zero_terms(xp, model, zero, negative, c, s_zero, value)
    return xp.where(mask, special, value)


def per_product(s: np.ndarray, block_size: int, padded: int) -> np.ndarray:
    """Scales (..., k / block_size) repeated to one per product along K and padded with 1.0 (the padding
    products' scale, as the reference pads) to ``padded``."""
    out = np.repeat(s, block_size, axis=-1)
    short = padded - out.shape[-1]
    if short > 0:
        out = np.concatenate([out, np.ones(out.shape[:-1] + (short,))], axis=-1)
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
