"""Hardware truth: real tensor-core instructions against ``blockfma.dot``, bit for bit, as a JSON record.

For every instruction path the GPU runs (``mma.sync`` through the project's own kernels in
``blockfma.probes.cuda``; ``wgmma`` and Hopper's new DMMA shapes through the peer harness
``mmasim-kernels``, compiled here with nvcc, never imported by the package), the script

1. checks the fragment layout on small integers (exact in every format) and, where the peer harness is
   present, that our kernels and its kernels give the same bits on the same tiles;
2. runs about a million dot products drawn from input families built to break fused datapaths (random,
   wide exponent spread, cancellation, underflow, exact zeros of both signs, specials, extremes, random
   bit patterns) and compares each with the preset's model and with named variants (bits, so NaN
   payloads and the sign of zero count); every mismatch is counted by kind and the first ones are kept
   in exact form;
3. runs targeted rows for the open questions (sign of a zero from a nonzero sum, NaN patterns,
   e_zero, tf32 read from fp32 registers);
4. compares ``torch.matmul`` (cuBLAS) with chained-block models over long K, with the reduced-precision
   reduction switches both ways.

The record is written atomically after every path, so an interrupted run keeps what it finished.

    python scripts/record_hardware.py --out data/hardware/h100-mma.json          # on a GPU
    python scripts/record_hardware.py --simulate --per-path 2000 --out /tmp/x.json  # the pipeline, on a CPU

``--simulate`` replaces the GPU by the engine itself (every row must match): the test of this script.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
import pathlib
from typing import Any, Callable

import numpy as np

import blockfma as bf
from blockfma import formats as F
from blockfma.arguments import ArgumentError
from blockfma.files import STDOUT, destination, write_text
from blockfma.model import Model
from blockfma.probes import cuda


def decode(fmt: str, codes: np.ndarray) -> np.ndarray:
    return F.decode(F.storage(fmt), codes.astype(np.uint64))


def hexval(x: float) -> str:
    return "nan" if x != x else float(x).hex()


# --- a path: one instruction, its tile shape, formats and the models to hold it to ------------------------
@dataclass
class Instr:
    name: str
    kind: str  # "own" (blockfma.probes.cuda), "wgmma" or "mmasim" (peer harness)
    m: int
    n: int
    k: int
    fa: str
    fb: str
    fc: str
    fd: str
    models: list[tuple[str, Model]] = field(default_factory=list)
    stand_in: bool = False  # mixed fp8 formats evaluated with an fp16-input copy of the model

    @property
    def per_tile(self) -> int:
        return self.m * self.n


def _tf(m: Model, **kw: Any) -> Model:
    return m.replace(**kw)


def models_for(fa: str, fb: str, fout: str, instruction: str, k: int = 0) -> tuple[list[tuple[str, Any]], bool]:
    """The preset's model first, then variants that the data may settle."""
    H = bf.device("H100")
    fin = fa
    out: list[tuple[str, Model]] = []
    if fin in ("fp16", "bf16", "tf32"):
        base = H.model(fin, fout, instruction)
        out.append((f"H100 {instruction} preset", base))
        out.append(("exact_zero=ieee", _tf(base, exact_zero="ieee", rounded_zero="signed")))
        out.append(("rounded_zero=signed", _tf(base, rounded_zero="signed")))
        if fout == "fp16":
            for ez in (-133, -20, -22, -24):
                out.append((f"e_zero={ez}", _tf(base, e_zero=ez)))
        else:
            out.append(("L=8,F=24 (A100)", _tf(base, block_width=8, fraction_bits=24, e_zero=-132)))
            out.append(("e_zero=-140", _tf(base, e_zero=-140)))
        if fin == "tf32":
            out.append(("fp32 operands read RNE to tf32", _tf(base, input_rounding="rne")))
    elif fin == "fp64":
        base = H.model("fp64", "fp64", "mma")
        out.append(("H100 mma preset (FMA chain)", base))
        out.append(("exact dot, one rounding", bf.device("exact").model("fp64", "fp64")))
    else:  # fp8, A and B in the same or in different formats (the engine takes both)
        h = H.model((fa, fb), fout, "wgmma")
        out.append(("H100 wgmma preset", h))
        if instruction == "mma":  # SASS: F2FP unpack to fp16, two HMMAs, FADD/HADD of C (the preset since issue 8)
            out.insert(0, (f"H100 mma.m16n8k{k}.fp8 preset", H.model((fa, fb), fout, f"mma.m16n8k{k}.fp8")))
        out.append(("Ada preset (L=16)", bf.device("Ada").model((fa, fb), fout)))
        if fout == "fp32":
            out.append(("L=32,F=25 RZ (B200 tcgen05)", _tf(h, fraction_bits=25, output_fraction_bits=None)))
            out.append(("F=13, fp32 result not cut", _tf(h, output_fraction_bits=None)))
        out.append(("exact_zero=ieee", _tf(h, exact_zero="ieee", rounded_zero="signed")))
        if fout == "fp16":
            out.append(("e_zero=-133", _tf(h, e_zero=-133)))
    return out, False  # no stand-in since the engine takes mixed operand formats (kept for old records)


def own_paths() -> list[Instr]:
    paths = []
    for name, p in cuda.PATHS.items():
        models, mixed = models_for(p.a_format, p.b_format, p.d_format, "mma", p.k)
        paths.append(Instr(name, "own", p.m, p.n, p.k, p.a_format, p.b_format, p.c_format, p.d_format, models,
                          mixed))
    return paths


WGMMA_N = 128  # the peer harness's tiles: 64 x 128 (the package's own wgmma kernels use N = 64)


def wgmma_shapes() -> list[cuda.WgmmaPath]:
    """The package's wgmma paths (:data:`blockfma.probes.cuda.WGMMA_PATHS`) with N = :data:`WGMMA_N`, tf32
    first (the order of the recorded runs, so that a seeded run draws the same rows)."""
    found = [dataclasses.replace(q, n=WGMMA_N) for q in cuda.WGMMA_PATHS.values()]
    return sorted(found, key=lambda q: q.a_format != "tf32")


