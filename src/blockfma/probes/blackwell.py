"""Blackwell block-scaled ``mma.sync`` on tiles of our own (sm_120a: RTX 5090): the register layouts in
Python, one small kernel, and a probe target that takes scales (:class:`~.scaled.ScaledTarget`).

Each :class:`BlockScalePath` is one ``mma.sync.aligned.kind::KIND.block_scale.scale_vec::VX.m16n8kK.row.col
.f32.ATYPE.BTYPE.f32.STYPE`` variant: ``kind::mxf8f6f4`` (k = 32, 1X), ``kind::mxf4`` (k = 64, 2X) and
``kind::mxf4nvf4`` (k = 64, 2X or 4X ue8m0, or 4X ue4m3).  Operands as the PTX ISA gives them ("Warp-level matrix
instructions with block scaling"), ``g = lane >> 2``, ``q = lane % 4``: A and B as the 8-bit m16n8k32 fragments at the
element width (:func:`blockfma.probes.cuda.fragment_map`); C and D (16 x 8, f32) in rows g and g + 8, columns 2q and 2q
+ 1; scale_A's row m in lane ``4 (m % 8) + 2 thread-id-a + m // 8``, scale_B's column n in lane ``4 n + thread-id-b``,
block j of K in byte ``byte-id + j`` (CUTLASS's SM120 ``SFALayout`` and ``SFBLayout`` say the same).  The kernel passes
byte-id = thread-id = 0 and :func:`pack_scales` writes the scales into every lane any thread-id could name.  Where fp6
and fp4 sit in their 8-bit containers is :data:`CONTAINER_SHIFT` (assumed, not measured); :func:`layout_check` tells on
the GPU whether the layouts hold, with exact sums every Model agrees on.  ``tcgen05.mma ... block_scale`` (B200) is not
here: docs/probes.md, "Missing: B200".

    >>> from blockfma.probes import blackwell
    >>> p = blackwell.path("mma.mxf4nvf4.block16.ue4m3")
    >>> p.ptx
    'mma.sync.aligned.kind::mxf4nvf4.block_scale.scale_vec::4X.m16n8k64.row.col.f32.e2m1.e2m1.f32.ue4m3'
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from .. import formats as _formats
from ..model import Model
from . import cuda as _cuda
from ..inputs import Formats
from .scaled import ScaledTarget, SimScaledTarget
from .targets import diagonal_tiles

__all__ = ["BlockScalePath", "BLOCK_SCALE_PATHS", "path", "pack_operand", "pack_scales", "unpack_d", "tile_registers",
           "kernel_source", "run", "BlockScaleTarget", "EmulatedBlockScale", "layout_check", "CONTAINER_SHIFT"]

_PTX = {"e2m1fn": "e2m1", "e3m2fn": "e3m2", "e2m3fn": "e2m3", "e4m3fn": "e4m3", "e5m2": "e5m2",
        "e8m0fnu": "ue8m0", "ue4m3": "ue4m3"}

#: where an fp4 or fp6 code sits in its 8-bit container under ``kind::mxf8f6f4`` (left shift)
CONTAINER_SHIFT = {"e2m1fn": 2, "e3m2fn": 0, "e2m3fn": 0, "e4m3fn": 0, "e5m2": 0}


@dataclass(frozen=True)
class BlockScalePath:
    """One block-scaled ``mma.sync`` (m16n8, f32 C and D)."""

    kind: str  # "mxf8f6f4", "mxf4", "mxf4nvf4"
    a_format: str
    b_format: str
    scale_format: str  # "e8m0fnu" (ue8m0) or "ue4m3"
    scale_block: int  # 32 or 16
    m: int = 16
    n: int = 8
    sm: int = 120

    @property
    def k(self) -> int:
        return 32 if self.kind == "mxf8f6f4" else 64

    @property
    def c_format(self) -> str:
        return "fp32"

    d_format = c_format

    @property
    def scale_vec(self) -> int:
        return self.k // self.scale_block

    @property
    def packed(self) -> bool:
        """Whether A and B hold two e2m1 codes a byte (``kind::mxf4*``) rather than one element a byte."""
        return self.kind != "mxf8f6f4"

    @property
    def instruction(self) -> str:
        """The preset instruction this path runs (``blockfma devices "RTX 5090"``)."""
        s = f"mma.{self.kind}.block{self.scale_block}"
        return s + (f".{_PTX[self.scale_format]}" if self.kind == "mxf4nvf4" and self.scale_block == 16 else "")

    @property
    def name(self) -> str:
        a, b = _PTX[self.a_format], _PTX[self.b_format]
        return self.instruction + ("" if self.packed else f".{a}" + ("" if a == b else f".{b}"))

    @property
    def ptx(self) -> str:
        return (f"mma.sync.aligned.kind::{self.kind}.block_scale.scale_vec::{self.scale_vec}X.m16n8k{self.k}.row.col"
                f".f32.{_PTX[self.a_format]}.{_PTX[self.b_format]}.f32.{_PTX[self.scale_format]}")

    def runs_on(self, cc: int) -> bool:
        """sm_120a code runs on compute capability 12.0 (RTX 50xx); the arch-specific features do not carry."""
        return cc == 120

    def formats(self) -> Formats:
        return Formats.of(self.a_format, self.b_format, "fp32", "fp32")

    def preset(self, device: str = "RTX 5090") -> Model:
        """The device's preset Model of this instruction (A's format as input)."""
        from ..devices import device as _device

        inp = self.a_format if self.a_format == self.b_format else (self.a_format, self.b_format)
        return _device(device).model(inp, "fp32", self.instruction)


def _paths() -> dict[str, BlockScalePath]:
    ps = [BlockScalePath("mxf8f6f4", f, f, "e8m0fnu", 32) for f in ("e4m3fn", "e5m2", "e3m2fn", "e2m3fn", "e2m1fn")]
    ps += [BlockScalePath("mxf4", "e2m1fn", "e2m1fn", "e8m0fnu", 32),
           BlockScalePath("mxf4nvf4", "e2m1fn", "e2m1fn", "e8m0fnu", 32),
           BlockScalePath("mxf4nvf4", "e2m1fn", "e2m1fn", "e8m0fnu", 16),
           BlockScalePath("mxf4nvf4", "e2m1fn", "e2m1fn", "ue4m3", 16)]
    return {p.name: p for p in ps}


BLOCK_SCALE_PATHS: dict[str, BlockScalePath] = _paths()


def path(name: str | BlockScalePath) -> BlockScalePath:
    """A path by its name (``"mma.mxf4.block32"``, ``"mma.mxf8f6f4.block32.e4m3"``) or its PTX."""
    if isinstance(name, BlockScalePath):
        return name
    for p in BLOCK_SCALE_PATHS.values():
        if name in (p.name, p.ptx):
            return p
    raise ValueError(f"unknown block-scaled mma path {name!r}; known: {', '.join(BLOCK_SCALE_PATHS)}")


# --- layouts (pure Python: tested without a GPU) ------------------------------------------------------------
@lru_cache(maxsize=None)
def _fragments(p: BlockScalePath, operand: str) -> np.ndarray:
    """(32, registers, elements a register, 2): the (row, column) of A (M x K), B (K x N) or C (M x N) each
    lane's register slot holds; the rule of :func:`blockfma.probes.cuda.fragment_map` at the element width
    (4 bits packed, or an 8-bit container)."""
    proxy = "e2m1fn" if p.packed else "e4m3fn"  # only the width matters to the rule
    mp = _cuda.MmaPath(p.m, p.n, p.k, proxy, proxy, "fp32", "fp32", p.sm)
    return _cuda.fragment_map(mp, operand)


def element_bits(p: BlockScalePath) -> int:
    """Bits an element takes in a register: 4 (``kind::mxf4*``) or an 8-bit container."""
    return 4 if p.packed else 8


def element_codes(p: BlockScalePath, fmt: str, x: np.ndarray) -> np.ndarray:
    """The register codes of values ``x`` of ``fmt``: e2m1 codes (packed kinds) or the 8-bit container
    (the code shifted by :data:`CONTAINER_SHIFT`)."""
    codes = _formats.encode(fmt, np.asarray(x, dtype=np.float64)).astype(np.uint32)
    return codes if p.packed else codes << np.uint32(CONTAINER_SHIFT[fmt])


def pack_operand(p: BlockScalePath, codes: np.ndarray, operand: str) -> np.ndarray:
    """Register words (T, 32, registers) uint32 of one operand's element codes: A (T, 16, K), B (T, K, 8);
    element ``e`` of a register in bits ``e * width`` up."""
    fm = _fragments(p, operand)
    codes = np.asarray(codes, dtype=np.uint32)
    w = element_bits(p)
    vals = codes[:, fm[..., 0], fm[..., 1]]  # (T, 32, regs, per)
    shifts = (np.arange(fm.shape[2], dtype=np.uint32) * np.uint32(w))
    return np.bitwise_or.reduce(vals << shifts, axis=-1).astype(np.uint32)


def unpack_operand(p: BlockScalePath, regs: np.ndarray, operand: str) -> np.ndarray:
    """The inverse of :func:`pack_operand`: element codes A (T, 16, K) or B (T, K, 8)."""
    fm = _fragments(p, operand)
    regs = np.asarray(regs, dtype=np.uint32)
    T = regs.shape[0]
    w = element_bits(p)
    shape = (T, p.m, p.k) if operand == "a" else (T, p.k, p.n)
    out = np.zeros(shape, dtype=np.uint32)
    shifts = (np.arange(fm.shape[2], dtype=np.uint32) * np.uint32(w))
    vals = (regs[..., None] >> shifts) & np.uint32((1 << w) - 1)
    out[:, fm[..., 0], fm[..., 1]] = vals
    return out


def scale_lanes(p: BlockScalePath, operand: str) -> list[list[int]]:
    """For each row of A (16) or column of B (8), the lanes whose scale register holds its scales: every lane
    that a thread-id of 0 or 1 (A) or 0 to 3 (B) names."""
    if operand == "a":
        return [[4 * (m % 8) + 2 * t + m // 8 for t in (0, 1)] for m in range(p.m)]
    return [[4 * n + t for t in range(4)] for n in range(p.n)]


def pack_scales(p: BlockScalePath, codes: np.ndarray, operand: str) -> np.ndarray:
    """Scale registers (T, 32) uint32: A's scale codes (T, 16, V) or B's (T, 8, V) (V = k / scale_block, one a
    scale block along K), block j in byte j of each lane :func:`scale_lanes` names."""
    codes = np.asarray(codes, dtype=np.uint32)
    T, rows, V = codes.shape
    if V != p.scale_vec or rows != (p.m if operand == "a" else p.n):
        raise ValueError(f"{p.name}: scales of {operand.upper()} have shape (T, {p.m if operand == 'a' else p.n}, "
                         f"{p.scale_vec}), not {codes.shape}")
    word = np.bitwise_or.reduce(codes << (np.arange(V, dtype=np.uint32) * np.uint32(8)), axis=-1)  # (T, rows)
    out = np.zeros((T, 32), dtype=np.uint32)
    for r, lanes in enumerate(scale_lanes(p, operand)):
        for lane in lanes:
            out[:, lane] = word[:, r]
    return out


def unpack_scales(p: BlockScalePath, regs: np.ndarray, operand: str, thread_id: int = 0) -> np.ndarray:
    """The scale codes an instruction reads at ``thread_id`` (byte-id 0) from registers (T, 32)."""
    regs = np.asarray(regs, dtype=np.uint32)
    lanes = [ls[thread_id] for ls in scale_lanes(p, operand)]
    words = regs[:, lanes]  # (T, rows)
    return np.stack([(words >> np.uint32(8 * j)) & np.uint32(0xFF) for j in range(p.scale_vec)], axis=-1)


def unpack_d(p: BlockScalePath, regs: np.ndarray) -> np.ndarray:
    """D (T, 16, 8) float32 from the lanes' four f32 registers (T, 32, 4)."""
    fm = _fragments(p, "c")[:, :, 0, :]  # (32, 4, 2)
    regs = np.asarray(regs, dtype=np.uint32)
    out = np.zeros((regs.shape[0], p.m, p.n), dtype=np.uint32)
    out[:, fm[..., 0], fm[..., 1]] = regs
    return out.view(np.float32)


