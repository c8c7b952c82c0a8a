"""MX and NVFP4 tensors for torch: quantisation (MXFP8, MXFP4, NVFP4), the block scales' two layouts, and the
values of fp8 / packed fp4 / scale tensors.

Block scales (one per ``block`` elements along K; mat2's by its columns, as the (n, K) matrix mat2.t()) are
**plain**, a (rows, K // block) row-major matrix (``SwizzleType.NO_SWIZZLE``), or **swizzled**
(``SWIZZLE_32_4_4``, what cuBLAS reads and ``torch._scaled_mm`` passes it): the plain matrix padded to a
multiple of 128 rows and of 4 columns, cut into 128 x 4 tiles stored one after the other (row of tiles
major), each tile of 512 bytes storing entry (r, c) at ``(r % 32) * 16 + (r // 32) * 4 + c``: NVIDIA's "1D
block scaling factors layout" (cuBLAS documentation, section 3.1.4.3.2; ``to_blocked`` in torch's tests).
:func:`swizzle` and :func:`unswizzle` are exact inverses on the unpadded entries; padding is code 0, never read.

Packed fp4 (``torch.float4_e2m1fn_x2``): each byte holds two e2m1 codes along K, element 2i in the low
nibble (as :func:`blockfma.formats.pack`; torch's ``pack_uint4`` agrees), so an (m, K) operand is an
(m, K // 2) tensor and mat2 a (K // 2, n) one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .. import formats as _formats
from ..arguments import ArgumentError, Shown
from ..formats import RoundingMode

__all__ = ["Quantized", "to_mx", "to_nvfp4", "swizzle", "unswizzle", "swizzled_size", "values", "FP4",
           "TILE_ROWS", "TILE_COLS", "FP8_FORMATS", "SCALE_FORMATS"]

FP4 = getattr(torch, "float4_e2m1fn_x2", None)  # None in a torch without fp4 (before 2.8)
E8M0 = getattr(torch, "float8_e8m0fnu", None)  # None before torch 2.7
TILE_ROWS, TILE_COLS = 128, 4
FP8_FORMATS = {torch.float8_e4m3fn: "e4m3fn", torch.float8_e5m2: "e5m2"}  # MX element dtypes -> formats
SCALE_FORMATS = {  # block-scale dtypes -> formats (e4m3fn tensors hold NVFP4's unsigned ue4m3 scales)
    torch.float8_e4m3fn: "e4m3fn", **({} if E8M0 is None else {E8M0: "e8m0fnu"})}
_DTYPE_OF = {"e4m3fn": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


def _up(x: int, to: int) -> int:
    return -(-x // to) * to


def swizzled_size(rows: int, blocks: int) -> int:
    """How many scales cuBLAS's swizzled layout takes for a (rows, blocks) plain matrix: rows rounded up
    to 128 times blocks rounded up to 4."""
    return _up(rows, TILE_ROWS) * _up(blocks, TILE_COLS)


def _offsets(rows: int, blocks: int) -> torch.Tensor:
    """The swizzled position (int64, (rows, blocks)) of each plain entry (module docstring)."""
    r = torch.arange(rows).reshape(-1, 1)
    c = torch.arange(blocks).reshape(1, -1)
    tiles_per_row = _up(blocks, TILE_COLS) // TILE_COLS
    tile = (r // TILE_ROWS) * tiles_per_row + c // TILE_COLS
    inner = r % TILE_ROWS
    return tile * (TILE_ROWS * TILE_COLS) + (inner % 32) * 16 + (inner // 32) * 4 + c % TILE_COLS


def swizzle(scales: torch.Tensor) -> torch.Tensor:
    """A plain (rows, blocks) scale matrix in cuBLAS's swizzled layout: a 1-D tensor of
    :func:`swizzled_size` entries of the same dtype (padding: code 0)."""
    if not isinstance(scales, torch.Tensor) or scales.dim() != 2 or scales.element_size() != 1:
        what = type(scales).__name__ if not isinstance(scales, torch.Tensor) else \
            f"{tuple(scales.shape)} {scales.dtype}"
        raise ArgumentError("scales", Shown(what), "must be a 2-D tensor of one-byte scales (rows, K // block)",
                            fix="e.g. to_mx(x).scales")
    rows, blocks = scales.shape
    codes = scales.detach().cpu().contiguous().view(torch.uint8).reshape(-1)
    out = torch.zeros(swizzled_size(rows, blocks), dtype=torch.uint8)
    out[_offsets(rows, blocks).reshape(-1)] = codes
    return out.view(scales.dtype).to(scales.device)


def unswizzle(scales: torch.Tensor, rows: int, blocks: int, name: str = "scales") -> torch.Tensor:
    """The plain (rows, blocks) matrix of swizzled scales (any shape holding :func:`swizzled_size` entries,
    contiguous, one byte each), on the CPU; ArgumentError naming ``name`` for another count."""
    need = swizzled_size(rows, blocks)
    if not isinstance(scales, torch.Tensor) or scales.element_size() != 1 or scales.numel() != need:
        what = type(scales).__name__ if not isinstance(scales, torch.Tensor) else \
            f"shape {tuple(scales.shape)} ({scales.numel()} entries)"
        raise ArgumentError(name, Shown(what), f"swizzled block scales of {rows} rows and {blocks} blocks along K "
                            f"take {need} one-byte entries ({_up(rows, TILE_ROWS)} x {_up(blocks, TILE_COLS)}, "
                            "cuBLAS's 128x4 tiles)", fix="swizzle a plain (rows, K // block) matrix with "
                            "blockfma.torch.mx.swizzle, or pass it plain with SwizzleType.NO_SWIZZLE")
    if not scales.is_contiguous():
        raise ArgumentError(name, Shown(f"strides {scales.stride()}"), "swizzled scales must be contiguous",
                            fix="pass scales.contiguous()")
    flat = scales.detach().cpu().reshape(-1).view(torch.uint8)
    return flat[_offsets(rows, blocks)].view(scales.dtype)


def values(t: torch.Tensor, fmt: str | None = None) -> np.ndarray:
    """The float64 values of an fp8, packed fp4 (the last axis doubled: low nibble first) or scale tensor,
    exactly; ``fmt`` reads the bytes as another one-byte format (``"e8m0fnu"`` for float8_e8m0fnu, the
    default for it; ``"e4m3fn"`` keeps a ue4m3 scale's sign bit so a negative scale can be refused)."""
    t = t.detach().cpu().contiguous()
    if FP4 is not None and t.dtype == FP4:
        return _formats.decode("e2m1fn", _formats.unpack("e2m1fn", t.view(torch.uint8).numpy()))
    name = fmt or {**FP8_FORMATS, **SCALE_FORMATS}.get(t.dtype)
    if name is None or t.element_size() != 1:
        raise ArgumentError("tensor", Shown(str(t.dtype)), "has no one-byte MX format",
                            fix="pass an fp8, float4_e2m1fn_x2 or float8_e8m0fnu tensor")
    return _formats.decode(name, t.view(torch.uint8).numpy())


# --- quantisation --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Quantized:
    """A matrix quantised along its last axis (K): ``data`` (rows, K) fp8 or (rows, K // 2) packed fp4;
    ``scales`` (rows, K // block) plain, float8_e8m0fnu (MX) or float8_e4m3fn holding ue4m3 (NVFP4);
    ``global_scale``: NVFP4's per-tensor float32 decode scale (None for MX); ``recipe``: "mxfp8",
    "mxfp4" or "nvfp4".  The value of element (r, i) is data * scales[r, i // block] (* global_scale)."""

    data: torch.Tensor
    scales: torch.Tensor
    block: int
    recipe: str
    global_scale: torch.Tensor | None = None

    def swizzled_scales(self) -> torch.Tensor:
        """The scales in cuBLAS's swizzled layout (what ``torch._scaled_mm`` takes)."""
        return swizzle(self.scales)

    def dequantize(self) -> torch.Tensor:
        """The values as a float64 tensor (rows, K), exactly (element, block scale and a float32 global
        scale have at most 4, 4 and 24 significant bits: their product fits float64's 53)."""
        elements = values(self.data)
        scales = values(self.scales, "e4m3fn" if self.recipe == "nvfp4" else None)
        out = elements * np.repeat(scales, self.block, axis=-1)
        if self.global_scale is not None:
            out = out * float(self.global_scale)
        return torch.from_numpy(out)


def _blocks(x: Any, block: int, name: str) -> np.ndarray:
    """x (rows, K) as float64 (rows, K // block, block), checked."""
    if not isinstance(x, torch.Tensor) or x.dim() != 2 or not x.dtype.is_floating_point or x.element_size() < 2:
        what = type(x).__name__ if not isinstance(x, torch.Tensor) else f"{x.dim()}-D {x.dtype}"
        raise ArgumentError(name, Shown(what), "must be a 2-D float tensor (float32, float16, bfloat16 or "
                            "float64), quantised along its last axis (K)")
    if x.shape[1] % block:
        raise ArgumentError(name, Shown(f"shape {tuple(x.shape)}"), f"its last axis ({x.shape[1]}) must be a "
                            f"multiple of the block size {block}", fix=f"pad K with zeros to a multiple of {block}")
    v = x.detach().cpu().to(torch.float64).numpy()
    return v.reshape(v.shape[0], -1, block)


def _amax(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each block's largest magnitude (0 for a block of zeros) and whether it holds a NaN or infinity."""
    bad = ~np.isfinite(v).all(axis=-1)
    return np.abs(np.where(np.isfinite(v), v, 0.0)).max(axis=-1), bad


def _elements(fmt: _formats.Format, q: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Values already divided by their scale, rounded to nearest even into fmt, saturating at its largest
    value; entries of blocks not kept (NaN scale, zero scale) become +0."""
    with np.errstate(invalid="ignore", over="ignore"):
        r = _formats.round(fmt, np.where(keep[..., None], q, 0.0), RoundingMode.TiesToEven, saturate=True)
    return np.where(np.isnan(r), 0.0, r)


def _packed(fmt: _formats.Format, v: np.ndarray) -> torch.Tensor:
    """float64 values of fmt (rows, K) as a torch tensor: fp8 codes, or e2m1 codes packed two a byte."""
    codes = _formats.encode(fmt, v).astype(np.uint8)
    if fmt.name == "e2m1fn":
        if FP4 is None:
            raise ArgumentError("fmt", "e2m1fn", "this torch has no float4_e2m1fn_x2 dtype", fix="use torch >= 2.8")
        return torch.from_numpy(_formats.pack(fmt, codes)).view(FP4)
    return torch.from_numpy(codes).view(_DTYPE_OF[fmt.name])


def to_mx(x: torch.Tensor, fmt: str = "e4m3fn", *, block: int = 32, scale_rounding: str = "ceil") -> Quantized:
    """x (rows, K) quantised to MX along K (OCP MX v1.0): one e8m0 scale 2**e per ``block`` elements, the
    elements x / 2**e in ``fmt`` (``"e4m3fn"``, ``"e5m2"``: MXFP8; ``"e2m1fn"``: MXFP4, packed).

    The scale (per block, from its largest magnitude ``amax``): ``scale_rounding="ceil"`` (default; torchao's RCEIL and
    NVIDIA's MXFP8 recipe): the least e with amax <= fmt.max * 2**e, so no element saturates; ``"floor"`` (OCP MX v1.0
    section 6.3): e = floor(log2 amax) - floor(log2 fmt.max), the largest elements then saturate to +-fmt.max.  e is
    clamped to e8m0's [-127, 127]; a block of zeros gets 2**0; a block holding a NaN or infinity gets the NaN scale
    (code 0xFF) and +0 elements.  Elements: x * 2**-e (exact) rounded once to nearest even into ``fmt``, saturating (no
    infinities or NaNs are produced)."""
    f = _formats.get(fmt)
    if f.name not in ("e4m3fn", "e5m2", "e2m1fn"):
        raise ArgumentError("fmt", fmt, "MX elements here are e4m3fn, e5m2 (MXFP8) or e2m1fn (MXFP4)")
    if E8M0 is None:
        raise ArgumentError("fmt", fmt, f"torch {torch.__version__} has no float8_e8m0fnu for MX scales",
                            fix="use torch >= 2.7")
    if scale_rounding not in ("ceil", "floor"):
        raise ArgumentError("scale_rounding", scale_rounding, "must be 'ceil' or 'floor'")
    if block not in (16, 32):
        raise ArgumentError("block", block, "must be 32 (MX) or 16 (the B200's mxf4nvf4.block16)")
    v = _blocks(x, block, "x")
    amax, bad = _amax(v)
    emax = math.frexp(f.max)[1] - 1  # floor(log2 fmt.max)
    ea = np.frexp(amax)[1].astype(np.int64) - 1  # floor(log2 amax) for amax > 0
    if scale_rounding == "floor":
        e = ea - emax
    else:
        e = ea - emax - 1
        for _ in range(3):  # the least e with amax <= max * 2**e lies in [ea - emax - 1, ea - emax + 1]
            e = e + (amax > np.ldexp(f.max, e))
    e = np.clip(np.where(amax == 0, 0, e), -127, 127)
    q = _elements(f, np.ldexp(v, -e[..., None]), ~bad)
    codes = np.where(bad, 0xFF, e + 127).astype(np.uint8)
    recipe = "mxfp4" if f.name == "e2m1fn" else "mxfp8"
    return Quantized(_packed(f, q.reshape(v.shape[0], -1)), torch.from_numpy(codes).view(E8M0), block, recipe)


def to_nvfp4(x: torch.Tensor, *, global_scale: float | None = None) -> Quantized:
    """x (rows, K) quantised to NVFP4 along K: e2m1 elements (packed), one ue4m3 scale per 16, and a
    float32 per-tensor decode scale g; value = element * scale * g (NVIDIA's two-level recipe).

    g: ``global_scale`` if given, else float32(amax(x) / (6 * 448)) (1 for an all-zero x), so that every block scale
    fits ue4m3, held to float32's finite range (2**-149 to its largest): float64 values beyond NVFP4's range (6 * 448 *
    float32's largest, 9.1e41) saturate as scales and elements do (never a NaN). Per block: s = amax_block / 6 / g
    computed in float64, rounded to nearest even into ue4m3 (saturating at 448); elements x / (s * g) (s * g exact in
    float64, the quotient rounded once in float64) rounded to nearest even into e2m1fn, saturating at +-6.  A block
    whose s rounds to 0 has +0 elements; a block with a NaN or infinity gets the NaN scale (0x7F) and +0 elements."""
    v = _blocks(x, 16, "x")
    amax, bad = _amax(v)
    if global_scale is None:
        top = float(amax[~bad].max()) if (~bad).any() else 0.0
        g = float(np.float32(min(max(top / (6 * 448), 2.0**-149), float(np.finfo(np.float32).max)))) if top > 0 else 1.0
    else:
        g = float(np.float32(global_scale))
        if not (math.isfinite(g) and g > 0):
            raise ArgumentError("global_scale", global_scale, "must be a positive finite float32 value")
    fs, fe = _formats.get("ue4m3"), _formats.get("e2m1fn")
    with np.errstate(over="ignore"):
        s = _formats.round(fs, np.where(bad, 0.0, amax / 6 / g), RoundingMode.TiesToEven, saturate=True)
    keep = ~bad & (s > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = _elements(fe, v / np.where(keep, s * g, 1.0)[..., None], keep)
    codes = np.where(bad, 0x7F, _formats.encode(fs, s)).astype(np.uint8)
    return Quantized(_packed(fe, q.reshape(v.shape[0], -1)), torch.from_numpy(codes).view(torch.float8_e4m3fn),
                     16, "nvfp4", torch.tensor(g, dtype=torch.float32))