def wgmma_paths() -> list[Instr]:
    out = []
    for q in wgmma_shapes():
        models, mixed = models_for(q.a_format, q.b_format, q.d_format, "wgmma")
        out.append(Instr(q.name, "wgmma", q.m, q.n, q.k, q.a_format, q.b_format, q.c_format, q.d_format, models,
                         mixed))
    return out


def dmma_new_paths() -> list[Instr]:
    out = []
    for k in (16, 8, 4):
        models, _ = models_for("fp64", "fp64", "fp64", "mma")
        out.append(Instr(f"mma.m16n8k{k}.f64.f64.f64.f64", "mmasim", 16, 8, k, "fp64", "fp64", "fp64", "fp64",
                        models))
    return out


# --- input families (bit patterns) -------------------------------------------------------------------------
# Not blockfma.inputs: these draw bit patterns (NaN payloads of every kind, tf32 inside binary32
# registers, the fp32-raw family) tile by tile, and the committed records' rows are these draws from seed
# 20261122 (scripts/recover_nan_inputs.py replays them); the package draws float64 values row by row.
def codes_in(fmt: str, rng: np.random.Generator, shape: tuple, e_lo: int, e_hi: int,
             zeros: float = 0.0) -> np.ndarray:
    """Random finite codes of ``fmt`` whose unbiased exponent lies in [e_lo, e_hi] (clipped to the format;
    exponents below emin give subnormals), random signs and fractions, a share ``zeros`` of signed zeros."""
    f = F.get(fmt)
    st = F.storage(fmt)
    t = f.fraction_bits
    top = (1 << st.exponent_bits) - (2 if st.nan == "ieee" else 1)
    e = rng.integers(e_lo, e_hi + 1, size=shape)
    field_ = np.clip(e + st.bias, 0, top).astype(np.uint64)
    frac = rng.integers(0, 1 << t, size=shape, dtype=np.uint64) if t else np.zeros(shape, np.uint64)
    frac = frac << np.uint64(st.fraction_bits - t)  # tf32 values: the low 13 bits of binary32 stay zero
    sign = rng.integers(0, 2, size=shape, dtype=np.uint64) << np.uint64(st.bits - 1)
    code = sign | (field_ << np.uint64(st.fraction_bits)) | frac
    if st.nan == "fn":  # the all-ones code is NaN in e4m3fn: step one down
        nan = np.uint64(((1 << (st.bits - 1)) - 1))
        code = np.where((code & nan) == nan, code - np.uint64(1), code)
    if zeros:
        z = rng.random(shape) < zeros
        code = np.where(z, sign, code)
    return code.astype(F.uint_dtype(st.bits))


def random_bits(fmt: str, rng: np.random.Generator, shape: tuple) -> np.ndarray:
    st = F.storage(fmt)
    code = rng.integers(0, 1 << st.bits, size=shape, dtype=np.uint64)
    code &= np.uint64(F.storage_mask(fmt))  # tf32: the low 13 bits of binary32 stay zero
    return code.astype(F.uint_dtype(st.bits))


def specials(fmt: str, rng: np.random.Generator, shape: tuple) -> np.ndarray:
    """NaN (assorted payloads and signs), infinities, largest finite values and signed zeros."""
    st = F.storage(fmt)
    w, t = st.exponent_bits, st.fraction_bits
    ones = ((1 << w) - 1) << t
    sign = np.uint64(1) << np.uint64(st.bits - 1)
    pool = []
    if st.nan == "ieee":
        pool += [ones, ones | sign,  # infinities
                 ones | (1 << (t - 1)), ones | (1 << (t - 1)) | int(sign), ones | 1, ones | ((1 << t) - 1),
                 ones | (1 << max(t - 2, 0)) | int(sign)]  # quiet, negative, signalling-looking payloads
        big = ones - (1 << t) | ((1 << t) - 1)
    else:  # fn: one NaN per sign, no infinities
        pool += [ones | ((1 << t) - 1), ones | ((1 << t) - 1) | int(sign)]
        big = ones | ((1 << t) - 2)
    pool += [big, big | int(sign), 0, int(sign)]
    mask = F.storage_mask(fmt)  # tf32: numbers and infinities with the low 13 bits zero, NaNs whole
    pool = [p & mask if (p & ones) != ones or (p & ((1 << t) - 1)) == 0 else p for p in pool]
    return np.array(pool, dtype=np.uint64)[rng.integers(0, len(pool), size=shape)].astype(F.uint_dtype(st.bits))


def _mix(rng: np.random.Generator, base: np.ndarray, other: np.ndarray, share: float) -> np.ndarray:
    return np.where(rng.random(base.shape) < share, other, base)