def pack_c(p: BlockScalePath, C: np.ndarray) -> np.ndarray:
    """C (T, 16, 8) fp32 values as the lanes' f32 registers (T, 32, 4), bit patterns."""
    fm = _fragments(p, "c")[:, :, 0, :]
    bits32 = np.asarray(C, dtype=np.float32).view(np.uint32)
    return bits32[:, fm[..., 0], fm[..., 1]]


def tile_registers(p: BlockScalePath, A: Any, B: Any, C: Any, SA: Any, SB: Any) -> tuple[np.ndarray, ...]:
    """Every register the kernel loads, from value tiles: A (T, 16, K), B (T, K, 8), C (T, 16, 8) fp32, scales
    SA (T, 16, V), SB (T, 8, V) of the scale format (NaN allowed).  Returns (ra, rb, rc, rsa, rsb) uint32."""
    A, B = np.asarray(A, dtype=np.float64), np.asarray(B, dtype=np.float64)
    ra = pack_operand(p, element_codes(p, p.a_format, A), "a")
    rb = pack_operand(p, element_codes(p, p.b_format, B), "b")
    rc = pack_c(p, np.asarray(C, dtype=np.float64))
    fs = _formats.get(p.scale_format)
    rsa = pack_scales(p, _formats.encode(fs, np.asarray(SA, dtype=np.float64)), "a")
    rsb = pack_scales(p, _formats.encode(fs, np.asarray(SB, dtype=np.float64)), "b")
    return ra, rb, rc, rsa, rsb


