"""Real tensor-core instructions on tiles of our own: ``mma.sync`` through CuPy (NVRTC), many tiles a launch.

Each :class:`MmaPath` is one PTX ``mma.sync.aligned`` variant.  A launch runs one tile per warp: warp ``t``
computes ``D[t] = A[t] @ B[t] + C[t]`` with one instruction, after loading every register of its fragments
from the places the PTX ISA ("Matrix fragments for mma.m16n8k*") gives for its lane (``groupID = lane >> 2``,
``threadID_in_group = lane % 4``).  The fragment maps are plain Python (:func:`fragment_map`), so they can be
checked without a GPU: every element of A, B and C lands in exactly one register slot of one lane.

Values travel as bit patterns (no conversion on the GPU can round them); results come back in the output
format's numpy dtype, to be compared bit for bit with :func:`blockfma.dot`.

    >>> from blockfma.probes import cuda
    >>> D = cuda.run("mma.m16n8k16.f32.f16.f16.f32", A, B, C)     # A (T,16,16), B (T,16,8), C (T,16,8)

CuPy is imported lazily (``pip install 'blockfma[cuda]'``); :func:`available` says whether a GPU is usable.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from .. import formats as _formats

__all__ = ["MmaPath", "PATHS", "path", "fragment_map", "available", "run", "kernel_source", "sass"]

WARPS_PER_BLOCK = 4


@dataclass(frozen=True)
class MmaPath:
    """One ``mma.sync.aligned.mMnNkK.row.col.dtype.atype.btype.ctype`` instruction."""

    m: int
    n: int
    k: int
    a_format: str  # blockfma format names
    b_format: str
    c_format: str
    d_format: str
    sm: int  # lowest compute capability (x10) that has it

    @property
    def ptx_types(self) -> tuple[str, str, str, str]:
        return tuple(_PTX_TYPE[f] for f in (self.d_format, self.a_format, self.b_format, self.c_format))

    @property
    def name(self) -> str:
        d, a, b, c = self.ptx_types
        return f"mma.m{self.m}n{self.n}k{self.k}.{d}.{a}.{b}.{c}"

    @property
    def ptx(self) -> str:
        d, a, b, c = self.ptx_types
        return f"mma.sync.aligned.m{self.m}n{self.n}k{self.k}.row.col.{d}.{a}.{b}.{c}"


_PTX_TYPE = {"fp16": "f16", "bf16": "bf16", "tf32": "tf32", "fp32": "f32", "fp64": "f64", "e4m3fn": "e4m3",
             "e5m2": "e5m2"}


def _paths() -> dict[str, MmaPath]:
    ps = [
        MmaPath(16, 8, 16, "fp16", "fp16", "fp32", "fp32", 80),
        MmaPath(16, 8, 8, "fp16", "fp16", "fp32", "fp32", 75),
        MmaPath(16, 8, 16, "fp16", "fp16", "fp16", "fp16", 80),
        MmaPath(16, 8, 8, "fp16", "fp16", "fp16", "fp16", 75),
        MmaPath(16, 8, 16, "bf16", "bf16", "fp32", "fp32", 80),
        MmaPath(16, 8, 8, "bf16", "bf16", "fp32", "fp32", 80),
        MmaPath(16, 8, 8, "tf32", "tf32", "fp32", "fp32", 80),
        MmaPath(16, 8, 4, "tf32", "tf32", "fp32", "fp32", 80),
        MmaPath(8, 8, 4, "fp64", "fp64", "fp64", "fp64", 80),
    ]
    for k in (32, 16):
        for out in ("fp32", "fp16"):
            for fa in ("e4m3fn", "e5m2"):
                for fb in ("e4m3fn", "e5m2"):
                    ps.append(MmaPath(16, 8, k, fa, fb, out, out, 89))
    return {p.name: p for p in ps}


PATHS: dict[str, MmaPath] = _paths()


def path(name: str | MmaPath) -> MmaPath:
    """Look up a path by its name (``"mma.m16n8k16.f32.f16.f16.f32"``, the ``mma.sync.aligned...`` form
    also works)."""
    if isinstance(name, MmaPath):
        return name
    key = name.replace("mma.sync.aligned.", "mma.").replace(".row.col", "")
    if key not in PATHS:
        raise ValueError(f"unknown mma path {name!r}; known: {', '.join(PATHS)}")
    return PATHS[key]


# --- fragment maps (PTX ISA, "Matrix fragments for mma.m16n8k*") ------------------------------------------
def _bits(fmt: str) -> int:
    return 32 if fmt == "tf32" else _formats.get(fmt).bits


def fragment_map(p: MmaPath, operand: str) -> np.ndarray:
    """(32, registers, elements per register, 2) array: for each lane, register and packed element, the
    (row, column) of the operand it holds.  A is M x K, B is K x N (entries (k, n)), C and D are M x N.
    Packed elements fill a 32-bit register from its low bits up."""
    k = p.k
    out = []
    for lane in range(32):
        g, q = lane >> 2, lane & 3
        if operand in ("c", "d"):
            if p.c_format == "fp64":  # m8n8k4: one row, two columns
                regs = [[(g, 2 * q)], [(g, 2 * q + 1)]]
            elif p.c_format == "fp32":
                regs = [[(g, 2 * q)], [(g, 2 * q + 1)], [(g + 8, 2 * q)], [(g + 8, 2 * q + 1)]]
            else:  # f16x2
                regs = [[(g, 2 * q), (g, 2 * q + 1)], [(g + 8, 2 * q), (g + 8, 2 * q + 1)]]
        else:
            fmt = p.a_format if operand == "a" else p.b_format
            per = 32 // _bits(fmt) if _bits(fmt) < 32 else 1
            if fmt == "fp64":  # m8n8k4
                regs = [[(g, q)]] if operand == "a" else [[(q, g)]]
            elif per == 1:  # tf32: k = 4 or 8, one value a register
                halves = k // 4
                if operand == "a":
                    regs = [[(g + 8 * r, q + 4 * h)] for h in range(halves) for r in (0, 1)]
                else:
                    regs = [[(q + 4 * h, g)] for h in range(halves)]
            else:  # 16-bit (per = 2) or 8-bit (per = 4) values packed along k
                span = 4 * per  # k covered by one register of the four lanes of a group
                halves = k // span
                cols = lambda h: [per * q + span * h + i for i in range(per)]  # noqa: E731
                if operand == "a":
                    regs = [[(g + 8 * r, c) for c in cols(h)] for h in range(halves) for r in (0, 1)]
                else:
                    regs = [[(c, g) for c in cols(h)] for h in range(halves)]
        out.append(regs)
    return np.array(out, dtype=np.int64)


def _offsets(p: MmaPath, operand: str) -> np.ndarray:
    """Element offsets into one tile's row-major storage: A (M, K), B stored transposed (N, K), C (M, N)."""
    fm = fragment_map(p, operand)
    r, c = fm[..., 0], fm[..., 1]
    if operand == "a":
        return r * p.k + c
    if operand == "b":
        return c * p.k + r  # B[k, n] at Bt[n, k]
    return r * p.n + c