def family_inputs(fam: str, p: Instr, rng: np.random.Generator, T: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A (T, m, k), B (T, k, n), C (T, m, n) as bit patterns for one input family."""
    sa, sb, sc = (T, p.m, p.k), (T, p.k, p.n), (T, p.m, p.n)
    fa, fb, fc = F.get(p.fa), F.get(p.fb), F.get(p.fc)
    if fam == "normal":
        return (codes_in(p.fa, rng, sa, -3, 3, 0.05), codes_in(p.fb, rng, sb, -3, 3, 0.05),
                codes_in(p.fc, rng, sc, -4, 6, 0.1))
    if fam == "wide":
        lo = lambda f: f.emin - f.fraction_bits  # noqa: E731 - the subnormal range too
        pa = (lo(fa) + fa.emax) // 2
        A = codes_in(p.fa, rng, sa, lo(fa), fa.emax)
        B = codes_in(p.fb, rng, sb, lo(fb), fb.emax)
        C = codes_in(p.fc, rng, sc, max(lo(fc), lo(fa) + lo(fb)), min(fc.emax, 2 * pa + 8), 0.1)
        return A, B, C
    if fam == "cancel":  # the second half of each row mirrors the first with B negated; one term nudged
        A = codes_in(p.fa, rng, sa, -3, 3)
        B = codes_in(p.fb, rng, sb, -3, 3)
        h = p.k // 2
        A[:, :, h:2 * h] = A[:, :, :h]
        sign_b = F.uint_dtype(F.storage(p.fb).bits)(1 << (F.storage(p.fb).bits - 1))
        B[:, h:2 * h, :] = B[:, :h, :] ^ sign_b
        if p.fa != p.fb:  # mixed formats: mirror values, not codes
            A[:, :, h:2 * h] = A[:, :, :h]
        nudge = rng.random((T, p.m)) < 0.7
        col = rng.integers(0, p.k, size=(T, p.m))
        tiny = codes_in(p.fa, rng, (T, p.m), -14, -4)
        ti, mi = np.nonzero(nudge)
        A[ti, mi, col[ti, mi]] = tiny[ti, mi]
        S = np.einsum("tmk,tkn->tmn", decode(p.fa, A), decode(p.fb, B))
        Cv = -F.round(fc, S)
        zero = rng.random(sc) < 0.4
        Cv = np.where(zero, np.where(rng.random(sc) < 0.5, 0.0, -0.0), Cv)
        return A, B, F.encode(F.storage(p.fc), Cv).astype(F.uint_dtype(F.storage(p.fc).bits))
    if fam == "underflow":
        A = codes_in(p.fa, rng, sa, fa.emin - fa.fraction_bits, fa.emin + 2, 0.1)
        B = codes_in(p.fb, rng, sb, fb.emin - fb.fraction_bits, fb.emin + 2, 0.1)
        C = codes_in(p.fc, rng, sc, fc.emin - fc.fraction_bits, fc.emin + 1, 0.5)
        return A, B, C
    if fam == "zeros":
        return (codes_in(p.fa, rng, sa, -3, 3, 0.6), codes_in(p.fb, rng, sb, -3, 3, 0.6),
                codes_in(p.fc, rng, sc, -3, 3, 0.6))
    if fam == "specials":
        A = _mix(rng, codes_in(p.fa, rng, sa, -3, 3, 0.05), specials(p.fa, rng, sa), 0.03)
        B = _mix(rng, codes_in(p.fb, rng, sb, -3, 3, 0.05), specials(p.fb, rng, sb), 0.03)
        C = _mix(rng, codes_in(p.fc, rng, sc, -3, 3, 0.05), specials(p.fc, rng, sc), 0.05)
        return A, B, C
    if fam == "extremes":
        A = codes_in(p.fa, rng, sa, fa.emax - 3, fa.emax)
        B = codes_in(p.fb, rng, sb, fb.emax - 3, fb.emax)
        C = codes_in(p.fc, rng, sc, fc.emax - 4, fc.emax, 0.2)
        return A, B, C
    if fam == "random-bits":
        C = random_bits(p.fc, rng, sc)
        if p.fc in ("fp32", "fp64"):  # half the time keep C's exponent near the products' range
            near = codes_in(p.fc, rng, sc, 2 * min(fa.emin, -20), 2 * max(fa.emax, 20))
            C = _mix(rng, C, near, 0.5)
        return random_bits(p.fa, rng, sa), random_bits(p.fb, rng, sb), C
    if fam == "fp32-raw":  # tf32 paths: binary32 operands with all 23 fraction bits; the unit reads them
        st = F.fp32
        def raw(shape: tuple) -> np.ndarray:
            e = rng.integers(-3, 4, size=shape) + st.bias
            frac = rng.integers(0, 1 << 23, size=shape, dtype=np.uint64)
            s = rng.integers(0, 2, size=shape, dtype=np.uint64) << np.uint64(31)
            return (s | (e.astype(np.uint64) << np.uint64(23)) | frac).astype(np.uint32)
        return raw(sa), raw(sb), codes_in(p.fc, rng, sc, -4, 6, 0.1)
    raise ValueError(fam)


def families(p: Instr) -> list[str]:
    fams = ["normal", "wide", "cancel", "underflow", "zeros", "specials", "extremes", "random-bits"]
    if p.fa == "tf32":
        fams.append("fp32-raw")
    return fams


# --- targeted rows for the open questions -----------------------------------------------------------------
def targeted_rows(p: Instr) -> list[tuple[str, list[float], list[float], float]]:
    """(label, a, b, c) rows, each to run as the only nonzero row of a tile."""
    fa, fo = F.get(p.fa), F.get(p.fd)
    k = p.k
    z = [0.0] * k
    rows: list[tuple[str, list[float], list[float], float]] = []

    def put(label: str, a: dict, b: dict, c: float) -> None:
        aa, bb = list(z), list(z)
        for i, v in a.items():
            aa[i] = v
        for i, v in b.items():
            bb[i] = v
        rows.append((label, aa, bb, c))

    for sa in (1.0, -1.0):
        for sb in (1.0, -1.0):
            for sc in (0.0, -0.0):
                put(f"zeros: a0={sa * 0.0}, b0={sb * 0.0}, c={sc}", {0: sa * 0.0}, {0: sb * 0.0}, sc)
    for sc in (0.0, -0.0):
        put(f"exact cancellation 1-1, c={sc}", {0: 1.0, 1: 1.0}, {0: 1.0, 1: -1.0}, sc)
        put(f"exact cancellation, c={sc}, -1+1", {0: -1.0, 1: 1.0}, {0: 1.0, 1: 1.0}, sc)
    # a nonzero exact sum that rounds to zero in the output format
    fb = F.get(p.fb)
    e = (fo.emin - fo.fraction_bits - 2) // 2  # t*t at most a quarter of the smallest subnormal
    t = 2.0 ** e
    if e >= max(fa.emin - fa.fraction_bits, fb.emin - fb.fraction_bits) and p.fd != "fp64":
        for sgn in (1.0, -1.0):
            for sc in (0.0, -0.0):
                put(f"nonzero sum {sgn * t * t:.3g} rounds to zero, c={sc}", {0: t}, {0: sgn * t}, sc)
    # cut to zero by the alignment: 1 - 1 + tiny, the tiny term below 2^(e_max - F)
    u = 2.0 ** max(fa.emin - fa.fraction_bits, fb.emin - fb.fraction_bits, -30)
    if k >= 3 and u * u > 0:
        for sgn in (1.0, -1.0):
            for sc in (0.0, -0.0):
                put(f"1 - 1 {'+' if sgn > 0 else '-'} {u * u:.3g} (cut by alignment), c={sc}",
                    {0: 1.0, 1: 1.0, 2: u}, {0: 1.0, 1: -1.0, 2: sgn * u}, sc)
    # e_zero scan: a product P on the output's rounding boundary plus a tiny product 2^-x; whether the tiny
    # one survives the alignment cut at 2^(e_max - F) (e_max = max(exponent of P, e_zero)) decides the result
    first = p.models[0][1]
    rne = first.output_rounding.name == "TiesToEven"
    pe = fo.emin - fo.fraction_bits - (1 if rne else 0)  # half the smallest subnormal (RNE) or it (RZ)
    lo = max(fa.emin - fa.fraction_bits, fb.emin - fb.fraction_bits)
    if p.fd != "fp64" and pe - pe // 2 >= lo and pe // 2 >= lo and k >= 2:
        for x in range(-pe + 1, -2 * lo + 1):
            xa = -((x + 1) // 2)
            xb = -x - xa
            if xa >= lo and xb >= lo:
                sg = 1.0 if rne else -1.0
                put(f"e_zero scan: 2^{pe} {'+' if rne else '-'} 2^-{x}, c=0",
                    {0: 2.0 ** (pe // 2), 1: 2.0 ** xa}, {0: 2.0 ** (pe - pe // 2), 1: sg * 2.0 ** xb}, 0.0)
    # specials
    big = fa.max
    inf_ok = fa.has_infinities and fb.has_infinities
    put("NaN in a", {0: float("nan"), 1: 1.0}, {0: 1.0, 1: 1.0}, 1.0)
    put("NaN in b", {0: 1.0}, {0: float("nan")}, 1.0)
    put("NaN in c", {0: 1.0}, {0: 1.0}, float("nan"))
    if inf_ok:
        put("inf * 0", {0: float("inf")}, {0: 0.0}, 1.0)
        put("inf - inf (products)", {0: float("inf"), 1: float("inf")}, {0: 1.0, 1: -1.0}, 1.0)
        put("inf product + (-inf) c", {0: float("inf")}, {0: 1.0}, float("-inf"))
        put("-inf product", {0: float("inf")}, {0: -1.0}, 1.0)
    bigb = fb.max
    put("largest * largest (overflow)", {0: big, 1: big}, {0: bigb, 1: bigb}, 0.0)
    put("-largest * largest (overflow)", {0: -big, 1: big}, {0: bigb, 1: bigb}, 0.0)
    return rows


# --- runners ---------------------------------------------------------------------------------------------------
class Simulated:
    """The engine in place of a GPU: D from each path's first model (the pipeline's self-test)."""

    name = "simulated"

    def run(self, p: Instr, A: np.ndarray, B: np.ndarray, C: np.ndarray) -> np.ndarray:
        a, b, c, _, _ = rows_of(p, A, B, C, np.zeros(C.shape, C.dtype))
        return model_bits(p, p.models[0][1], a, b, c, codes_of(p, A, B)).reshape(C.shape[0], p.m, p.n)


class Peer:
    """mmasim-kernels' kernels, compiled with nvcc into shared libraries (a test harness, not a dependency)."""

    def __init__(self, src: Instr | str, build: str):
        self.src = str(src)
        self.build = build
        self.mma: Any = None
        self.wgmma: Any = None
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self) -> None:
        os.makedirs(self.build, exist_ok=True)
        common = ["nvcc", "-O2", "-shared", "-Xcompiler", "-fPIC", "-gencode=arch=compute_90a,code=sm_90a",
                  f"-I{self.src}"]
        mma = [os.path.join(self.src, f) for f in ("mma_sm75.cu", "mma_sm80.cu", "mma_sm89.cu", "mma_sm90.cu")]
        driver = os.path.join(self.build, "bf_wgmma.cu")
        with open(driver, "w") as fh:
            fh.write(WGMMA_DRIVER.replace("@N@", str(WGMMA_N)))
            for q in wgmma_shapes():  # one launcher per path: BF_WGMMA(k, d, a, b)
                fh.write(f"BF_WGMMA({q.k}, {', '.join(q.ptx_types)})\n")
        self.procs["mma"] = subprocess.Popen(common + ["-o", os.path.join(self.build, "libpeer_mma.so")] + mma,
                                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.procs["wgmma"] = subprocess.Popen(common + ["-o", os.path.join(self.build, "libbf_wgmma.so"), driver],
                                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def lib(self, which: str) -> Any:
        if getattr(self, which) is None:
            proc = self.procs[which]
            out = proc.communicate()[0].decode(errors="replace")
            if proc.returncode:
                raise RuntimeError(f"nvcc failed for {which}:\n{out[-3000:]}")
            name = "libpeer_mma.so" if which == "mma" else "libbf_wgmma.so"
            setattr(self, which, ctypes.CDLL(os.path.join(self.build, name)))
        return getattr(self, which)

    def sass_ops(self, which: str) -> list[str]:
        name = "libpeer_mma.so" if which == "mma" else "libbf_wgmma.so"
        return sass_ops(subprocess.run(["cuobjdump", "-sass", os.path.join(self.build, name)],
                                       capture_output=True, text=True).stdout)

    def run_mma(self, name: str, A: np.ndarray, B: np.ndarray, C: np.ndarray) -> np.ndarray:
        """One launch a tile (the harness runs one tile per call)."""
        import cupy as cp

        fn = getattr(self.lib("mma"), "mma_" + name.removeprefix("mma.").replace(".", "_"))
        fn.argtypes = [ctypes.c_void_p] * 4
        dA = cp.asarray(np.ascontiguousarray(A))
        dB = cp.asarray(np.ascontiguousarray(np.swapaxes(B, 1, 2)))  # column-major B
        dC = cp.asarray(np.ascontiguousarray(C))
        dD = cp.zeros_like(dC)
        for t in range(A.shape[0]):
            fn(dD[t].data.ptr, dA[t].data.ptr, dB[t].data.ptr, dC[t].data.ptr)
        cp.cuda.Device().synchronize()
        return cp.asnumpy(dD)

    def run_wgmma(self, p: Instr, A: np.ndarray, B: np.ndarray, C: np.ndarray) -> np.ndarray:
        import cupy as cp

        fn = getattr(self.lib("wgmma"), "bf_" + p.name.replace(".", "_"))
        fn.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_longlong]
        dA = cp.asarray(np.ascontiguousarray(A))
        dB = cp.asarray(np.ascontiguousarray(np.swapaxes(B, 1, 2)))
        dD = cp.asarray(np.ascontiguousarray(C))  # D starts as C: the instruction accumulates into it
        fn(dD.data.ptr, dA.data.ptr, dB.data.ptr, A.shape[0])
        cp.cuda.Device().synchronize()
        return cp.asnumpy(dD)


# Our own tiling driver around the peer's wgmma helpers: one warpgroup a tile, T tiles a launch.
WGMMA_DRIVER = r"""
#include "wgmma.h"
template <int N, WGMMAType DT, WGMMAType AT, WGMMAType BT>
__global__ void __launch_bounds__(128) tiles(typename WGMMAAccumulator<DT>::Element *d, const uint8_t *a,
                                             const uint8_t *b)
{
    using Acc = WGMMAAccumulator<DT>;
    typename Acc::Register acc[N / 8 * Acc::registers_per_8_columns];
    __shared__ __align__(128) uint8_t sa[64 * 32], sb[N * 32];
    const size_t tile = blockIdx.x;
    const uint32_t tid = threadIdx.x;
    typename Acc::Element *dt = d + tile * 64 * N;
    uint64_t desc_a = wgmma_pack_operand(sa, a + tile * 64 * 32, 64, tid);
    uint64_t desc_b = wgmma_pack_operand(sb, b + tile * N * 32, N, tid);
    wgmma_transfer_d<N, false>(dt, acc, tid);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    WGMMAInstruction<N, DT, AT, BT>::run(acc, desc_a, desc_b);
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    wgmma_transfer_d<N, true>(dt, acc, tid);
}
#define BF_WGMMA(k, dt, at, bt) \
extern "C" void bf_wgmma_m64n@N@k##k##_##dt##_##at##_##bt(void *d, const void *a, const void *b, long long n) \
{ tiles<@N@, WGMMAType::dt, WGMMAType::at, WGMMAType::bt><<<(unsigned)n, 128>>>( \
      (WGMMAAccumulator<WGMMAType::dt>::Element *)d, (const uint8_t *)a, (const uint8_t *)b); }
"""


def sass_ops(text: str) -> list[str]:
    """The matrix and FMA opcodes in a SASS listing, with counts."""
    ops: dict[str, int] = {}
    for op in re.findall(r"\b((?:[HDQIB]MMA|HGMMA|QGMMA|IGMMA|FFMA|DFMA|HFMA2)[.A-Z0-9_]*)", text):
        ops[op] = ops.get(op, 0) + 1
    return [f"{k} x{v}" for k, v in sorted(ops.items())]


class Gpu:
    """Real instructions: own mma.sync kernels; wgmma and new DMMA shapes through the peer harness."""

    name = "cuda"

    def __init__(self, peer: Peer | None):
        self.cuda = cuda
        self.peer = peer

    def run(self, p: Instr, A: np.ndarray, B: np.ndarray, C: np.ndarray) -> np.ndarray:
        if p.kind == "own":
            d = self.cuda.run(p.name, A, B, C, raw=True)
            return F.bits(d)
        if p.kind == "wgmma":
            return self.peer.run_wgmma(p, A, B, C)
        return self.peer.run_mma(p.name, A, B, C)


# --- comparing ---------------------------------------------------------------------------------------------
def rows_of(p: Instr, A: np.ndarray, B: np.ndarray, C: np.ndarray, D: np.ndarray):
    """(a, b, c values; c, d codes) per dot product, in tile order (t, i, j)."""
    a, b = codes_of(p, decode(p.fa, A), decode(p.fb, B))
    return a, b, decode(p.fc, C).reshape(-1), C.reshape(-1), D.reshape(-1)


def codes_of(p: Instr, A: np.ndarray, B: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A's and B's entries per dot product, in tile order (t, i, j) as :func:`rows_of` gives them: the
    codes, kept for rows with NaN inputs, whose payloads decide a DMMA's NaN and a tf32 read (a record
    keeps them, so no replay is needed); rows_of passes the decoded values."""
    T = A.shape[0]
    a = np.broadcast_to(A[:, :, None, :], (T, p.m, p.n, p.k)).reshape(-1, p.k)
    b = np.broadcast_to(np.swapaxes(B, 1, 2)[:, None, :, :], (T, p.m, p.n, p.k)).reshape(-1, p.k)
    return a, b


def model_bits(p: Instr, model: Model, a: np.ndarray, b: np.ndarray, c: np.ndarray,
               codes: tuple | None = None) -> np.ndarray:
    """The model's results as bit patterns; finite rows through the compiled kernels, the rest apart.
    tf32 operands go in as the binary32 registers held them (their codes, where given), so that NaN
    payloads reach the unit's read as they did on the GPU."""
    kw = {"round_inputs": "device"} if p.fa == "tf32" else {}
    if p.fa == "tf32" and codes is not None:
        a, b = codes[0].astype(np.uint32).view(np.float32), codes[1].astype(np.uint32).view(np.float32)
    out_bits = F.get(p.fd).bits
    res = np.zeros(len(c), F.uint_dtype(out_bits))
    finite = np.isfinite(a).all(1) & np.isfinite(b).all(1) & np.isfinite(c)
    for sel in (finite, ~finite):
        if sel.any():
            d = bf.dot(a[sel], b[sel], c[sel], model=model, **kw)
            res[sel] = d.view(F.uint_dtype(out_bits))
    return res


def classify(p: Instr, hw: np.ndarray, sim: np.ndarray) -> dict[str, np.ndarray]:
    f = F.get(p.fd)
    hv, sv = F.decode(f, hw.astype(np.uint64)), F.decode(f, sim.astype(np.uint64))
    diff = hw != sim
    nan = diff & np.isnan(hv) & np.isnan(sv)
    zero = diff & (hv == 0) & (sv == 0)
    return {"nan_bits": nan, "zero_sign": zero, "other": diff & ~nan & ~zero}


def example(p: Instr, a, b, c, ccode, hw, sim, codes: tuple | None = None) -> dict:
    f = F.get(p.fd)
    w = f.bits // 4
    out = {"a": [hexval(x) for x in a], "b": [hexval(x) for x in b], "c": hexval(c),
           "c_bits": f"0x{int(ccode):0{F.storage(p.fc).bits // 4}x}",
           "hardware": f"0x{int(hw):0{w}x}", "hardware_value": hexval(F.decode(f, np.uint64(hw))),
           "model": f"0x{int(sim):0{w}x}", "model_value": hexval(F.decode(f, np.uint64(sim)))}
    if codes is not None and (np.isnan(a).any() or np.isnan(b).any()):
        wa, wb = F.storage(p.fa).bits // 4, F.storage(p.fb).bits // 4
        out["a_codes"] = [f"0x{int(x):0{wa}x}" for x in codes[0]]
        out["b_codes"] = [f"0x{int(x):0{wb}x}" for x in codes[1]]
    return out


def compare(p: Instr, model: Model, a, b, c, ccode, hw, fam_of_row: np.ndarray, keep: int = 8,
            codes: tuple | None = None) -> dict:
    sim = model_bits(p, model, a, b, c, codes)
    kinds = classify(p, hw, sim)
    out = {"rows": int(len(hw)), "match": int((hw == sim).sum()),
           "mismatch": {k: int(v.sum()) for k, v in kinds.items()}}
    by_fam: dict[str, dict[str, int]] = {}
    for kname, mask in kinds.items():
        if mask.any():
            for fam, cnt in zip(*np.unique(fam_of_row[mask], return_counts=True)):
                by_fam.setdefault(str(fam), {})[kname] = int(cnt)
    if by_fam:
        out["mismatch_by_family"] = by_fam
    ex = []
    for kname in ("other", "zero_sign", "nan_bits"):
        for i in np.flatnonzero(kinds[kname])[:keep]:
            e = example(p, a[i], b[i], c[i], ccode[i], hw[i], sim[i],
                        None if codes is None else (codes[0][i], codes[1][i]))
            e["kind"], e["family"] = kname, str(fam_of_row[i])
            ex.append(e)
    if ex:
        out["examples"] = ex
    return out


def run_path(p: Instr, runner: Any, per_path: int, rng: np.random.Generator, log: Callable) -> dict:
    rec: dict[str, Any] = {"kind": p.kind, "shape": [p.m, p.n, p.k],
                           "formats": {"a": p.fa, "b": p.fb, "c": p.fc, "d": p.fd}}
    if p.stand_in:
        rec["note"] = ("mixed fp8 operands: models run with fp16 inputs (which hold every e4m3fn and e5m2 value "
                       "exactly); rows with subnormal fp8 inputs may differ for that reason alone")
    fams = families(p)
    tiles = max(1, per_path // (p.per_tile * len(fams)))
    parts, fam_rows = [], []
    t0 = time.monotonic()
    for fam in fams:
        A, B, C = family_inputs(fam, p, rng, tiles)
        D = runner.run(p, A, B, C)
        parts.append((A, B, C, D))
        fam_rows.append(np.full(tiles * p.per_tile, fam, dtype=object))
    rec["gpu_seconds"] = round(time.monotonic() - t0, 3)
    a_parts = [rows_of(p, *q) for q in parts]
    a = np.concatenate([x[0] for x in a_parts])
    b = np.concatenate([x[1] for x in a_parts])
    c = np.concatenate([x[2] for x in a_parts])
    ccode = np.concatenate([x[3] for x in a_parts])
    hw = np.concatenate([x[4] for x in a_parts])
    fam_of_row = np.concatenate(fam_rows)
    c_parts = [codes_of(p, q[0], q[1]) for q in parts]
    codes = (np.concatenate([x[0] for x in c_parts]), np.concatenate([x[1] for x in c_parts]))
    rec["dot_products"] = int(len(hw))
    rec["families"] = {f: tiles * p.per_tile for f in fams}
    res = []
    label, model = p.models[0]
    t1 = time.monotonic()
    first = compare(p, model, a, b, c, ccode, hw, fam_of_row, codes=codes)
    first.update({"label": label, "model": model.to_dict(), "summary": model.summary()})
    res.append(first)
    log(f"  {label}: {first['match']}/{first['rows']} bit-identical {first['mismatch']} "
        f"({time.monotonic() - t1:.1f} s)")
    # variants: on every row the preset missed and on a random sample of the rest
    bad = (hw != model_bits(p, model, a, b, c, codes)) if first["match"] != first["rows"] else \
        np.zeros(len(hw), bool)
    sample = rng.random(len(hw)) < min(1.0, 60000 / len(hw))
    sel = bad | sample
    for label, model in p.models[1:]:
        r = compare(p, model, a[sel], b[sel], c[sel], ccode[sel], hw[sel], fam_of_row[sel], keep=3,
                    codes=(codes[0][sel], codes[1][sel]))
        r.update({"label": label, "model": model.to_dict(), "summary": model.summary(),
                  "on": "rows the preset missed plus a random sample"})
        res.append(r)
        log(f"  {label}: {r['match']}/{r['rows']} {r['mismatch']}")
    rec["models"] = res
    rec["targeted"] = run_targeted(p, runner)
    return rec


def run_targeted(p: Instr, runner: Any) -> list[dict]:
    rows = targeted_rows(p)
    T = len(rows)
    sa, sb, sc = F.storage(p.fa), F.storage(p.fb), F.storage(p.fc)
    A = np.zeros((T, p.m, p.k), F.uint_dtype(sa.bits))
    B = np.zeros((T, p.k, p.n), F.uint_dtype(sb.bits))
    C = np.zeros((T, p.m, p.n), F.uint_dtype(sc.bits))
    for t, (_, av, bv, cv) in enumerate(rows):
        A[t, 0, :] = F.encode(sa, np.array(av))
        B[t, :, 0] = F.encode(sb, np.array(bv))
        C[t, 0, 0] = F.encode(sc, np.array(cv))
    D = runner.run(p, A, B, C)
    a, b, c = decode(p.fa, A[:, 0, :]), np.swapaxes(decode(p.fb, B), 1, 2)[:, 0, :], decode(p.fc, C[:, 0, 0])
    hw = D[:, 0, 0]
    sims = {label: model_bits(p, m, a, b, c) for label, m in p.models}
    out = []
    fo = F.get(p.fd)
    for t, (label, *_rest) in enumerate(rows):
        row = {"case": label, "hardware": f"0x{int(hw[t]):0{fo.bits // 4}x}",
               "hardware_value": hexval(F.decode(fo, np.uint64(hw[t])))}
        row["agree"] = [lab for lab, s in sims.items() if s[t] == hw[t]]
        first = p.models[0][0]
        if first not in row["agree"]:
            row[first] = f"0x{int(sims[first][t]):0{fo.bits // 4}x}"
        out.append(row)
    return out


# --- layout and cross checks -------------------------------------------------------------------------------
def layout_check(p: Instr, runner: Any, rng: np.random.Generator) -> dict:
    """Small integers (exact in every format and in every sum): D must equal A @ B + C exactly."""
    T = 8
    lim = 2 if F.get(p.fa).precision <= 4 else 3
    av = rng.integers(-lim, lim + 1, size=(T, p.m, p.k)).astype(np.float64)
    bv = rng.integers(-lim, lim + 1, size=(T, p.k, p.n)).astype(np.float64)
    cv = rng.integers(-8, 9, size=(T, p.m, p.n)).astype(np.float64)
    A = F.encode(F.storage(p.fa), av).astype(F.uint_dtype(F.storage(p.fa).bits))
    B = F.encode(F.storage(p.fb), bv).astype(F.uint_dtype(F.storage(p.fb).bits))
    C = F.encode(F.storage(p.fc), cv).astype(F.uint_dtype(F.storage(p.fc).bits))
    D = runner.run(p, A, B, C)
    want = np.einsum("tmk,tkn->tmn", av, bv) + cv
    got = F.decode(F.get(p.fd), D.astype(np.uint64))
    bad = int((got != want).sum())
    return {"tiles": T, "elements": int(want.size), "wrong": bad, "ok": bad == 0}


def cross_check(p: Instr, gpu: Gpu, rng: np.random.Generator) -> dict:
    """Our kernel and the peer's on the same random-bit tiles."""
    T = 48
    A = random_bits(p.fa, rng, (T, p.m, p.k))
    B = random_bits(p.fb, rng, (T, p.k, p.n))
    C = random_bits(p.fc, rng, (T, p.m, p.n))
    ours = gpu.run(p, A, B, C)
    theirs = gpu.peer.run_mma(p.name, A, B, C)
    return {"tiles": T, "elements": int(ours.size), "different_bits": int((ours != theirs).sum())}


# --- torch.matmul (cuBLAS) over long K ----------------------------------------------------------------------
def torch_study(log: Callable, deadline: float) -> list[dict]:
    import torch

    out = []
    dev = torch.device("cuda")
    rng = np.random.default_rng(11)
    H = bf.device("H100")
    cases = [("fp16", 64, 4096, 64), ("fp16", 512, 1024, 512), ("fp16", 16, 16384, 16), ("bf16", 64, 4096, 64),
             ("bf16", 512, 1024, 512), ("fp32", 64, 4096, 64), ("fp32", 512, 1024, 512)]
    for fin, m, k, n in cases:
        if time.monotonic() > deadline:
            out.append({"skipped": f"{fin} {m}x{k}x{n}: out of time"})
            continue
        A = F.round(fin, rng.standard_normal((m, k)))
        B = F.round(fin, rng.standard_normal((k, n)))
        tdt = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[fin]
        tA = torch.from_numpy(A).to(dev, tdt)
        tB = torch.from_numpy(B).to(dev, tdt)
        cands: dict[str, np.ndarray] = {}
        t0 = time.monotonic()
        if fin in ("fp16", "bf16"):
            d32 = bf.gemm(A, B, None, model=H.model(fin, "fp32"))
            cands["fp32 chain of 16-blocks (H100 mma), then RNE to the output"] = F.round(fin, d32.astype(np.float64))
            if fin == "fp16":
                fp16_chain = bf.gemm(A, B, None, model=H.model("fp16", "fp16"))
                cands["fp16 chain of 16-blocks (fp16 accumulation)"] = fp16_chain.astype(np.float64)
            cands["exact, rounded once"] = F.round(fin, bf.gemm(A, B, None, device="exact", input_format=fin,
                                                                 output_format="fp64").astype(np.float64))
            flags = [("allow_fp16_reduced_precision_reduction" if fin == "fp16" else
                      "allow_bf16_reduced_precision_reduction", v) for v in (False, True)]
        else:
            ta = H.model("tf32", "fp32")
            cands["tf32 chain of 8-blocks, operands truncated (RZ) to tf32"] = bf.gemm(
                A, B, None, model=ta, round_inputs="device").astype(np.float64)
            cands["tf32 chain of 8-blocks, operands rounded (RNE) to tf32"] = bf.gemm(
                A, B, None, model=ta, round_inputs="rne").astype(np.float64)
            cands["fp32 FMA chain (sequential)"] = bf.gemm(A, B, None, device="ieee-sequential", input_format="fp32",
                                                           output_format="fp32").astype(np.float64)
            cands["exact, rounded once"] = F.round("fp32", bf.gemm(A, B, None, device="exact", input_format="fp32",
                                                                   output_format="fp64").astype(np.float64))
            flags = [("allow_tf32", v) for v in (False, True)]
        for flag, val in flags:
            old = getattr(torch.backends.cuda.matmul, flag)
            setattr(torch.backends.cuda.matmul, flag, val)
            try:
                D = (tA @ tB).float().cpu().numpy().astype(np.float64)
            finally:
                setattr(torch.backends.cuda.matmul, flag, old)
            row = {"input": fin, "shape": [m, k, n], "flag": f"{flag}={val}", "output_dtype": str(tdt),
                   "candidates": {}, "simulation_seconds": round(time.monotonic() - t0, 1)}
            for name, want in cands.items():
                same = (D == want) | (np.isnan(D) & np.isnan(want))
                rel = np.abs(D - want) / np.maximum(np.abs(want), 1e-30)
                row["candidates"][name] = {"equal": int(same.sum()), "of": int(same.size),
                                           "max_rel_diff": float(rel.max())}
            out.append(row)
            log(f"  torch {fin} {m}x{k}x{n} {flag}={val}: " + "; ".join(
                f"{nm[:28]} {v['equal']}/{v['of']}" for nm, v in row["candidates"].items()))
    return out


# --- metadata and the record -------------------------------------------------------------------------------
def metadata(sim: bool) -> dict:
    meta: dict[str, Any] = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                            "blockfma": bf.__version__, "numpy": np.__version__, "python": platform.python_version(),
                            "host": platform.node(), "cpus": os.cpu_count()}
    try:
        import ml_dtypes
        meta["ml_dtypes"] = ml_dtypes.__version__
    except ImportError:
        pass
    try:
        meta["git_commit"] = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                            cwd=pathlib.Path(__file__).parent).stdout.strip() or None
    except OSError:
        pass
    if sim:
        meta["gpu"] = "none (--simulate: the engine stands in for the GPU)"
        return meta
    q = subprocess.run(["nvidia-smi", "-q"], capture_output=True, text=True).stdout
    for key, label in (("Product Name", "gpu"), ("Driver Version", "driver"), ("CUDA Version", "cuda_driver_api"),
                       ("VBIOS Version", "vbios")):
        mm = re.search(rf"^\s*{key}\s*:\s*(.+)$", q, re.M)
        if mm:
            meta[label] = mm.group(1).strip()
    import cupy as cp
    meta["compute_capability"] = cp.cuda.Device().compute_capability
    meta["cupy"] = cp.__version__
    meta["cuda_runtime"] = cp.cuda.runtime.runtimeGetVersion()
    try:
        import torch
        meta["torch"] = torch.__version__
        meta["torch_cuda"] = torch.version.cuda
    except ImportError:
        pass
    nv = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    meta["nvcc"] = nv[-1] if nv else None
    return meta


