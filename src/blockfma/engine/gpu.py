"""The GPU engine: the fused families on torch tensors, bit for bit the numpy engine.

``backend="cuda"`` runs these kernels on a CUDA GPU, ``backend="torch"`` on the CPU (the same code, so the
CPU run in the test suite checks the GPU's algorithm; the GPU test then checks the device).  Only exact
operations are used, so the result does not depend on the device or on the order of any reduction:

* a product of two inputs of at most 26 significant bits (fp16, bf16, tf32, fp8) is exact in float64;
* scaling by a power of two is exact (powers of two are built from their bit patterns, not by ``pow``);
* ``trunc``/``floor`` of a scaled product cuts it exactly at the alignment quantum, and the sum of the cut
  terms is an integer below 2**53, exact in any order;
* the block result ``s * 2**u`` is exact in float64 and :func:`round_to` rounds it once, by integer
  rounding of its scaled significand (``trunc``, ``round`` half to even, ``floor``, ``ceil``).

Families: truncated-fused (every NVIDIA preset but fp64), late-c (AMD CDNA3) and exact-fused (AMD CDNA1,
the exact reference; its sums go through 32-bit limbs of int64), with the special values, exact-zero signs,
carry bits and product-exponent readings of docs/semantics.md.  ``supports(model)`` says
which models run here; the others run on the CPU engines.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from ..formats import Format, RoundingMode, overflow_to_infinity
from ..model import Alignment, Family, Model
from . import rules

__all__ = ["supports", "available", "torch_device", "dot", "gemm", "round_to"]

_TILE = {"cpu": 1 << 20, "cuda": 1 << 24}  # products per step (rows x cols x L), bounding a step's memory
_NONE = rules.NO_EXPONENT
COMPILE = {"cpu": os.environ.get("BLOCKFMA_TORCH_COMPILE", "0") == "1",
           "cuda": os.environ.get("BLOCKFMA_TORCH_COMPILE", "1") == "1"}  # fuse each block with torch.compile
_STEPS: dict[tuple, Callable[..., Any]] = {}


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise ImportError("the GPU engine needs torch: pip install 'blockfma[torch]' (a CUDA build for "
                          "backend='cuda')") from None
    return torch


def available() -> bool:
    """Whether torch imports and sees a CUDA GPU."""
    try:
        return bool(_torch().cuda.is_available())
    except ImportError:
        return False


def torch_device(backend: str) -> Any:
    """The torch device of a backend name: ``"torch"`` is the CPU, ``"cuda"`` (or ``"cuda:1"``) a GPU."""
    torch = _torch()
    if backend == "torch":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ValueError(f"backend={backend!r} needs a CUDA GPU, and torch {torch.__version__} sees none "
                         "(torch.cuda.is_available() is False); use backend='auto' for the CPU engines")
    return torch.device(backend)


def supports(model: Model) -> bool:
    """Whether the GPU engine runs this model: the fused families (truncated-fused, late-c, exact-fused),
    inputs whose products are exact in float64, C and results no wider than binary32, and for the cut
    families block sums below 2**53."""
    fin = model.input_format
    if not rules.products_exact_in_float64(fin):
        return False
    if not (rules.values_in_binary32(model.c_format) and rules.values_in_binary32(model.result_format)):
        return False
    if model.family is Family.EXACT_FUSED:
        return True
    if model.block_width is None:
        return False
    headroom = 2 + (model.block_width + 1).bit_length()  # bits of a sum of L + 1 terms below 2**(F+2)
    if model.family is Family.TRUNCATED_FUSED:
        return model.fraction_bits is not None and model.fraction_bits + headroom <= 53
    if model.family is Family.LATE_C:
        F, F2 = model.fraction_bits, model.late_fraction_bits
        return F is not None and F2 is not None and F2 >= F and F2 + headroom <= 53
    return False


# --- exact float64 helpers -----------------------------------------------------------------------------
def _pow2(e: Any) -> Any:
    """2.0**e for integer tensors e in [-1022, 1023], built from the bit pattern (exact on every device)."""
    torch = _torch()
    return ((e.to(torch.int64) + 1023) << 52).view(torch.float64)


def _exponent(x: Any) -> Any:
    """floor(log2 |x|) of normal float64 values (int64)."""
    torch = _torch()
    return ((x.view(torch.int64) >> 52) & 0x7FF) - 1023


def _fmt_exponent(fmt: Format, x: Any) -> Any:
    """E_fmt(x) = max(floor(log2 |x|), emin) of finite values, and _NONE for zeros (int64)."""
    torch = _torch()
    return torch.where(x == 0, _NONE, torch.clamp(_exponent(x), min=fmt.emin))


def round_to(fmt: Format, x: Any, mode: RoundingMode, *, subnormals: bool, overflow: str = "ieee") -> Any:
    """Round exact finite float64 values ``x`` once to ``fmt`` (precision <= 52): the twin of
    :func:`blockfma.formats.round_integer`, with its flush-to-zero (tininess before rounding) and its
    overflow policies.  The significand scaled to an integer quantum is rounded by trunc/round/floor/ceil,
    all exact."""
    torch = _torch()
    neg = torch.signbit(x)
    ax = x.abs()
    e = torch.where(ax == 0, fmt.emin, _exponent(ax))
    q = (torch.clamp(e, min=fmt.emin) if subnormals else e) - (fmt.precision - 1)
    y = ax * _pow2(-q)  # |x| in units of the result's last place: exact
    if mode is RoundingMode.TowardZero:
        r = torch.trunc(y)
    elif mode is RoundingMode.TiesToEven:
        r = torch.round(y)  # half to even
    elif mode is RoundingMode.TiesAway:
        r = torch.floor(y + 0.5)  # exact: y < 2**53 has a last place of at most 2**-1 here
    elif mode is RoundingMode.TowardPositive:
        r = torch.where(neg, torch.trunc(y), torch.ceil(y))
    elif mode is RoundingMode.TowardNegative:
        r = torch.where(neg, torch.ceil(y), torch.trunc(y))
    else:  # ToOdd
        t = torch.trunc(y)
        r = t + ((t != y) & (torch.fmod(t, 2) == 0)).to(y.dtype)
    v = r * _pow2(q)
    pos_inf, neg_inf = overflow_to_infinity(mode, overflow)
    to_inf = (neg & neg_inf) | (~neg & pos_inf)
    limit = torch.where(to_inf, float("inf") if fmt.has_infinities else float("nan"), torch.full_like(v, fmt.max))
    v = torch.where(v > fmt.max, limit, v)
    if not subnormals:
        v = torch.where((ax > 0) & (ax < fmt.smallest_normal), 0.0, v)
    v = torch.where(neg, -v, v)
    if not fmt.has_negative_zero:
        v = torch.where(v == 0, 0.0, v)
    return v


# --- special values and the sign of exact zeros: the shared rules -------------------------------------------
def _specials(a: Any, b: Any, c: Any, products: bool, overflow: Any = None) -> tuple[Any, Any]:
    return rules.fused_specials(_torch(), a, b, c, products=products, overflow=overflow)


def _finite(x: Any) -> Any:
    torch = _torch()
    return torch.where(torch.isfinite(x), x, 0.0)


def _exact_zero(model: Model, a: Any, b: Any, c: Any, zero: Any, value: Any) -> Any:
    return rules.exact_zero(_torch(), model, a, b, c, zero, value)


# --- block kernels -------------------------------------------------------------------------------------
# Each kernel takes one block's operands: a, b (float64, shape (..., L), broadcasting), their exponents
# E_fin (int64, _NONE for zeros), c (float64, shape (...)); and two flags fixed for a whole GEMM:
# ``products`` (some a or b may be non-finite) and ``overflow`` (some product may overflow the C format).
def truncated_fused(model: Model, a: Any, b: Any, ea: Any, eb: Any, c: Any, products: bool, overflow: bool) -> Any:
    """One truncated-fused block: products and C cut at 2**(e_max - F), summed exactly, rounded once."""
    torch = _torch()
    F, ez = model.fraction_bits, model.e_zero
    assert F is not None and ez is not None
    fc = model.c_format
    mask, special = _specials(a, b, c, products)
    if products:
        a, b = _finite(a), _finite(b)
    c = _finite(c)
    p = a * b  # exact
    if model.product_exponent == "normalized":
        ep = torch.where(p == 0, ez, _exponent(p))
    else:
        ep = torch.where((ea == _NONE) | (eb == _NONE), ez, ea + eb)
    ec = torch.where(c == 0, ez, torch.clamp(_exponent(c), min=fc.emin))
    emax = torch.maximum(ep.amax(dim=-1), ec)
    scale = _pow2(F - emax)
    cut = torch.floor if model.alignment is Alignment.FLOOR else torch.trunc
    s = cut(p * scale.unsqueeze(-1)).sum(dim=-1) + cut(c * scale)
    if model.carry_bits is not None:
        s = torch.fmod(s, float(2 ** (F + 1 + model.carry_bits)))  # keeps the sign, as the wrap does
    value = round_to(model.result_format, s * _pow2(emax - F), model.output_rounding,
                     subnormals=model.subnormals, overflow=model.overflow)
    value = _exact_zero(model, a, b, c, s == 0, value)
    return torch.where(mask, special, value)


def late_c(model: Model, a: Any, b: Any, ea: Any, eb: Any, c: Any, products: bool, overflow: bool) -> Any:
    """One late-c block: products cut at 2**(top - F) per group, groups merged, C added at F2 bits."""
    torch = _torch()
    F, F2, groups = model.fraction_bits, model.late_fraction_bits, model.groups
    assert F is not None and F2 is not None
    fc = model.c_format
    af, bf = (_finite(a), _finite(b)) if products else (a, b)
    p = af * bf  # exact
    mask, special = _specials(a, b, c, products, (p.abs() >= 2.0 ** (fc.emax + 1)) if overflow else None)
    a, b, c = af, bf, _finite(c)
    ep = torch.where(p == 0, _NONE, ea + eb)
    sums, units, tops = [], [], []
    for g in range(groups):
        pg, eg = p[..., g::groups], ep[..., g::groups]
        top = eg.amax(dim=-1)
        sums.append(torch.trunc(pg * _pow2(torch.clamp(F - top, max=1023)).unsqueeze(-1)).sum(dim=-1))
        units.append(top - F)
        tops.append(top)
    e_dot = tops[0]
    for t in tops[1:]:
        e_dot = torch.maximum(e_dot, t)
    s = sums[0]
    if groups > 1:  # each group's sum cut at the dot's unit e_dot - F
        s = sum(torch.floor(sg * _pow2(torch.clamp(ug - (e_dot - F), min=-1022))) for sg, ug in zip(sums, units))
    ec = torch.clamp(_exponent(c), min=fc.emin)  # E_fc(c); emin for a zero
    big_e = torch.maximum(e_dot, ec)
    cc = torch.where(ec < big_e - F - 1, 0.0, c) if groups > 1 else c
    # the products' sum, at unit e_dot - F, moved to unit big_e - F2 (only ever to a finer unit or the
    # same one when e_dot is the larger exponent: cut toward minus infinity); C cut at big_e - F
    s = torch.floor(s * _pow2(torch.clamp(e_dot - big_e + F2 - F, min=-1022)))
    cterm = torch.floor(cc * _pow2(F - big_e)) * float(2 ** (F2 - F))
    total = s + cterm
    value = round_to(model.result_format, total * _pow2(big_e - F2), model.output_rounding,
                     subnormals=model.subnormals, overflow=model.overflow)
    value = _exact_zero(model, a, b, torch.where(cc == 0, torch.copysign(torch.zeros_like(c), c), cc),
                        total == 0, value)
    return torch.where(mask, special, value)


_LIMB = 32  # bits per limb of the exact accumulator


def _limb_span(model: Model, L: int) -> tuple[int, int]:
    """(lo, n): exponent of the accumulator's lowest bit and its number of limbs, for sums of L products
    and C.  Two zero limbs lie below every term's last bit and two limbs above its largest sum (carries,
    sign), so the leading three limbs always exist and the top limb's sign is the sum's."""
    fin, fc = model.input_format, model.c_format
    lsb = min(2 * (fin.emin - fin.precision + 1), fc.emin - fc.precision + 1)
    top = max(2 * (fin.emax + 1), fc.emax + 1) + (L + 1).bit_length()
    lo = lsb - 2 * _LIMB
    return lo, -(-(top - lo) // _LIMB) + 2


def exact_fused(model: Model, a: Any, b: Any, ea: Any, eb: Any, c: Any, products: bool, overflow: bool) -> Any:
    """One exact-fused block: the L products and C summed exactly in 32-bit limbs of int64, rounded once.

    Each term (an exact float64 of at most 53 bits) is cut into three 32-bit pieces at its limb and added
    in (scatter-add of integers: exact in any order).  After carrying, the leading limbs give the sum
    rounded to odd at 32 bits or more, which then rounds to the result format exactly as the sum would."""
    torch = _torch()
    mask, special = _specials(a, b, c, products)
    if products:
        a, b = _finite(a), _finite(b)
    c = _finite(c)
    p = a * b  # exact
    terms = torch.cat([p, c.unsqueeze(-1).expand(p.shape[:-1] + (1,))], dim=-1)
    L = p.shape[-1]
    lo, nl = _limb_span(model, L)
    lsb = torch.clamp(_exponent(terms) - 52, min=lo + 2 * _LIMB)  # every term is a multiple of 2**lsb
    j = torch.div(lsb - lo, _LIMB, rounding_mode="floor")
    x = terms.abs() * _pow2(-(lo + _LIMB * j))  # an integer below 2**85 with at most 53 bits: exact
    two32 = float(2**_LIMB)
    q1 = torch.floor(x / two32)  # exact: division by a power of two
    q2 = torch.floor(q1 / two32)
    sign = torch.where(torch.signbit(terms), -1, 1)
    acc = torch.zeros(terms.shape[:-1] + (nl,), dtype=torch.int64, device=terms.device)
    for k, piece in enumerate((x - q1 * two32, q1 - q2 * two32, q2)):
        acc.scatter_add_(-1, j + k, piece.to(torch.int64) * sign)

    def carry(acc: Any) -> Any:
        for i in range(nl - 1):
            up = acc[..., i] >> _LIMB  # floor
            acc[..., i] -= up << _LIMB
            acc[..., i + 1] += up
        return acc

    acc = carry(acc)
    neg = acc[..., -1] < 0
    acc = carry(torch.where(neg.unsqueeze(-1), -acc, acc))
    nz = acc != 0
    zero = ~nz.any(dim=-1)
    t = torch.clamp(nl - 1 - torch.flip(nz, dims=[-1]).to(torch.int8).argmax(dim=-1), min=2)
    limb = lambda i: acc.gather(-1, i.unsqueeze(-1)).squeeze(-1)  # noqa: E731
    top, mid, low = limb(t), limb(t - 1), limb(t - 2)
    below = torch.cumsum(nz.to(torch.int64), dim=-1).gather(-1, torch.clamp(t - 3, min=0).unsqueeze(-1)).squeeze(-1)
    w = (top << (_LIMB - 1)) | (mid >> 1)  # the leading 63 bits or fewer, lsb at 2**(lo + 32t - 31)
    sh = torch.clamp(_exponent(top.to(torch.float64)) + 1 - 22, min=0)  # bits of w beyond 53
    kept = w >> sh
    sticky = ((w & ((1 << sh) - 1)) != 0) | ((mid & 1) != 0) | (low != 0) | ((t >= 3) & (below > 0))
    kept = kept | sticky.to(torch.int64)  # round to odd
    value = kept.to(torch.float64) * _pow2(lo + _LIMB * t - (_LIMB - 1) + sh)
    value = torch.where(neg, -value, value)
    value = round_to(model.result_format, value, model.output_rounding, subnormals=model.subnormals,
                     overflow=model.overflow)
    value = _exact_zero(model, a, b, c, zero, value)
    return torch.where(mask, special, value)


_FUSABLE = (Family.TRUNCATED_FUSED, Family.LATE_C)
KERNELS: dict[Family, Callable[..., Any]] = {
    Family.TRUNCATED_FUSED: truncated_fused,
    Family.LATE_C: late_c,
    Family.EXACT_FUSED: exact_fused,
}


# --- drivers -------------------------------------------------------------------------------------------
def _on(dev: Any, x: np.ndarray, kp: int | None = None) -> Any:
    """A float64 copy of ``x`` on the device, its last axis padded with zeros to ``kp``."""
    x = x if kp is None else rules.pad(x, kp)
    return _torch().from_numpy(np.array(x, dtype=np.float64)).to(dev)


def _flags(model: Model, a: np.ndarray, b: np.ndarray) -> tuple[bool, bool]:
    """(products may be non-finite, a product may overflow the C format), looked at once on the host."""
    products = not (np.isfinite(a).all() and np.isfinite(b).all())
    fa = np.abs(a[np.isfinite(a)])
    fb = np.abs(b[np.isfinite(b)])
    big = (fa.max() if fa.size else 0.0) * (fb.max() if fb.size else 0.0)
    return products, model.family is Family.LATE_C and big >= 2.0 ** (model.c_format.emax + 1)


def _step(model: Model, products: bool, overflow: bool, device_type: str) -> Callable[..., Any]:
    """The block kernel for this model and these flags: compiled by torch.compile (one fused kernel per
    block, Triton on a GPU) where ``COMPILE[device_type]`` says so, else run op by op.  Exact-fused always
    runs op by op: its carry loop unrolls into a graph that takes minutes to compile.  Should compiling
    fail (no Triton, no C++ compiler), a warning says so and the op-by-op kernel runs: same bits, slower."""
    key = (model, products, overflow, device_type)
    if key not in _STEPS:
        kernel = KERNELS[model.family]

        def step(a: Any, b: Any, ea: Any, eb: Any, c: Any) -> Any:
            return kernel(model, a, b, ea, eb, c, products, overflow)

        if not COMPILE.get(device_type, False) or model.family not in _FUSABLE:
            _STEPS[key] = step
        else:
            # dynamic=False: one graph per tile shape.  With dynamic shapes torch 2.11 turned the model's
            # integer parameters into symbols and failed on the second shape (H100 run, 2026-11-22).
            dynamo = _torch()._dynamo.config  # one graph per (model, tile shape): the default limit of 8
            for name in ("recompile_limit", "cache_size_limit"):  # recompiles sent most models to eager
                if hasattr(dynamo, name):
                    setattr(dynamo, name, max(getattr(dynamo, name), 512))
            compiled = _torch().compile(step, dynamic=False)
            fallen_back: list[bool] = []

            def guarded(*args: Any) -> Any:
                if not fallen_back:  # every call may compile anew (a new shape), so every call is guarded
                    try:
                        return compiled(*args)
                    except Exception as exc:  # a broken toolchain, not an arithmetic question
                        warnings.warn(f"torch.compile failed for the GPU engine ({type(exc).__name__}: {exc}); "
                                      "running it op by op (same results, slower)", RuntimeWarning, stacklevel=2)
                        fallen_back.append(True)
                return step(*args)

            _STEPS[key] = guarded
    return _STEPS[key]


def _width(model: Model, L: int) -> int:
    """Elements a block kernel holds per output (its L products, and the limbs of exact-fused)."""
    return L + 1 + (_limb_span(model, L)[1] if model.family is Family.EXACT_FUSED else 0)


def _check(model: Model) -> None:
    if not supports(model):
        raise ValueError(f"the GPU engine does not run {model.summary()} (it runs the fused families, "
                         "truncated-fused, late-c and exact-fused, with inputs of at most 26 bits and binary32 or "
                         "narrower results); use backend='auto'")


def _operands(model: Model, A: np.ndarray, B: np.ndarray, C: np.ndarray, backend: str
              ) -> tuple[Any, int, Callable[..., Any], Any, Any, Any, Any, Any]:
    """What gemm and dot share: (device, L, the block step, A, B padded to whole blocks on the device,
    their exponents, C on the device).  A and B have k on their last axis."""
    _check(model)
    dev = torch_device(backend)
    k = A.shape[-1]
    L = model.block_width or max(k, 1)
    kp = -(-k // L) * L
    step = _step(model, *_flags(model, A, B), dev.type)
    fin = model.input_format
    At, Bd, D = _on(dev, A, kp), _on(dev, B, kp), _on(dev, C)
    return dev, L, step, At, Bd, _fmt_exponent(fin, _finite(At)), _fmt_exponent(fin, _finite(Bd)), D


def gemm(model: Model, A: np.ndarray, Bt: np.ndarray, C: np.ndarray, backend: str = "cuda",
         progress: Callable[[float], None] | None = None) -> np.ndarray:
    """float64 D (m, n) = A (m, k) @ Bt.T + C, values already checked, flushed and in the model's formats."""
    dev, L, step, At, Bd, EA, EB, D = _operands(model, A, Bt, C, backend)
    m, n = D.shape
    tile = _TILE[dev.type] // _width(model, L)
    cols = max(1, min(n, tile))
    rows = max(1, tile // cols)
    nblocks = At.shape[1] // L
    for j in range(nblocks):
        sl = slice(j * L, (j + 1) * L)
        for r in range(0, m, rows):
            rs = slice(r, min(m, r + rows))
            for c0 in range(0, n, cols):
                cs = slice(c0, min(n, c0 + cols))
                D[rs, cs] = step(At[rs, None, sl], Bd[None, cs, sl], EA[rs, None, sl], EB[None, cs, sl], D[rs, cs])
        if progress is not None:
            progress((j + 1) / nblocks)
    return D.cpu().numpy()


def dot(model: Model, A: np.ndarray, B: np.ndarray, C: np.ndarray, backend: str = "cuda") -> np.ndarray:
    """float64 d (rows,) = sum over k of A * B (rows, k) + C (rows,), values already checked."""
    dev, L, step, At, Bd, EA, EB, D = _operands(model, A, B, C, backend)
    rows = D.shape[0]
    chunk = max(1, _TILE[dev.type] // _width(model, L))
    for j in range(At.shape[1] // L):
        sl = slice(j * L, (j + 1) * L)
        for r in range(0, rows, chunk):
            rs = slice(r, min(rows, r + chunk))
            D[rs] = step(At[rs, sl], Bd[rs, sl], EA[rs, sl], EB[rs, sl], D[rs])
    return D.cpu().numpy()