# --- kernel source ------------------------------------------------------------------------------------------
_CTYPE = {8: "unsigned char", 16: "unsigned short", 32: "unsigned int", 64: "unsigned long long"}


def _kernel_name(p: MmaPath) -> str:
    return "k_" + p.name.replace(".", "_")


def kernel_source(p: MmaPath) -> str:
    """CUDA C++ of one kernel: one warp a tile, fragments loaded by offset tables, one mma.sync."""
    p = path(p)
    fa, fb, fc = _offsets(p, "a"), _offsets(p, "b"), _offsets(p, "c")
    ba, bb, bc = _bits(p.a_format), _bits(p.b_format), _bits(p.c_format)
    na, nb, nc = fa.shape[1], fb.shape[1], fc.shape[1]
    lines = [f"extern \"C\" __global__ void {_kernel_name(p)}(const {_CTYPE[ba]}* A, const {_CTYPE[bb]}* B,",
             f"    const {_CTYPE[bc]}* C, {_CTYPE[bc]}* D, const int* offA, const int* offB, const int* offC,",
             "    long long tiles) {",
             "  long long t = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;",
             "  int lane = threadIdx.x & 31;",
             "  if (t >= tiles) return;  // whole warps only: tiles end on a warp boundary",
             f"  const {_CTYPE[ba]}* a = A + t * {p.m * p.k};",
             f"  const {_CTYPE[bb]}* b = B + t * {p.n * p.k};",
             f"  const {_CTYPE[bc]}* c = C + t * {p.m * p.n};",
             f"  {_CTYPE[bc]}* d = D + t * {p.m * p.n};"]

    def load(name: str, src: str, nregs: int, per: int, width: int, table: str) -> None:
        wide = width == 64
        lines.append(f"  {'double' if wide else 'unsigned int'} {name}[{nregs}];")
        for r in range(nregs):
            if wide:
                lines.append(f"  {name}[{r}] = __longlong_as_double({src}[{table}[lane * {nregs} + {r}]]);")
                continue
            parts = [f"((unsigned int){src}[{table}[(lane * {nregs} + {r}) * {per} + {e}]] << {e * width})"
                     for e in range(per)]
            lines.append(f"  {name}[{r}] = {' | '.join(parts)};")

    per = lambda w: 32 // w if w < 32 else 1  # noqa: E731
    load("ra", "a", na, per(ba), ba, "offA")
    load("rb", "b", nb, per(bb), bb, "offB")
    load("rc", "c", nc, per(bc), bc, "offC")
    ctype, cons = {64: ("double", "d"), 32: ("float", "f")}.get(bc, ("unsigned int", "r"))  # f16x2 in b32
    lines.append(f"  {ctype} fc[{nc}], fd[{nc}];")
    for r in range(nc):
        if bc == 32:
            lines.append(f"  fc[{r}] = __uint_as_float(rc[{r}]);")
        else:
            lines.append(f"  fc[{r}] = rc[{r}];")
    idx = 0

    def group(n: int) -> str:
        nonlocal idx
        s = "{" + ", ".join(f"%{idx + i}" for i in range(n)) + "}"
        idx += n
        return s

    gd, ga, gb, gc = group(nc), group(na), group(nb), group(nc)
    cons_a = "d" if ba == 64 else "r"
    outs = ", ".join(f'"={cons}"(fd[{i}])' for i in range(nc))
    ins = ", ".join([f'"{cons_a}"(ra[{i}])' for i in range(na)] + [f'"{cons_a}"(rb[{i}])' for i in range(nb)]
                    + [f'"{cons}"(fc[{i}])' for i in range(nc)])
    lines.append(f'  asm volatile("{p.ptx} {gd}, {ga}, {gb}, {gc};" : {outs} : {ins});')
    for r in range(nc):
        if bc == 64:
            lines.append(f"  d[offC[lane * {nc} + {r}]] = __double_as_longlong(fd[{r}]);")
        elif bc == 32:
            lines.append(f"  d[offC[lane * {nc} + {r}]] = __float_as_uint(fd[{r}]);")
        else:
            for e in range(2):
                lines.append(f"  d[offC[(lane * {nc} + {r}) * 2 + {e}]] = (unsigned short)(fd[{r}] >> {16 * e});")
    lines.append("}")
    return "\n".join(lines) + "\n"