def write(path: str, rec: dict, *, final: bool = True) -> None:
    """Write the record atomically; for ``-`` (standard output) only the final one, printed once."""
    if path == STDOUT and not final:
        return
    write_text(path, json.dumps(rec, indent=1, default=str) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="JSON record to write (atomically, after every path; checked "
                    "before the run; its folder must exist), or - to print it at the end (the log then goes to "
                    "stderr)")
    ap.add_argument("--per-path", type=int, default=1_000_000, help="dot products per instruction path")
    ap.add_argument("--budget", type=float, default=480.0, help="seconds for the whole run (paths get less "
                    "data when time runs short; the torch study runs if time is left)")
    ap.add_argument("--simulate", action="store_true", help="the engine in place of the GPU (pipeline test)")
    ap.add_argument("--peer", help="folder of mmasim-kernels' nv_ptx/kernels sources (for wgmma, the new DMMA "
                    "shapes and the cross-check)")
    ap.add_argument("--only", help="regular expression: run only the paths whose names match")
    ap.add_argument("--no-torch", action="store_true", help="skip the torch.matmul study")
    args = ap.parse_args(argv)
    try:
        destination(args.out, name="out")
    except ArgumentError as exc:
        ap.error(exc.message({"out": "--out"}))
    start = time.monotonic()
    deadline = start + args.budget
    stream = sys.stderr if args.out == STDOUT else sys.stdout

    def log(msg: str) -> None:
        print(f"[{time.monotonic() - start:6.1f}s] {msg}", file=stream, flush=True)

    rec: dict[str, Any] = {"what": "real tensor-core instructions against blockfma.dot, bit for bit",
                           "script": "scripts/record_hardware.py", "metadata": metadata(args.simulate),
                           "paths": {}}
    log(json.dumps(rec["metadata"]))
    peer = None
    if args.simulate:
        runner: Any = Simulated()
        paths = own_paths() + wgmma_paths() + dmma_new_paths()
    else:
        if args.peer:
            peer = Peer(args.peer, os.path.join(os.environ.get("TMPDIR", "/tmp"), "bf_peer_build"))
            peer.start()
        runner = Gpu(peer)
        paths = own_paths() + (wgmma_paths() + dmma_new_paths() if peer else [])
        cc = int(rec["metadata"]["compute_capability"])
        paths = [p for p in paths if p.kind != "own" or runner.cuda.PATHS[p.name].sm <= cc]
    if args.only:
        paths = [p for p in paths if re.search(args.only, p.name)]
    rng = np.random.default_rng(20261122)
    for i, p in enumerate(paths):
        left = deadline - time.monotonic() - (60 if not args.no_torch else 0)
        share = left / (len(paths) - i)
        per_path = args.per_path if share > 25 else max(20000, int(args.per_path * max(share, 1) / 25))
        log(f"{p.name} ({p.kind}), {per_path} dot products")
        entry: dict[str, Any] = {}
        try:
            if p.kind == "own" and not args.simulate:
                entry["sass"] = sass_ops(runner.cuda.sass(p.name))
            if p.kind != "own" and not args.simulate:
                entry["sass_library"] = peer.sass_ops("wgmma" if p.kind == "wgmma" else "mma")
            entry["layout_check"] = layout_check(p, runner, rng)
            log(f"  layout check {entry['layout_check']}")
            if p.kind == "own" and peer is not None:
                try:
                    entry["cross_check_mmasim_kernels"] = cross_check(p, runner, rng)
                    log(f"  cross-check {entry['cross_check_mmasim_kernels']}")
                except Exception as exc:  # noqa: BLE001 - the peer may lack a path; recorded, the run goes on
                    entry["cross_check_mmasim_kernels"] = {"error": repr(exc)[:300]}
            entry.update(run_path(p, runner, per_path, rng, log))
        except Exception:  # noqa: BLE001 - one path's failure is recorded; the others still run
            entry["error"] = traceback.format_exc()[-3000:]
            log(f"  ERROR\n{entry['error']}")
        rec["paths"][p.name] = entry
        write(args.out, rec, final=False)
    if not args.simulate and not args.no_torch:
        try:
            rec["torch_matmul"] = torch_study(log, deadline)
        except Exception:  # noqa: BLE001 - recorded in the file; the paths' records are kept
            rec["torch_matmul"] = {"error": traceback.format_exc()[-3000:]}
            log(rec["torch_matmul"]["error"])
    rec["seconds"] = round(time.monotonic() - start, 1)
    write(args.out, rec)
    log(f"done: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
