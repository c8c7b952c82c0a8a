"""Real tensor-core instructions on tiles of our own: ``mma.sync`` through CuPy (NVRTC) and Hopper's
``wgmma`` (nvcc, sm_90a), many tiles a launch.

Each :class:`MmaPath` is one PTX ``mma.sync.aligned`` variant.  A launch runs one tile per warp: warp ``t``
computes ``D[t] = A[t] @ B[t] + C[t]`` with one instruction, after loading every register of its fragments
from the places the PTX ISA ("Matrix fragments for mma.m16n8k*") gives for its lane (``groupID = lane >> 2``,
``threadID_in_group = lane % 4``).  The fragment maps are plain Python (:func:`fragment_map`), so they can be
checked without a GPU: every element of A, B and C lands in exactly one register slot of one lane.

Each :class:`WgmmaPath` is one ``wgmma.mma_async.sync.aligned.m64nNkK`` variant, one warpgroup a tile
(docs/probes.md, "Targets"): A and B in shared memory (:func:`smem_offset`) read through matrix descriptors
(:func:`wgmma_descriptor`), C where :func:`accumulator_map` puts it; compiled for sm_90a only.

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
from ..optional import require

__all__ = ["MmaPath", "PATHS", "WgmmaPath", "WGMMA_PATHS", "path", "fragment_map", "smem_offset",
           "wgmma_descriptor", "accumulator_map", "available", "run", "kernel_source", "sass"]

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

    def runs_on(self, cc: int) -> bool:
        """Whether a GPU of compute capability ``cc`` (x10) has this instruction."""
        return cc >= self.sm


@dataclass(frozen=True)
class WgmmaPath:
    """One ``wgmma.mma_async.sync.aligned.m64nNkK.dtype.atype.btype`` instruction (Hopper, sm_90a): a
    warpgroup computes D (64 x N) = A (64 x K) @ B (K x N) + C, A and B from shared memory, C and D in the
    accumulator registers (C in the output format)."""

    n: int
    k: int
    a_format: str
    b_format: str
    d_format: str
    m: int = 64
    sm: int = 90

    @property
    def c_format(self) -> str:
        return self.d_format

    @property
    def ptx_types(self) -> tuple[str, str, str]:
        return tuple(_PTX_TYPE[f] for f in (self.d_format, self.a_format, self.b_format))

    @property
    def name(self) -> str:
        d, a, b = self.ptx_types
        return f"wgmma.m64n{self.n}k{self.k}.{d}.{a}.{b}"

    @property
    def ptx(self) -> str:
        d, a, b = self.ptx_types
        return f"wgmma.mma_async.sync.aligned.m64n{self.n}k{self.k}.{d}.{a}.{b}"

    def runs_on(self, cc: int) -> bool:
        """sm_90a code runs on compute capability 9.0 only (arch-specific features do not carry forward)."""
        return cc == 90


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

WGMMA_N = 64  # columns of D per tile: 64 independent dot products on its diagonal, 32 fp32 registers a thread


def _wgmma_paths() -> dict[str, WgmmaPath]:
    ps = [WgmmaPath(WGMMA_N, 16, "fp16", "fp16", "fp32"), WgmmaPath(WGMMA_N, 16, "fp16", "fp16", "fp16"),
          WgmmaPath(WGMMA_N, 16, "bf16", "bf16", "fp32"), WgmmaPath(WGMMA_N, 8, "tf32", "tf32", "fp32")]
    for out in ("fp32", "fp16"):
        for fa in ("e4m3fn", "e5m2"):
            for fb in ("e4m3fn", "e5m2"):
                ps.append(WgmmaPath(WGMMA_N, 32, fa, fb, out))
    return {p.name: p for p in ps}


WGMMA_PATHS: dict[str, WgmmaPath] = _wgmma_paths()

Path = MmaPath | WgmmaPath


def path(name: str | Path) -> Path:
    """Look up a path by its name (``"mma.m16n8k16.f32.f16.f16.f32"``, ``"wgmma.m64n64k16.f32.f16.f16"``;
    the ``mma.sync.aligned...`` and ``wgmma.mma_async.sync.aligned...`` forms also work)."""
    if isinstance(name, (MmaPath, WgmmaPath)):
        return name
    key = name.replace("mma.sync.aligned.", "mma.").replace(".row.col", "")
    key = key.replace("wgmma.mma_async.sync.aligned.", "wgmma.")
    if key in PATHS:
        return PATHS[key]
    if key in WGMMA_PATHS:
        return WGMMA_PATHS[key]
    raise ValueError(f"unknown mma path {name!r}; known: {', '.join(list(PATHS) + list(WGMMA_PATHS))}")


# --- fragment maps (PTX ISA, "Matrix fragments for mma.m16n8k*") ------------------------------------------
def _bits(fmt: str) -> int:
    return _formats.storage(fmt).bits


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


# --- wgmma: shared-memory layout, descriptors, accumulator fragments (PTX ISA, "Asynchronous Warpgroup Level
# Matrix Multiply-Accumulate": canonical layouts, matrix descriptor, register fragments of D) ------------------
WGMMA_ROW_BYTES = 32  # one row of A (or of B stored N x K) holds K values: 16 fp16/bf16, 8 tf32, 32 fp8
WGMMA_CORE = (8, 16)  # a core matrix: 8 rows of 16 bytes, 128 contiguous bytes
WGMMA_LBO = 128  # leading-dimension byte offset: from a core matrix to the next along K
WGMMA_SBO = 256  # stride-dimension byte offset: from a core matrix to the next along M (or N)


def smem_offset(row: Any, byte: Any) -> Any:
    """Where byte ``byte`` (0..31) of row ``row`` of an operand (A: 64 x K; B: N x K) goes in shared memory:
    the canonical K-major layout without swizzling, core matrices of 8 rows x 16 bytes, the two core
    matrices of a row group WGMMA_LBO bytes apart along K and row groups WGMMA_SBO bytes apart."""
    row, byte = np.asarray(row), np.asarray(byte)
    return (row // 8) * WGMMA_SBO + (byte // 16) * WGMMA_LBO + (row % 8) * 16 + byte % 16


def wgmma_descriptor(address: int, lbo: int = WGMMA_LBO, sbo: int = WGMMA_SBO, swizzle: int = 0) -> int:
    """The 64-bit shared-memory matrix descriptor: bits 0-13 the start address, 16-29 the leading and 32-45
    the stride byte offsets (each in units of 16 bytes), 49-51 the base offset (0: canonical layouts), 62-63
    the swizzle mode (0: none)."""
    for what, v in (("address", address), ("lbo", lbo), ("sbo", sbo)):
        if v % 16 or not 0 <= v >> 4 < 1 << 14:
            raise ValueError(f"{what} {v} must be a multiple of 16 below 2**18")
    return (address >> 4) | ((lbo >> 4) << 16) | ((sbo >> 4) << 32) | (swizzle << 62)


def descriptor_address(desc: int, row: Any, byte: Any) -> Any:
    """The shared-memory address a descriptor gives to byte ``byte`` of row ``row`` (no swizzle): start +
    (row // 8) SBO + (byte // 16) LBO + (row % 8) 16 + byte % 16, the PTX ISA's canonical K-major layout.
    :func:`smem_offset` must agree with it for the descriptors the kernels pass."""
    start, lbo, sbo = (desc & 0x3FFF) << 4, ((desc >> 16) & 0x3FFF) << 4, ((desc >> 32) & 0x3FFF) << 4
    if desc >> 62:
        raise ValueError("only descriptors without swizzling are read here")
    row, byte = np.asarray(row), np.asarray(byte)
    return start + (row // 8) * sbo + (byte // 16) * lbo + (row % 8) * 16 + byte % 16


def accumulator_map(p: WgmmaPath) -> np.ndarray:
    """(128, registers, elements per register, 2): for each thread of the warpgroup, register and packed
    element of the accumulator, the (row, column) of D it holds.  Warp w holds rows 16w..16w+15; in each
    8-column group, lane l holds row l // 4 (and + 8) and columns 2 (l % 4) and 2 (l % 4) + 1.  fp32: N / 2
    registers, i-th: row + 8 ((i // 2) % 2), column 8 (i // 4) + 2 (l % 4) + i % 2.  fp16: N / 4 registers
    of two halves (the lower column in the low half), i-th: row + 8 (i % 2), columns from 8 (i // 2)."""
    out = []
    for tid in range(128):
        w, lane = tid // 32, tid % 32
        row0, col0 = 16 * w + lane // 4, 2 * (lane % 4)
        if p.d_format == "fp32":
            regs = [[(row0 + 8 * ((i // 2) % 2), 8 * (i // 4) + col0 + i % 2)] for i in range(p.n // 2)]
        else:
            regs = [[(row0 + 8 * (i % 2), 8 * (i // 2) + col0 + e) for e in range(2)] for i in range(p.n // 4)]
        out.append(regs)
    return np.array(out, dtype=np.int64)


def wgmma_kernel_source(p: WgmmaPath) -> str:
    """CUDA C++ of one wgmma kernel: a block (one warpgroup) a tile; A and B bytes into shared memory as
    :func:`smem_offset` places them, C into the accumulator as :func:`accumulator_map` says, one wgmma
    (D = A B + D), D back the same way.  Compile for sm_90a."""
    p = path(p)
    if not isinstance(p, WgmmaPath):
        raise ValueError(f"{p.name} is not a wgmma path")
    f32 = p.d_format == "fp32"
    nregs = p.n // 2 if f32 else p.n // 4
    ctype = "unsigned int" if f32 else "unsigned short"
    name = _kernel_name(p)
    b_bytes = p.n * WGMMA_ROW_BYTES
    lines = [
        f"extern \"C\" __global__ void __launch_bounds__(128) {name}(const unsigned char* A, const unsigned char* B,",
        f"    const {ctype}* C, {ctype}* D, const int* offC) {{",
        f"  __shared__ __align__(128) unsigned char sa[{64 * WGMMA_ROW_BYTES}];",
        f"  __shared__ __align__(128) unsigned char sb[{b_bytes}];",
        "  const unsigned int tid = threadIdx.x;",
        "  const long long t = blockIdx.x;",
        f"  const unsigned char* a = A + t * {64 * WGMMA_ROW_BYTES}LL;",
        f"  const unsigned char* b = B + t * {b_bytes}LL;",
        f"  const {ctype}* c = C + t * {64 * p.n}LL;",
        f"  {ctype}* d = D + t * {64 * p.n}LL;",
        "  // rows of 32 bytes -> core matrices of 8 rows x 16 bytes (smem_offset)",
        f"  for (unsigned int i = tid; i < {64 * WGMMA_ROW_BYTES}u; i += 128u) {{",
        "    unsigned int r = i >> 5, y = i & 31u;",
        f"    sa[(r >> 3) * {WGMMA_SBO}u + (y >> 4) * {WGMMA_LBO}u + (r & 7u) * 16u + (y & 15u)] = a[i];",
        "  }",
        f"  for (unsigned int i = tid; i < {b_bytes}u; i += 128u) {{",
        "    unsigned int r = i >> 5, y = i & 31u;",
        f"    sb[(r >> 3) * {WGMMA_SBO}u + (y >> 4) * {WGMMA_LBO}u + (r & 7u) * 16u + (y & 15u)] = b[i];",
        "  }",
        f"  {'float' if f32 else 'unsigned int'} acc[{nregs}];",
    ]
    for r in range(nregs):
        if f32:
            lines.append(f"  acc[{r}] = __uint_as_float(c[offC[tid * {nregs} + {r}]]);")
        else:
            lines.append(f"  acc[{r}] = (unsigned int)c[offC[(tid * {nregs} + {r}) * 2]]"
                         f" | ((unsigned int)c[offC[(tid * {nregs} + {r}) * 2 + 1]] << 16);")
    fields = f"({WGMMA_LBO >> 4}ull << 16) | ({WGMMA_SBO >> 4}ull << 32)"
    lines += [
        f"  unsigned long long da = (((unsigned long long)__cvta_generic_to_shared(sa) & 0x3FFFFull) >> 4) | {fields};",
        f"  unsigned long long db = (((unsigned long long)__cvta_generic_to_shared(sb) & 0x3FFFFull) >> 4) | {fields};",
        '  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");',
        "  __syncthreads();",
        '  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");',
    ]
    regs = ", ".join(f"%{i}" for i in range(nregs))
    trans = ", 0, 0" if p.a_format in ("fp16", "bf16") else ""  # imm-trans-a, -b: K-major A and B
    body = (f"{{\\n .reg .pred p;\\n setp.ne.b32 p, %{nregs + 2}, 0;\\n "
            f"{p.ptx} {{{regs}}}, %{nregs}, %{nregs + 1}, p, 1, 1{trans};\\n}}")
    outs = ", ".join(f'"+{"f" if f32 else "r"}"(acc[{i}])' for i in range(nregs))
    lines.append(f'  asm volatile("{body}" : {outs} : "l"(da), "l"(db), "r"(1) : "memory");')
    lines += ['  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");',
              '  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");']
    lines += _store_d("acc", "tid", nregs, 32 if f32 else 16)
    lines.append("}")
    return "\n".join(lines) + "\n"


def _store_d(reg: str, who: str, n: int, bits: int) -> list[str]:
    """C++ lines that write registers ``reg[0..n)`` of thread ``who`` to D at the offset table's places
    (``offC``): a double or a float by its bits, or two 16-bit halves a register, the low one first."""
    if bits == 64:
        return [f"  d[offC[{who} * {n} + {r}]] = __double_as_longlong({reg}[{r}]);" for r in range(n)]
    if bits == 32:
        return [f"  d[offC[{who} * {n} + {r}]] = __float_as_uint({reg}[{r}]);" for r in range(n)]
    return [f"  d[offC[({who} * {n} + {r}) * 2 + {e}]] = (unsigned short)({reg}[{r}] >> {16 * e});"
            for r in range(n) for e in range(2)]


# --- kernel source ------------------------------------------------------------------------------------------
_CTYPE = {8: "unsigned char", 16: "unsigned short", 32: "unsigned int", 64: "unsigned long long"}


def _kernel_name(p: MmaPath) -> str:
    return "k_" + p.name.replace(".", "_")


def kernel_source(p: str | Path) -> str:
    """CUDA C++ of one kernel: for mma.sync one warp a tile, fragments loaded by offset tables, one
    instruction; for wgmma :func:`wgmma_kernel_source`."""
    p = path(p)
    if isinstance(p, WgmmaPath):
        return wgmma_kernel_source(p)
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
    lines += _store_d("fd", "lane", nc, bc)
    lines.append("}")
    return "\n".join(lines) + "\n"


# --- running ---------------------------------------------------------------------------------------------
def cupy_module() -> Any:
    return require("cupy", extra="cuda", needed_by="blockfma.probes.cuda", what="CuPy and an NVIDIA GPU")


def available() -> bool:
    """Whether CuPy imports and sees a CUDA GPU."""
    try:
        cp = cupy_module()
        return cp.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 (no CuPy, no driver, no GPU: each raises its own kind; all say "not available")
        return False


def compute_capability() -> int:
    """The current GPU's compute capability times ten (90 for an H100)."""
    cp = cupy_module()
    return int(cp.cuda.Device().compute_capability)


@lru_cache(maxsize=None)
def _compiled(name: str, arch: int) -> tuple[Any, tuple[Any, ...]]:
    cp = cupy_module()
    p = path(name)
    if isinstance(p, WgmmaPath):  # sm_90a: CuPy's NVRTC call names the plain sm_90, so nvcc builds the cubin
        mod = cp.RawModule(path=nvcc_cubin(kernel_source(p), "sm_90a"))
        acc = accumulator_map(p)
        offsets = (acc[..., 0] * p.n + acc[..., 1]).ravel().astype(np.int32)  # into the tile's D, row-major
        return mod.get_function(_kernel_name(p)), (cp.asarray(offsets),)
    mod = cp.RawModule(code=kernel_source(p), options=("-std=c++17",))  # CuPy targets this GPU's sm
    fn = mod.get_function(_kernel_name(p))
    tables = tuple(cp.asarray(_offsets(p, op).ravel().astype(np.int32)) for op in ("a", "b", "c"))
    return fn, tables


def _nvcc(source: str, arch: str, out: str, flag: str) -> None:
    """nvcc ``flag`` (-cubin) of ``source`` for ``arch`` into the file ``out``; the compiler's message on failure."""
    import os
    import subprocess

    src = out.rsplit(".", 1)[0] + ".cu"
    with open(src, "w") as fh:
        fh.write(source)
    try:
        subprocess.run(["nvcc", flag, f"-arch={arch}", "-o", out, src], check=True, capture_output=True, text=True)
    except FileNotFoundError:
        raise RuntimeError(f"compiling for {arch} needs nvcc (the CUDA toolkit) on the PATH") from None
    except subprocess.CalledProcessError as exc:
        raise RuntimeError(f"nvcc -arch={arch} failed:\n{exc.stderr.strip()}") from None
    finally:
        if os.path.exists(src):
            os.remove(src)


_BUILD: list[Any] = []  # the temporary folder of this process's cubins (removed at exit)


def nvcc_cubin(source: str, arch: str) -> str:
    """A cubin of ``source`` for ``arch`` in a folder that lives as long as the process."""
    import hashlib
    import os
    import tempfile

    if not _BUILD:
        _BUILD.append(tempfile.TemporaryDirectory(prefix="blockfma-cuda-"))
    out = os.path.join(_BUILD[0].name, hashlib.sha1(source.encode()).hexdigest()[:16] + ".cubin")
    if not os.path.exists(out):
        _nvcc(source, arch, out, "-cubin")
    return out


def _codes(fmt: str, x: np.ndarray, what: str) -> np.ndarray:
    """Bit patterns of values of ``fmt`` as the unsigned dtype of its width (tf32 as binary32 bits)."""
    f = _formats.storage(fmt)
    x = np.asarray(x, dtype=np.float64)
    if f != _formats.get(fmt):  # tf32: a binary32 register, its value kept whole: the unit decides how to read it
        if not np.all(_formats.is_representable(f, x)):
            raise ValueError(f"{what}: {fmt} operands travel as {f.name} codes; values must be {f.name} numbers")
    try:
        codes = _formats.encode(f, x)
    except ValueError as exc:
        raise ValueError(f"{what}: {exc}") from None
    return codes.astype(_formats.uint_dtype(f.bits))


def run(p: str | Path, A: Any, B: Any, C: Any, *, raw: bool = False) -> np.ndarray:
    """D = A @ B + C on the GPU's tensor cores, one ``mma.sync`` (or one ``wgmma``) per tile.

    ``A``: (T, M, K), ``B``: (T, K, N), ``C``: (T, M, N) values of the path's formats (float64 or any float
    dtype; tf32 operands may be any binary32 values: the unit decides how to read them).  With ``raw=True``
    A, B and C are bit patterns already (unsigned ints of each format's width; B still (T, K, N)).
    Returns D (T, M, N) in the output format's numpy dtype.
    """
    p = path(p)
    cp = cupy_module()
    arch = compute_capability()
    if not p.runs_on(arch):
        need = "sm_90a, i.e. compute capability 9.0 exactly" if isinstance(p, WgmmaPath) else f"sm_{p.sm} or later"
        raise ValueError(f"{p.name} needs {need}; this GPU is sm_{arch}")
    A, B, C = np.asarray(A), np.asarray(B), np.asarray(C)
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
    if isinstance(p, WgmmaPath):  # one block (a warpgroup) a tile; A and B as bytes, rows of 32 bytes
        fn, (tc,) = _compiled(p.name, arch)
        dA, dB, dC = (cp.asarray(np.ascontiguousarray(x)) for x in (ca, cb, cc))
        dD = cp.zeros_like(dC)
        if T:
            fn((T,), (128,), (dA, dB, dC, dD, tc))
        return cp.asnumpy(dD).view(_formats.get(p.d_format).dtype)
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
    return cp.asnumpy(dD)[:T].view(_formats.get(p.d_format).dtype)


def sass(p: str | Path, arch: int | None = None) -> str:
    """The SASS of a path's kernel (nvcc -cubin, then cuobjdump -sass), to check which instruction runs
    (HMMA, DMMA, QMMA/HMMA for fp8, HGMMA/QGMMA for wgmma...).  Needs nvcc and cuobjdump on the PATH."""
    import os
    import subprocess
    import tempfile

    p = path(p)
    target = "sm_90a" if isinstance(p, WgmmaPath) else f"sm_{arch or compute_capability()}"
    with tempfile.TemporaryDirectory() as tmp:
        cubin = os.path.join(tmp, "k.cubin")
        _nvcc(kernel_source(p), target, cubin, "-cubin")
        return subprocess.run(["cuobjdump", "-sass", cubin], check=True, capture_output=True, text=True).stdout