# --- the kernel -----------------------------------------------------------------------------------------
def _kernel_name(p: BlockScalePath) -> str:
    return "k_bs_" + p.name.replace(".", "_")


def kernel_source(p: str | BlockScalePath) -> str:
    """CUDA C++ of one kernel (compile with nvcc -arch=sm_120a): warp t loads its lanes' registers as the host
    packed them (A: 4, B: 2, C: 4, one scale register each of A and B), runs one instruction with byte-id and
    thread-id the immediates 0, and writes its four f32 registers of D."""
    p = path(p)
    name = _kernel_name(p)
    return "\n".join([
        f'extern "C" __global__ void {name}(const unsigned int* RA, const unsigned int* RB, const unsigned int* RC,',
        "    const unsigned int* SA, const unsigned int* SB, unsigned int* RD, long long tiles) {",
        "  long long t = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;",
        "  int lane = threadIdx.x & 31;",
        "  if (t >= tiles) return;  // whole warps only",
        "  long long w = t * 32 + lane;",
        "  unsigned int a0 = RA[w * 4], a1 = RA[w * 4 + 1], a2 = RA[w * 4 + 2], a3 = RA[w * 4 + 3];",
        "  unsigned int b0 = RB[w * 2], b1 = RB[w * 2 + 1];",
        "  float c0 = __uint_as_float(RC[w * 4]), c1 = __uint_as_float(RC[w * 4 + 1]);",
        "  float c2 = __uint_as_float(RC[w * 4 + 2]), c3 = __uint_as_float(RC[w * 4 + 3]);",
        "  unsigned int sa = SA[w], sb = SB[w];",
        "  float d0, d1, d2, d3;",
        f'  asm volatile("{p.ptx} {{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, {{%8, %9}}, {{%10, %11, %12, %13}}, '
        '%14, {0, 0}, %15, {0, 0};"',
        '      : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)',
        '      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(c0), "f"(c1), "f"(c2), "f"(c3),',
        '        "r"(sa), "r"(sb));',
        "  RD[w * 4] = __float_as_uint(d0); RD[w * 4 + 1] = __float_as_uint(d1);",
        "  RD[w * 4 + 2] = __float_as_uint(d2); RD[w * 4 + 3] = __float_as_uint(d3);",
        "}",
    ]) + "\n"