# --- running ---------------------------------------------------------------------------------------------
def _cupy() -> Any:
    try:
        import cupy
    except ImportError:
        raise ImportError("the cuda probes need CuPy and an NVIDIA GPU: pip install 'blockfma[cuda]'") from None
    return cupy


def available() -> bool:
    """Whether CuPy imports and sees a CUDA GPU."""
    try:
        cp = _cupy()
        return cp.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def compute_capability() -> int:
    """The current GPU's compute capability times ten (90 for an H100)."""
    cp = _cupy()
    return int(cp.cuda.Device().compute_capability)


@lru_cache(maxsize=None)
def _compiled(name: str, arch: int) -> tuple[Any, tuple[Any, Any, Any]]:
    cp = _cupy()
    p = PATHS[name]
    mod = cp.RawModule(code=kernel_source(p), options=("-std=c++17",))  # CuPy targets this GPU's sm
    fn = mod.get_function(_kernel_name(p))
    tables = tuple(cp.asarray(_offsets(p, op).ravel().astype(np.int32)) for op in ("a", "b", "c"))
    return fn, tables


def _codes(fmt: str, x: np.ndarray, what: str) -> np.ndarray:
    """Bit patterns of values of ``fmt`` as the unsigned dtype of its width (tf32 as binary32 bits)."""
    f = _formats.get("fp32" if fmt == "tf32" else fmt)
    x = np.asarray(x, dtype=np.float64)
    if fmt == "tf32":  # the unit reads a binary32 register; keep the value whole so that tests can see how
        if not np.all(_formats.is_representable(_formats.fp32, x)):
            raise ValueError(f"{what}: tf32 operands travel as binary32; values must be binary32 numbers")
    try:
        codes = _formats.encode(f, x)
    except ValueError as exc:
        raise ValueError(f"{what}: {exc}") from None
    return codes.astype({8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[f.bits])


def run(p: str | MmaPath, A: Any, B: Any, C: Any, *, raw: bool = False) -> np.ndarray:
    """D = A @ B + C on the GPU's tensor cores, one ``mma.sync`` per tile.

    ``A``: (T, M, K), ``B``: (T, K, N), ``C``: (T, M, N) values of the path's formats (float64 or any float
    dtype; tf32 operands may be any binary32 values: the unit decides how to read them).  With ``raw=True``
    A, B and C are bit patterns already (unsigned ints of each format's width; B still (T, K, N)).
    Returns D (T, M, N) in the output format's numpy dtype.
    """
    p = path(p)
    cp = _cupy()
    arch = compute_capability()
    if arch < p.sm:
        raise ValueError(f"{p.name} needs sm_{p.sm} or later; this GPU is sm_{arch}")
    A = np.asarray(A)
    B = np.asarray(B)
    C = np.asarray(C)
    T = A.shape[0] if A.ndim == 3 else -1
    for x, shape, what in ((A, (T, p.m, p.k), "A"), (B, (T, p.k, p.n), "B"), (C, (T, p.m, p.n), "C")):
        if x.shape != shape:
            raise ValueError(f"{what} has shape {x.shape}; {p.name} takes A (T, {p.m}, {p.k}), "
                             f"B (T, {p.k}, {p.n}), C (T, {p.m}, {p.n})")
    if raw:
        ca, cb, cc = A, np.swapaxes(B, 1, 2), C
    else:
        ca = _codes(p.a_format, A, "A")
        cb = _codes(p.b_format, np.swapaxes(B, 1, 2), "B")
        cc = _codes(p.c_format, C, "C")
    fn, (ta, tb, tc) = _compiled(p.name, arch)
    pad = (-T) % WARPS_PER_BLOCK
    def dev(x: np.ndarray) -> Any:
        x = np.ascontiguousarray(x)
        if pad:
            x = np.concatenate([x, np.zeros((pad,) + x.shape[1:], x.dtype)])
        return cp.asarray(x)
    dA, dB, dC = dev(ca), dev(cb), dev(cc)
    dD = cp.zeros_like(dC)
    tiles = T + pad
    fn((tiles // WARPS_PER_BLOCK,), (32 * WARPS_PER_BLOCK,), (dA, dB, dC, dD, ta, tb, tc, np.int64(tiles)))
    out = cp.asnumpy(dD)[:T]
    dtype = _formats.get(p.d_format).dtype
    return out.view(dtype)


def sass(p: str | MmaPath, arch: int | None = None) -> str:
    """The SASS of a path's kernel (nvcc -cubin, then cuobjdump -sass), to check which instruction runs
    (HMMA, DMMA, QMMA/HMMA for fp8...).  Needs nvcc and cuobjdump on the PATH."""
    import os
    import subprocess
    import tempfile

    p = path(p)
    arch = arch or compute_capability()
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "k.cu")
        cubin = os.path.join(tmp, "k.cubin")
        with open(src, "w") as fh:
            fh.write(kernel_source(p))
        subprocess.run(["nvcc", "-cubin", f"-arch=sm_{arch}", "-o", cubin, src], check=True, capture_output=True)
        return subprocess.run(["cuobjdump", "-sass", cubin], check=True, capture_output=True, text=True).stdout