@lru_cache(maxsize=None)
def _compiled(name: str) -> Any:
    cp = _cuda.cupy_module()
    p = path(name)
    mod = cp.RawModule(path=_cuda.nvcc_cubin(kernel_source(p), "sm_120a"))
    return mod.get_function(_kernel_name(p))


def launch(p: BlockScalePath, ra: np.ndarray, rb: np.ndarray, rc: np.ndarray, rsa: np.ndarray, rsb: np.ndarray
           ) -> np.ndarray:
    """The instruction on this GPU over T tiles of packed registers; D's registers (T, 32, 4) uint32."""
    cp = _cuda.cupy_module()
    cc = _cuda.compute_capability()
    if not p.runs_on(cc):
        raise ValueError(f"{p.name} is sm_120a code (RTX 50xx, compute capability 12.0); this GPU is sm_{cc}")
    T = ra.shape[0]
    pad = (-T) % _cuda.WARPS_PER_BLOCK

    def dev(x: np.ndarray) -> Any:
        x = np.ascontiguousarray(x, dtype=np.uint32)
        if pad:
            x = np.concatenate([x, np.zeros((pad,) + x.shape[1:], np.uint32)])
        return cp.asarray(x)

    dA, dB, dC, dSA, dSB = (dev(x) for x in (ra, rb, rc, rsa, rsb))
    dD = cp.zeros_like(dC)
    tiles = T + pad
    _compiled(p.name)((tiles // _cuda.WARPS_PER_BLOCK,), (32 * _cuda.WARPS_PER_BLOCK,),
                      (dA, dB, dC, dSA, dSB, dD, np.int64(tiles)))
    return cp.asnumpy(dD)[:T]


class EmulatedBlockScale:
    """The instruction emulated at the register level (``--simulate``, tests): the registers are read back
    through the PTX layouts (:func:`unpack_operand`, :func:`unpack_scales`) and the Model computes each
    element of D, which goes back into D's registers: the pipeline of :func:`run` without a GPU."""

    def __init__(self, model: Model, diagonal: bool = False):
        self.model = model
        self.diagonal = diagonal  # only D[i, i] (what BlockScaleTarget reads; the rest NaN): 16 times faster

    def __call__(self, p: BlockScalePath, ra: np.ndarray, rb: np.ndarray, rc: np.ndarray, rsa: np.ndarray,
                 rsb: np.ndarray) -> np.ndarray:
        from ..engine import dot

        shift = 0 if p.packed else None
        ca, cb = unpack_operand(p, ra, "a"), unpack_operand(p, rb, "b")
        A = _decode(p, p.a_format, ca, shift)
        B = _decode(p, p.b_format, cb, shift)
        C = unpack_d(p, rc).astype(np.float64)
        fs = _formats.get(p.scale_format)
        SA = _formats.decode(_formats.storage(fs), unpack_scales(p, rsa, "a").astype(np.uint64))
        SB = _formats.decode(_formats.storage(fs), unpack_scales(p, rsb, "b").astype(np.uint64))
        Bt = np.swapaxes(B, 1, 2)  # (T, 8, K)
        if self.diagonal:
            r = min(p.m, p.n)
            D = np.full(C.shape, np.nan)
            idx = np.arange(r)
            D[:, idx, idx] = dot(A[:, :r], Bt[:, :r], C[:, idx, idx], model=self.model, scale_a=SA[:, :r],
                                 scale_b=SB[:, :r], check=False)
        else:
            D = dot(A[:, :, None, :], Bt[:, None, :, :], C, model=self.model, scale_a=SA[:, :, None, :],
                    scale_b=SB[:, None, :, :], check=False)
        return pack_c(p, D.astype(np.float64))


def _decode(p: BlockScalePath, fmt: str, codes: np.ndarray, shift: int | None) -> np.ndarray:
    s = CONTAINER_SHIFT[fmt] if shift is None else shift
    f = _formats.get(fmt)
    field_ = (codes >> np.uint32(s)) & np.uint32((1 << f.bits) - 1)
    return _formats.decode(_formats.storage(f), field_.astype(np.uint64))


def run(p: str | BlockScalePath, A: Any, B: Any, C: Any, SA: Any, SB: Any, *, device: Any = None) -> np.ndarray:
    """D = (A scaled) @ (B scaled) + C for T tiles, one instruction a tile: A (T, 16, K), B (T, K, 8), C
    (T, 16, 8) and scales SA (T, 16, V), SB (T, 8, V) as values; D (T, 16, 8) float32.  ``device``: a
    callable like :class:`EmulatedBlockScale` in place of the GPU."""
    p = path(p)
    regs = tile_registers(p, A, B, C, SA, SB)
    rd = (device or launch)(p, *regs)
    return unpack_d(p, rd)


class BlockScaleTarget(ScaledTarget):
    """One block-scaled ``mma.sync`` path as a probe target: 8 dot products a tile, on D's diagonal (row i of
    A with its scales, column i of B with its scales, C[i, i]); the other rows and columns zero, scales 1.
    ``device``: None for this GPU, or an :class:`EmulatedBlockScale` (``--simulate``)."""

    def __init__(self, name: str | BlockScalePath, device: Any = None):
        super().__init__()
        self.path = path(name)
        p = self.path
        self.k = p.k
        self.formats = p.formats()
        self.scale_format = _formats.get(p.scale_format)
        self.scale_block = p.scale_block
        self.device = device
        self.name = ("emulated:" if device is not None else "cuda:") + p.name

    CHUNK = 1 << 16  # rows a launch: 8192 tiles, about 70 MB of float64 tiles on the host

    def _compute(self, a: np.ndarray, b: np.ndarray, c: np.ndarray, sa: np.ndarray, sb: np.ndarray) -> np.ndarray:
        p = self.path
        out = []
        for s in range(0, len(c), self.CHUNK):
            rows = slice(s, s + self.CHUNK)
            A, B, C, t, i = diagonal_tiles(a[rows], b[rows], c[rows], p.m, p.k, p.n)
            SA, SB = np.ones((len(A), p.m, p.scale_vec)), np.ones((len(A), p.n, p.scale_vec))
            SA[t, i, :], SB[t, i, :] = sa[rows], sb[rows]
            out.append(run(p, A, B, C, SA, SB, device=self.device)[t, i, i])
        return np.concatenate(out)

    def metadata(self) -> dict[str, Any]:
        meta = {**super().metadata(), "instruction": self.path.ptx}
        if self.device is None:
            from .runtime import gpu_metadata

            meta.update(gpu_metadata())
        return meta


def layout_check(p: str | BlockScalePath, device: Any = None, seed: int = 0, tiles: int = 16) -> dict[str, Any]:
    """Whether the layouts hold on the GPU (or ``device``): tiles whose every dot product is exact in fp32
    under any scaled-fused Model (small e2m1 / element values, power-of-two scales near 1, C = 0), against
    the exact sums in float64.  Returns the counts and the first differing element, in words."""
    p = path(p)
    rng = np.random.default_rng(seed)
    T = tiles
    f = p.formats()

    def small(fmt: Any, shape: tuple[int, ...]) -> np.ndarray:
        vals = np.array([0.0, 0.5, 1.0, 1.5, 2.0, -0.5, -1.0, -2.0])
        return vals[rng.integers(0, len(vals), size=shape)] if _formats.is_representable(fmt, vals).all() else \
            np.zeros(shape)

    A, B = small(f.a, (T, p.m, p.k)), small(f.b, (T, p.k, p.n))
    SA = 2.0 ** rng.integers(-2, 3, size=(T, p.m, p.scale_vec)).astype(np.float64)
    SB = 2.0 ** rng.integers(-2, 3, size=(T, p.n, p.scale_vec)).astype(np.float64)
    C = np.zeros((T, p.m, p.n))
    D = run(p, A, B, C, SA, SB, device=device)
    L = p.scale_block
    As = A * np.repeat(SA, L, axis=2)
    Bs = B * np.swapaxes(np.repeat(SB, L, axis=2), 1, 2)
    exact = np.einsum("tmk,tkn->tmn", As, Bs)
    bad = np.argwhere(D.astype(np.float64) != exact)
    out: dict[str, Any] = {"path": p.name, "elements": int(exact.size), "differ": int(len(bad))}
    if len(bad):
        t, m, n = (int(x) for x in bad[0])
        out["first"] = f"tile {t}, D[{m}, {n}] = {float(D[t, m, n])!r}, exact {float(exact[t, m, n])!r}"
    return out


def simulated_target(name: str | BlockScalePath, device: str = "RTX 5090") -> BlockScaleTarget:
    """The path's target with the device's preset emulated at the register level (``--simulate``)."""
    p = path(name)
    return BlockScaleTarget(p, device=EmulatedBlockScale(p.preset(device), diagonal=True))


def preset_target(name: str | BlockScalePath, device: str = "RTX 5090") -> SimScaledTarget:
    """The preset itself as a target (no registers)."""
    p = path(name)
    return SimScaledTarget(p.preset(device), name=f"sim:{device}:{p.instruction}")
