"""Speed of the GPU engine (``backend="cuda"``), checked bit for bit against the CPU engine, as a record.

For each size n the script times torch's float32 matmul of n x n matrices on the same device (the
baseline, measured in this same run) and ``blockfma.gemm(..., backend=...)`` for each truncated-fused and
late-c preset case, and prints GMAC/s (10^9 simulated multiply-adds per second) and the ratio of times.
Before timing, each case's result at the smallest size is compared bit for bit with the CPU engine.
Compilation (torch.compile) happens in a warm-up call and is not timed.  ``--record`` writes the rows with
the device's metadata as JSON (atomically), for ``data/hardware/``.

On a CUDA GPU with Triton installed, each case our own Triton kernel runs (``backend="triton"``,
:mod:`blockfma.engine.triton`) adds rows: ``triton`` (the whole ``bf.gemm`` call: input checks on the
host, transfers), ``triton-tensors`` (the whole call on device tensors, with its time over the kernel's,
``whole_over_kernel``) and ``triton-kernel`` (the kernel alone on device tensors, :func:`gemm_tensors`), checked
bit for bit against the CPU engine first as well, and so do ``TRITON_CASES``, presets of the families only
that kernel runs on a GPU (exact-fused, pairwise, the FMA chain), and ``SCALED_CASES``, block-scaled presets
(the B200's NVFP4 ``tcgen05.mxf4nvf4.block16.ue4m3``: ``triton-scaled`` the whole call, ``triton-scaled-kernel``
the kernel alone, :func:`scaled_gemm_tensors`, on its fast path, and ``triton-scaled-kernel-general`` its general
path, ``--no-general`` leaves it out; and the B200's ``tcgen05.mxf8f6f4.block32`` e4m3; K must be a multiple of
the scale block); ``--no-triton`` leaves them out.  The first call of a kernel at a new shape is timed apart
(``first_seconds``: it must not compile per shape).

A tile sweep then times the kernel alone at ``--sweep-size`` (n x n x n) for a few cases over the launch
parameters ``--tiles`` (BLOCK_M x BLOCK_N x num_warps), each tile checked bit for bit against the CPU engine
at ``--check-size`` first, and the general path (``fast=False``) once at its default tile as the
reference (``--no-general`` leaves it out): rows ``triton-tile`` with ``tile`` and ``path``, and the best tile
per case printed, so one GPU session can pick the defaults of :func:`blockfma.engine.triton.gemm_tensors`.
``--tiles ''`` skips it.

``--mmaemu`` puts a peer side by side, before the other rows: mmaemu (PyPI, 0.1.0), which simulates the
same H100 fp8 chain (blocks of 32 products, 13 fraction bits) on the CPU or with CUDA kernels of its own.
For each size, the same e4m3fn operands go through its ``accumulate`` (preset 'hopper') and through our
kernel for H100 e4m3fn->fp32, both timed on the device, and their fp32 bits are compared: rows ``mmaemu``
and ``triton-kernel`` with ``peer``, and a check (:func:`mmaemu_rows` says on which inputs both claim the
same arithmetic).  Without mmaemu installed it says so in one line and goes on.

    python benchmarks/bench_gpu.py                                   # on a CUDA GPU
    python benchmarks/bench_gpu.py --record data/hardware/h100-gemm-speed.json
    python benchmarks/bench_gpu.py --backend torch --sizes 128       # the same code on the CPU (smoke test)
    python benchmarks/bench_gpu.py --sizes 256 --sweep-size 8192     # issue 20's target size, tiles only
    python benchmarks/bench_gpu.py --sizes 4096 --check-size 256 --cases 'H100 (fp16|e4m3fn)->fp32' \
        --tiles 64x64x8,128x128x8 --sweep-size 8192 --no-general      # a short GPU session's rows
    python benchmarks/bench_gpu.py --ptxas --tiles 64x64x8,64x64x4   # no GPU: registers, spills and SASS
                                                                      # instructions per simulated MAC per tile
    python benchmarks/bench_gpu.py --ptxas --all-paths               # no GPU: does every preset's kernel compile?
    python benchmarks/bench_gpu.py --sizes 4096 --cases 'e2m1fn' --tiles ''   # NVFP4 against fp32 matmul
    python benchmarks/bench_gpu.py --sizes 1024,4096 --cases 'H100 e4m3fn' --tiles '' --mmaemu  # and mmaemu
    TRITON_INTERPRET=1 python benchmarks/bench_gpu.py --backend torch --sizes 32 --cases e2m1fn --tiles '' \
        --repeat 1                                                    # the CPU smoke test of the NVFP4 rows
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import sys
import time
from collections import Counter

import numpy as np

import blockfma as bf
from blockfma import optional
from blockfma.engine import gpu
from blockfma.files import results_option, write_text
from blockfma.provenance import provenance
from blockfma.timing import best_time, synchronizer

CASES = [  # (device, input format, output format)
    ("H100", "fp16", "fp32"),
    ("H100", "bf16", "fp32"),
    ("H100", "tf32", "fp32"),
    ("H100", "e4m3fn", "fp32"),
    ("H100", "fp16", "fp16"),
    ("V100", "fp16", "fp32"),
    ("A100", "bf16", "fp32"),
    ("MI300X", "fp16", "fp32"),
    ("MI300X", "e4m3fnuz", "fp32"),
]
# the families only backend='triton' runs on the GPU (the FMA chain, pairwise, exact-fused): triton rows only
TRITON_CASES = [
    ("MI100", "fp16", "fp32"),  # exact-fused, blocks of 4
    ("MI250X", "fp16", "fp32"),  # pairwise, blocks of 4
    ("MI300X", "fp32", "fp32"),  # FMA chain
]


def _operands(rng, model, fin: str, n: int):
    """A, B (n x n, in the input format, saturating) and C (in the C format) of standard normal values."""
    A = bf.formats.round(fin, rng.standard_normal((n, n)), saturate=True)
    B = bf.formats.round(fin, rng.standard_normal((n, n)), saturate=True)
    return A, B, bf.formats.round(model.c_format, rng.standard_normal((n, n)))


# block-scaled presets (backend='triton' by name; C over a wide range, scales of the format near 1): triton rows only
SCALED_CASES = [("B200", "e2m1fn", "fp32"), ("B200", "e4m3fn", "fp32")]
SCALED_INSTRUCTION = {("B200", "e2m1fn", "fp32"): "tcgen05.mxf4nvf4.block16.ue4m3",
                      ("B200", "e4m3fn", "fp32"): "tcgen05.mxf8f6f4.block32"}


def _scaled_operands(rng, model, n: int):
    """A, B (n x n, e2m1 of standard normal values, saturating), C (n x n), and their scales (n x n / block
    and n / block x n) of the scale format between 1/2 and 2."""
    A, B, C = _operands(rng, model, model.input_format.name, n)
    block = model.option("scale_block")
    SA = bf.formats.round(model.scale_format, 2.0 ** rng.uniform(-1, 1, (n, n // block)))
    SB = bf.formats.round(model.scale_format, 2.0 ** rng.uniform(-1, 1, (n // block, n)))
    return A, B, C, SA, SB


def _scaled_rows(triton, torch, dev, case, n, t_mm, repeat, sync, show, rng, general: bool = True) -> list[dict]:
    """Rows of a block-scaled case: the whole bf.gemm call and the kernel alone on device tensors (its fast
    path where it holds: every preset), and the kernel's general path alone (``fast=False``; ``general``)."""
    device, fin, fout = case
    model = bf.device(device).model(fin, fout, SCALED_INSTRUCTION[case])
    if n % model.option("scale_block"):
        show(f"{n:>5}  {device:8} {fin + '->' + fout:14} skipped: n is not a multiple of the scale block")
        return []
    A, B, C, SA, SB = _scaled_operands(rng, model, n)

    def call():
        return bf.gemm(A, B, C, model=model, scale_a=SA, scale_b=SB, scale_layout="kn", backend="triton")

    call()
    t = best_time(call, repeat, sync)
    a, b, c, sa, sb = (torch.from_numpy(np.asarray(x, dtype=np.float32)).to(dev) for x in (A, B, C, SA, SB))
    triton.scaled_gemm_tensors(model, a, b, c, sa, sb, specials=False)
    tk = best_time(lambda: triton.scaled_gemm_tensors(model, a, b, c, sa, sb, specials=False), repeat, sync)
    fast = bool(triton.scaled_fast_constants(model)["FAST"])
    timed = [("triton-scaled", t, fast), ("triton-scaled-kernel", tk, fast)]
    if general and fast:
        triton.scaled_gemm_tensors(model, a, b, c, sa, sb, specials=False, fast=False)
        tg = best_time(lambda: triton.scaled_gemm_tensors(model, a, b, c, sa, sb, specials=False, fast=False),
                       repeat, sync)
        timed.append(("triton-scaled-kernel-general", tg, False))
    rows = []
    for label, secs, on_fast in timed:
        rows.append({"n": n, "device": device, "input": fin, "output": fout, "instruction": SCALED_INSTRUCTION[case],
                     "backend": label, "path": "fast" if on_fast else "general", "seconds": secs,
                     "gmacs": n**3 / secs / 1e9, "baseline_seconds": t_mm, "ratio": secs / t_mm})
        show(f"{n:>5}  {device:8} {fin + '->' + fout:14} {secs:9.4f} {n**3 / secs / 1e9:9.2f} {secs / t_mm:14.1f}"
             f"  {label} {SCALED_INSTRUCTION[case]}")
    return rows


def _scaled_check(triton, case, n0: int, rng) -> dict:
    """The block-scaled kernel against the numpy engine at n0 (rounded up to whole scale blocks)."""
    device, fin, fout = case
    model = bf.device(device).model(fin, fout, SCALED_INSTRUCTION[case])
    block = model.option("scale_block")
    n = -(-n0 // block) * block
    A, B, C, SA, SB = _scaled_operands(rng, model, n)
    got = bf.gemm(A, B, C, model=model, scale_a=SA, scale_b=SB, scale_layout="kn", backend="triton")
    want = bf.gemm(A, B, C, model=model, scale_a=SA, scale_b=SB, scale_layout="kn", backend="numpy")
    # and the general path's raw bits against the fast path's (NaN patterns as the kernel writes them)
    fast = triton.gemm(model, A, B, C, SA, SB, fast=None).astype(np.float32).view(np.uint32)
    general = triton.gemm(model, A, B, C, SA, SB, fast=False).astype(np.float32).view(np.uint32)
    return {"device": device, "input": fin, "output": fout, "n": n, "backend": "triton",
            "instruction": SCALED_INSTRUCTION[case],
            "bit_exact": bool(np.array_equal(bf.formats.bits(got), bf.formats.bits(want))
                              and np.array_equal(fast, general))}


SWEEP_CASES = [("H100", "fp16", "fp32"), ("H100", "bf16", "fp32"), ("H100", "e4m3fn", "fp32"),
               ("MI300X", "fp16", "fp32")]
TILES = "64x64x8,64x64x4,32x32x4,32x64x4,64x32x4,128x64x8,64x128x8,128x128x8"


def cpu_engine(A, B, C, model):
    """The check's reference: the numpy engine (no compile time; --check-size keeps it short).  Never
    ``backend="auto"``, which on a GPU machine sends large calls to the very kernels under test."""
    return bf.gemm(A, B, C, model=model, backend="numpy")


def select(cases, pattern: str | None):
    """The cases whose 'device input->output' label matches the regular expression ``pattern`` (all if None)."""
    if not pattern:
        return list(cases)
    rx = re.compile(pattern)
    return [c for c in cases if rx.search(f"{c[0]} {c[1]}->{c[2]}")]


def parse_sizes(text: str, option: str, error) -> list[int]:
    """Comma-separated positive n of ``option``; ``error`` (argparse's) names the option and the bad entry."""
    try:
        sizes = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1 or max(sizes) > 2**17:  # n x n float32 operands beyond 2**17 pass 64 GiB
        error(f"{option} {text!r}: give integers from 1 to 131072 separated by commas, e.g. 4096,8192")
    return sizes


def parse_tiles(text: str) -> list[tuple[int, int, int]]:
    """``"64x64x4,128x64x8"`` -> [(64, 64, 4), (128, 64, 8)] (BLOCK_M x BLOCK_N x num_warps, powers of two);
    ValueError naming the bad entry."""
    tiles = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        parts = item.split("x")
        if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 and int(p) & (int(p) - 1) == 0 for p in parts):
            raise ValueError(f"--tiles: {item!r} is not BLOCK_MxBLOCK_NxWARPS in powers of two (e.g. 64x64x4)")
        tiles.append((int(parts[0]), int(parts[1]), int(parts[2])))
    return tiles


def tile_sweep(triton, torch, dev, n: int, n0: int, tiles, repeat: int, sync, show, rng,
               cases=SWEEP_CASES, general: bool = True) -> tuple[list, list]:
    """Rows and checks of the tile sweep: per case, the kernel alone at n x n x n for each tile (checked at
    n0 first) on A and B of the input format's storage dtype (what bf.gemm hands over with triton.STORAGE_LOADS),
    at the first tile also on float32 A and B (operands 'fp32': bf.gemm's default), and the general path once;
    the best tile printed."""
    rows, checks = [], []
    for device, fin, fout in cases:
        model = bf.device(device).model(fin, fout)
        small = [bf.formats.round(fin, rng.standard_normal((n0, n0)), saturate=True) for _ in range(2)]
        c0 = bf.formats.round(model.c_format, rng.standard_normal((n0, n0)))
        want = bf.formats.bits(cpu_engine(*small, c0, model))
        a0, b0, cc0 = (torch.from_numpy(np.asarray(x, dtype=np.float32)).to(dev) for x in (*small, c0))
        A, B = (torch.from_numpy(bf.formats.round(fin, rng.standard_normal((n, n)), saturate=True)
                                 .astype(np.float32)).to(dev) for _ in range(2))
        C = torch.from_numpy(bf.formats.round(model.c_format, rng.standard_normal((n, n))).astype(np.float32)).to(dev)
        fast_path = triton.fast_constants(model, A, B)["FAST"]
        lanes = 32 if fast_path and triton.grid_path(model, model.block_width or 1) else 0
        name = bf.engine.tensors.DTYPES.get(fin, "float32")  # the dtype A and B come in (tf32: float32)
        store = getattr(torch, name if name in triton.OPERAND_DTYPES else "float32")
        best = None
        # each tile on the path the kernel takes (the grid sum where it holds), then at the first tile the fast
        # path with int32 terms (the kernel before the grid sum) and float32 operands, and the general path at
        # its default tile
        runs = [(*t, None, store) for t in tiles] + ([(*tiles[0], False, store)] if lanes else []) + \
            ([(*tiles[0], None, torch.float32)] if store != torch.float32 else [])
        for bm, bn, warps, grid, dt in [*runs, *([(None, None, None, None, store)] if general else [])]:
            fast = None if bm is not None else False  # the last row: the general path, its default tile
            label = f"{bm}x{bn}x{warps}" if bm is not None else "default"
            path = ("general" if not fast_path else f"grid{lanes}" if lanes and grid is None else "fast-int32")
            run = functools.partial(triton.gemm_tensors, model, specials=False, block_m=bm, block_n=bn,
                                    num_warps=warps, fast=fast, grid=grid)
            got = bf.engine.api.finish(model.arithmetic_model(), run(a0.to(dt), b0.to(dt), cc0).cpu().numpy()
                                       .astype(np.float64))
            same = bool(np.array_equal(bf.formats.bits(got), want))
            operands = str(dt).removeprefix("torch.")
            checks.append({"device": device, "input": fin, "output": fout, "n": n0, "bit_exact": same,
                           "backend": "triton", "tile": label, "path": path if fast is None else "general",
                           "operands": operands})
            Ad, Bd = A.to(dt), B.to(dt)  # exact: values of the input format
            secs = best_time(lambda: run(Ad, Bd, C), repeat, sync)
            row = {"n": n, "device": device, "input": fin, "output": fout, "backend": "triton-tile", "tile": label,
                   "path": path if fast is None else "general", "num_warps": warps, "seconds": secs,
                   "gmacs": n**3 / secs / 1e9, "bit_exact": same, "operands": operands}
            rows.append(row)
            show(f"{n:>5}  {device:8} {fin + '->' + fout:14} {secs:9.4f} {n**3 / secs / 1e9:9.2f}  tile {label:10} "
                 f"{row['path']:8} {operands}{'' if same else '  MISMATCH'}")
            if fast is None and grid is None and dt == store and (best is None or secs < best["seconds"]):
                best = row
        if best is not None:
            show(f"best tile for {device} {fin}->{fout} at n={n}: {best['tile']} ({best['gmacs']:.1f} GMAC/s, "
                 f"{best['path']} path)")
    return rows, checks


def _compile_sm90(S, bm: int, bn: int, warps: int, operands: str = "fp32"):
    """The Triton kernel of structure ``S`` compiled for sm_90 (Triton's own ptxas, no device needed) with a
    BLOCK_M x BLOCK_N tile and ``warps`` warps, row-major operands as bf.gemm passes them (strides of 1
    specialized, the other strides and the pointers divisible by 16), A and B of Triton's type ``operands``."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from blockfma.engine.triton_gemm import gemm_kernel as kernel

    names = list(kernel.arg_names)
    const = {"S": S, "BLOCK_M": bm, "BLOCK_N": bn, "EVEN": True}  # tiles dividing M and N (as in the benchmark)
    st = names.index("strides")  # a, b, c, d, ea, sa, sb: (rows, 1) each
    ints = ("order_ptr", "ea_ptr") + (("sa_ptr", "sb_ptr") if S.BLOCK.GRID else ())  # the count's codes
    sig = {n: "constexpr" if n in const else "*i32" if n in ints else f"*{operands}" if n in ("a_ptr", "b_ptr")
           else "*fp32" if n.endswith("_ptr") else ("i32", "constexpr") * 7 if n == "strides" else "i32" for n in names}
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in names if n.endswith("_ptr")}
    attrs.update({(st, i): [["tt.divisibility", 16]] for i in range(0, 14, 2)})
    constexprs = {(names.index(n),): v for n, v in const.items()}
    constexprs.update({(st, i): 1 for i in range(1, 14, 2)})
    src = ASTSource(fn=kernel, signature=sig, constexprs=constexprs, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})


def _cuobjdump(cubin: bytes, flag: str) -> str:
    """``cuobjdump flag`` (-res-usage, -sass) of a cubin, by the cuobjdump Triton ships."""
    import subprocess
    import tempfile

    import triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run([tool, flag, f.name], capture_output=True, text=True, check=True).stdout


#: Triton's type of the torch dtype that stores a format (bf.gemm hands the kernel such tensors as they are)
STORAGE = {"fp16": "fp16", "bf16": "bf16", "e4m3fn": "fp8e4nv", "e5m2": "fp8e5"}


def _ptxas_models(cases, scaled_cases):
    """(case, instruction, model, the fast path's Kernel fields, lanes per loop iteration the kernel itself
    unrolls, lanes per unit of an outer loop of a pass) of the --ptxas cases."""
    from blockfma.engine import triton as tr

    out = []
    for device, fin, fout in cases:
        model = bf.device(device).model(fin, fout)
        grid = tr.grid_path(model, model.block_width or 1)  # the path the kernel takes without NaN or infinity
        path = dict(tr.fast_constants(model), FAST=True, **(grid or {}))
        late = model.arithmetic_model().family.name == "late-c"  # the first pass: two lanes an iteration
        pair = path["CHUNK"] % 2 == 0 and model.block_width % 2 == 0  # the int32 terms: two lanes an iteration
        lanes = (2, model.arithmetic_model().groups if late else 4 if grid and grid["CBIAS"] else 1 + pair)
        out.append(((device, fin, fout), "", model, path, lanes, model.block_width if grid else path["CHUNK"]))
    for case in scaled_cases:  # the block-scaled fast path
        model = bf.device(case[0]).model(case[1], case[2], SCALED_INSTRUCTION[case])
        fast = tr.scaled_fast_constants(model)
        out.append((case, SCALED_INSTRUCTION[case], model, {"FAST": fast["FAST"], "U": fast["U"]}, 1, fast["U"]))
    return out


def ptxas_report(tiles, show, cases=SWEEP_CASES, scaled_cases=SCALED_CASES, storage: bool = False) -> list[dict]:
    """Without a GPU: compile the Triton kernel's fast path for sm_90 (Triton's own ptxas, no device needed)
    for each sweep case and tile (and the block-scaled kernel's for each block-scaled case), row-major
    operands as bf.gemm passes them (A and B in the input format's storage dtype, ``storage``, else float32;
    block-scaled ones float32), and read from the cubin (cuobjdump) its registers and spill stack (a tile past
    255 registers spills, which no GPU run can hide) and, from its SASS, the instructions and global bytes
    loaded per simulated MAC of its passes over a block's lanes (:func:`mac_cost`)."""
    from blockfma.engine import triton as tr

    if tr.interpreting():
        raise ValueError("--ptxas compiles for the GPU: unset TRITON_INTERPRET")
    rows = []
    for case, instruction, model, path, lanes, unit in _ptxas_models(cases, scaled_cases):
        S = tr._config(model.arithmetic_model(), False).path(**path)
        operands = STORAGE.get(case[1], "fp32") if storage and not instruction else "fp32"
        for bm, bn, warps in tiles:
            compiled = _compile_sm90(S, bm, bn, warps, operands)
            row = _usage_row(_cuobjdump(compiled.asm["cubin"], "-res-usage"), case, bm, bn, warps, show, instruction)
            row["operands"] = operands
            if instruction:
                row["path"] = "fast" if path["FAST"] else "general"
            cost = mac_cost(_cuobjdump(compiled.asm["cubin"], "-sass"), compiled.asm["ptx"],
                            bm * bn // (32 * warps), lanes, unit)
            rows.append(dict(row, **cost))
            _show_cost(cost, row, show)
    return rows


_SASS_INSTRUCTION = re.compile(r"/\*([0-9a-f]+)\*/\s+(?:@!?U?P[T0-9]\s+)?([A-Z][A-Z0-9_]*)([.\w]*)\s*([^;]*);")
_PTX_LABEL = re.compile(r"^\s*(\$?[\w$]+):")
_PTX_BRANCH = re.compile(r"\bbra(?:\.uni)?\s+(\$?[\w$]+)\s*;")


def _loops(code: list[tuple[int, str, int | None]], loads: str) -> list[dict]:
    """The loops of straight-line ``code`` [(position, opcode, target of a branch or None)]: each backward
    branch closes one, from its target to itself (a branch to itself is no loop), in order of position:
    start, end, instructions (count, NOPs left out), opcodes (count per opcode, most first), loads (opcodes
    starting with ``loads``) and innermost (no other loop inside)."""
    spans = sorted({(t, p) for p, _, t, *_ in code if t is not None and t < p})
    loops = []
    for start, end in spans:
        ops = [op for p, op, *_ in code if start <= p <= end and op != "NOP"]
        counts = dict(sorted(Counter(ops).items(), key=lambda kv: (-kv[1], kv[0])))
        loops.append({"start": start, "end": end, "instructions": len(ops), "opcodes": counts,
                      "loads": sum(v for k, v in counts.items() if k.startswith(loads)),
                      "load_bytes": sum(x[3] for x in code if start <= x[0] <= end and len(x) > 3),
                      "innermost": not any(start <= s and e <= end and (s, e) != (start, end) for s, e in spans)})
    return loops


def sass_loops(sass: str) -> list[dict]:
    """The loops (:func:`_loops`) of ``cuobjdump -sass`` text of one kernel: instructions ``/*addr*/ [@P]
    OPCODE.MODIFIERS operands ;``, a backward ``BRA 0xtarget`` closing a loop; opcodes without their
    modifiers (``IMAD.MOV.U32`` counts as IMAD), loads the global ones (LDG), load_bytes their bytes per thread
    (by the width modifier: .U8/.S8 1, .U16/.S16 2, .64 8, .128 16, else 4)."""
    code = []
    for m in _SASS_INSTRUCTION.finditer(sass):
        target = re.match(r"0x([0-9a-f]+)", m.group(4).strip()) if m.group(2) == "BRA" else None
        mods = set(m.group(3).split("."))
        width = 0 if m.group(2) != "LDG" else 1 if mods & {"U8", "S8"} else 2 if mods & {"U16", "S16"} else \
            8 if "64" in mods else 16 if "128" in mods else 4
        code.append((int(m.group(1), 16), m.group(2), int(target.group(1), 16) if target else None, width))
    return _loops(code, "LDG")


def ptx_loops(ptx: str) -> list[dict]:
    """The loops (:func:`_loops`) of LLVM's PTX text: positions count instructions (lines ending in ``;`` that
    are no directive), a ``bra`` back to a label that LLVM's comments mark a loop header (``Loop Header``, on
    the label's line or the comment lines after it) closes a loop (LLVM also places some exits before their
    branch); loads the global ones (``ld.global``)."""
    code, labels, last = [], {}, None
    for line in ptx.splitlines():
        text, _, comment = line.partition("//")
        text = text.strip()
        label = _PTX_LABEL.match(text)
        if label:
            last = label.group(1)
        if last and "Loop Header" in comment:
            labels[last] = len(code)
        if not label and text.endswith(";") and not text.startswith("."):
            last = None
            op = re.sub(r"^@!?%\w+\s+", "", text).split()[0].rstrip(";")
            branch = _PTX_BRANCH.search(text)
            code.append((len(code), "LDG" if op.startswith("ld.global") else op,
                         labels.get(branch.group(1)) if branch else None))
    return _loops(code, "LDG")


def lane_passes(loops: list[dict]) -> list[dict]:
    """The passes over a block's lanes in ``loops`` (of :func:`sass_loops`), in order: per innermost loop
    (``loop``), the outermost loop around it that holds no other innermost loop (``outer``: a loop over
    units of lanes, None where the innermost loop is the pass itself)."""
    inner = [lp for lp in loops if lp["innermost"]]

    def holds(lp, x):
        return lp["start"] <= x["start"] and x["end"] <= lp["end"]

    passes = []
    for lp in inner:
        around = sorted((o for o in loops if o is not lp and holds(o, lp)), key=lambda o: o["end"] - o["start"])
        outer = None
        for o in around:
            if sum(holds(o, x) for x in inner) > 1:
                break
            outer = o
        passes.append({"loop": lp, "outer": outer})
    return passes


def mac_cost(sass: str, ptx: str | None, per_thread: int, lanes: int | tuple = 1, unit_lanes: int = 1) -> dict:
    """Instructions per simulated MAC of a kernel's passes over a block's lanes, from its SASS (and PTX).

    A pass (:func:`lane_passes`) is an innermost loop of the SASS (a backward branch closes it: the loops
    ``for l in range(L)`` of the fast blocks) and the loop over units of lanes around it, if any (the
    block-scaled path's units of U lanes, the truncated-fused path's int32 chunks).  One iteration of the
    innermost loop simulates ``per_thread`` products per lane (BLOCK_M * BLOCK_N / (32 * num_warps)) times the
    lanes it covers: ``lanes`` (the lanes the kernel itself unrolls in its loop body: late-c's groups; a tuple:
    per pass, as the grid path's count, four lanes per iteration of its sum pass) times
    the unroll of ptxas, detected as the ratio of the loop's global loads (LDG) in the SASS to those of the
    same (n-th innermost) loop in the PTX, where LLVM is taken not to have unrolled it (None where the PTX
    has not as many innermost loops, or the ratio is not a whole number: counted as 1).  The instructions of
    the outer loop outside the innermost one count once per ``unit_lanes`` lanes.  Every instruction in a
    loop's address range counts, also those a branch inside skips (an upper bound where there are any).
    Returns instructions_per_mac (the sum over passes) and passes: name, loop_instructions,
    products_per_iteration, unroll, unit_instructions (the outer loop's own), per_mac, opcodes (the loop's)."""
    passes = lane_passes(sass_loops(sass))
    ref = [lp for lp in ptx_loops(ptx) if lp["innermost"]] if ptx else []
    names = ["exponent pass", "sum pass"] if len(passes) == 2 else [f"pass {i + 1}" for i in range(len(passes))]
    out = []
    per_pass = lanes if isinstance(lanes, tuple) else (lanes,) * len(passes)
    for name, p, r, lanes in zip(names, passes, ref if len(ref) == len(passes) else [None] * len(passes), per_pass):
        lp, outer = p["loop"], p["outer"]
        unroll = lp["loads"] // r["loads"] if r and r["loads"] and lp["loads"] % r["loads"] == 0 else None
        products = per_thread * lanes * (unroll or 1)
        unit = outer["instructions"] - lp["instructions"] if outer else 0
        per_mac = lp["instructions"] / products + unit / (per_thread * unit_lanes)
        out.append({"name": name, "loop_instructions": lp["instructions"], "products_per_iteration": products,
                    "unroll": unroll, "unit_instructions": unit, "per_mac": per_mac, "opcodes": lp["opcodes"],
                    "bytes_per_mac": lp.get("load_bytes", 0) / products})
    return {"instructions_per_mac": sum(p["per_mac"] for p in out), "passes": out,
            "bytes_per_mac": sum(p["bytes_per_mac"] for p in out)}


def _show_cost(cost: dict, row: dict, show) -> None:
    """The line of instructions per simulated MAC of a --ptxas row, and a line per pass (top opcodes)."""
    instruction = row.get("instruction", "")
    parts = " + ".join(f"{p['name']} {p['per_mac']:.2f}" for p in cost["passes"]) or "no loop over lanes found"
    show(f"ptxas sm_90 {row['device']} {row['input']}->{row['output']} {instruction + ' ' if instruction else ''}"
         f"tile {row['tile']:10} {parts} = {cost['instructions_per_mac']:.2f} instructions per simulated MAC")
    show(f"    operands {row.get('operands', 'fp32')}: {cost['bytes_per_mac']:.3f} bytes of global loads per "
         "simulated MAC and thread (the lane loops' LDG)")
    for p in cost["passes"]:
        unit = f" + {p['unit_instructions']} per unit of lanes" if p["unit_instructions"] else ""
        top = ", ".join(f"{k} {v}" for k, v in list(p["opcodes"].items())[:8])
        show(f"    {p['name']}: {p['loop_instructions']} instructions per iteration of "
             f"{p['products_per_iteration']} products (unroll {p['unroll'] or '1?'}){unit}: {top}")


def all_path_kernels() -> list[tuple[str, str, object]]:
    """(label 'DEVICE INSTRUCTION IN->OUT', path, Kernel structure) of every preset model the Triton backend
    runs (bf.devices(), blockfma.engine.triton.supports), one per distinct structure, with SPECIALS off and
    on: the general path, and the fast path where it can hold (fast_constants on operands of ones: the
    model's own conditions, not its formats' ranges; scaled_fast_constants for the block-scaled ones)."""
    import torch

    from blockfma.engine import triton as tr

    ones = torch.ones(1, 1)
    seen, out = set(), []
    for dev in bf.devices():
        for ins in dev.instructions:
            for (fin, fout), model in ins.models.items():
                m = model.arithmetic_model()
                if not tr.supports(m):
                    continue
                if m.family in tr.STEP_FAMILIES:  # no fast path
                    fast = {"FAST": False}
                else:
                    fast = tr.scaled_fast_constants(m) if m.block_scaled else tr.fast_constants(m, ones, ones)
                fields = {k: v for k, v in fast.items() if k != "WHY"}
                for specials in (False, True):
                    S = tr._config(m, specials)
                    for path, kernel in (("general", S), ("fast", S.path(**fields) if fast["FAST"] else None)):
                        if kernel is not None and repr(kernel) not in seen:
                            seen.add(repr(kernel))
                            out.append((f"{dev.name} {ins.name} {fin}->{fout}{' specials' if specials else ''}",
                                        path, kernel))
    return out


def all_paths_report(show, pattern: str | None = None) -> list[dict]:
    """Compile (:func:`_compile_sm90`) every kernel of :func:`all_path_kernels` whose label matches the regular
    expression ``pattern``, at the launch's default tile (blockfma.engine.triton._tile on a GPU); a row per
    kernel, ok or the error's first lines, shown."""
    import types

    from blockfma.engine import triton as tr

    if tr.interpreting():
        raise ValueError("--ptxas compiles for the GPU: unset TRITON_INTERPRET")
    rows = []
    for label, path, S in all_path_kernels():
        if pattern and not re.search(pattern, label):
            continue
        tile = tr._tile(S.BLOCK, types.SimpleNamespace(type="cuda"), 1, 1, None, None, None)
        try:
            _compile_sm90(S, *tile)
            error = None
        except Exception as exc:  # noqa: BLE001 (a compiler's error of any kind is the finding)
            lines = [x for x in str(exc).splitlines() if x.strip()] or [type(exc).__name__]
            error = " | ".join(lines[:3] + (lines[-1:] if len(lines) > 3 else []))
        rows.append({"kernel": label, "path": path, "tile": "x".join(map(str, tile)), "compiled": error is None,
                     **({"error": error} if error else {})})
        show(f"compile sm_90 {label:50} {path:8} tile {rows[-1]['tile']:9} {'ok' if error is None else error}")
    failed = [r for r in rows if not r["compiled"]]
    show(f"{len(rows) - len(failed)} of {len(rows)} kernels compiled" + (", failed: " + "; ".join(
        f"{r['kernel']} ({r['path']})" for r in failed) if failed else ""))
    return rows


def _usage_row(usage: str, case, bm: int, bn: int, warps: int, show, instruction: str = "") -> dict:
    """A ptxas row (registers, stack bytes) from cuobjdump's -res-usage text, shown."""
    device, fin, fout = case
    fields = dict(kv.split(":") for line in usage.splitlines() if "REG:" in line for kv in line.split()
                  if ":" in kv and kv.split(":")[1].isdigit())
    row = {"device": device, "input": fin, "output": fout, "tile": f"{bm}x{bn}x{warps}",
           "registers": int(fields["REG"]), "stack_bytes": int(fields["STACK"])}
    if instruction:
        row["instruction"] = instruction
    show(f"ptxas sm_90 {device} {fin}->{fout} {instruction + ' ' if instruction else ''}tile {row['tile']:10} "
         f"{row['registers']:4} registers, {row['stack_bytes']:6} bytes of stack (spills)")
    return row


# --- the peer: mmaemu (PyPI, 0.1.0), which simulates the H100's fp8 chain on GPUs too ---------------------------
MMAEMU_CASE = ("H100", "e4m3fn", "fp32")  # our model of the chain mmaemu's preset 'hopper' simulates
MMAEMU_SLOW_S = 10.0  # an mmaemu call slower than this (its float64 reference, no kernel): no repeats, no larger n


def mmaemu_operands(rng, m: int, k: int, n: int):
    """A (m x k) and B (k x n), as bf.gemm takes them: e4m3fn values of standard normal draws (rounded,
    saturating, so finite: e4m3fn has no infinity and no draw becomes NaN), float64 arrays."""
    return tuple(bf.formats.round("e4m3fn", rng.standard_normal(shape), saturate=True) for shape in ((m, k), (k, n)))


def compare_bits(ours, theirs) -> dict:
    """How two float32 torch tensors of one shape differ bit for bit (compared as ``.view(torch.int32)``, so
    -0 differs from +0 and NaN payloads count): ``differing`` (count), ``compared`` (elements) and, where
    some differ, ``first`` (row-major first: ``row``, ``col``, each side's value and bits as 0x%08x)."""
    import torch

    if tuple(ours.shape) != tuple(theirs.shape) or ours.dtype != torch.float32 or theirs.dtype != torch.float32:
        raise ValueError(f"compare_bits: ours is {tuple(ours.shape)} {ours.dtype}, theirs {tuple(theirs.shape)} "
                         f"{theirs.dtype}: pass two float32 tensors of one shape")
    a, b = ours.reshape(-1).view(torch.int32), theirs.reshape(-1).to(ours.device).view(torch.int32)
    diff = a != b
    out = {"differing": int(diff.sum()), "compared": int(a.numel())}
    if out["differing"]:
        i = int(diff.nonzero()[0, 0])
        cols = ours.shape[-1] if ours.dim() > 1 else ours.numel()
        first = {"row": i // cols, "col": i % cols}
        for side, x in (("ours", a), ("mmaemu", b)):
            first[side] = float(x[i:i + 1].view(torch.float32)[0])
            first[f"{side}_bits"] = f"0x{int(x[i]) & 0xFFFFFFFF:08x}"
        out["first"] = first
    return out


def bits_report(cmp: dict) -> str:
    """One line of :func:`compare_bits`' result."""
    text = f"{cmp['differing']} of {cmp['compared']} fp32 bit patterns differ"
    if cmp["differing"]:
        f = cmp["first"]
        text += (f"; first at ({f['row']}, {f['col']}): ours {f['ours']!r} ({f['ours_bits']}), "
                 f"mmaemu {f['mmaemu']!r} ({f['mmaemu_bits']})")
    return text


def _mmaemu_calls(mmaemu, triton, torch, dev, model, A, B):
    """(ours, theirs): calls on device tensors of A, B (C = +0) of our Triton kernel, with its zero results
    made +0 as bf.gemm does for this model, and of ``mmaemu.accumulate`` (b as [n, k]), each giving float32."""
    a, b = (torch.from_numpy(x.astype(np.float32)).to(dev) for x in (A, B))
    c = torch.zeros(A.shape[0], B.shape[1], device=dev)
    a8, b8 = a.to(torch.float8_e4m3fn), b.t().contiguous().to(torch.float8_e4m3fn)
    positive = model.rounded_zero == "positive"

    b8r = b.to(torch.float8_e4m3fn)  # B row-major, read in fp8 as bf.gemm hands fp8 tensors over

    def ours():
        d = triton.gemm_tensors(model, a8, b8r, c, specials=False)
        return torch.where(d == 0, torch.zeros_like(d), d) if positive else d

    def theirs():
        return mmaemu.accumulate(a8, b8, use_fast_accum=True, profile="hopper", splitk=1)

    return ours, theirs, (a8, b8)


def _mmaemu_backend(mmaemu, torch, a8, b8) -> str:
    """The backend mmaemu picks for this call (its explain: 'cuda:h4', 'reference', ...), or why it cannot say."""
    one = torch.ones((), device=a8.device)
    plan = mmaemu.explain(a8, b8.t(), one, one, out_dtype=torch.float32, use_fast_accum=True, profile="hopper",
                          splitk=1)
    return plan.backend if plan.validation == "ok" else f"unknown ({plan.validation[0]}: {plan.validation[1]})"


def mmaemu_rows(triton, torch, dev, sizes, repeat: int, sync, show, rng) -> tuple[list, list]:
    """Rows and checks of mmaemu side by side with our Triton kernel, per n in ``sizes``: the same A, B
    (:func:`mmaemu_operands`, n x n) through ``mmaemu.accumulate`` (preset 'hopper') and through our kernel
    for bf.device("H100").model("e4m3fn", "fp32") with C = +0, both on ``dev``, each warmed up and then
    timed (best of ``repeat``, synchronised), shown as GMAC/s with the ratio of speeds ours/mmaemu, and
    their fp32 results compared bit for bit (:func:`compare_bits`).

    The inputs are those on which both claim the same arithmetic (mmaemu's docs/semantics and model.plan):
    ``use_fast_accum=True`` (one chain over all of K; False restarts it every 128 products and adds the
    chains in fp32, cuBLAS's slow accumulation, which our model is not); ``splitk=1`` (no split-K, whose
    partial sums cuBLAS adds in fp32); ``accumulate``, the fp32 accumulator, not ``scaled_mm``, whose
    epilogue (alpha as an fma, output rounding) ours does not model; C = +0, since mmaemu takes no C (every
    chain starts from +0; scaled_mm's bias raises) where ours adds C in the first block; finite operands
    (mmaemu writes NaN canonical, ours by the model's NaN style).  Then mmaemu's chain is ours: blocks of
    32 products aligned to the block's largest exponent (with the accumulator), 13 fraction bits kept,
    each block result truncated to 13, a zero result +0; K is padded with zeros in both.  mmaemu absent
    (or our kernel unable to run here): one line, no rows."""
    try:
        import mmaemu
    except ImportError as exc:
        show(f"mmaemu: not installed ({exc}); pip install mmaemu==0.1.0 for its rows")
        return [], []
    if triton is None:
        show("mmaemu: our Triton kernel cannot run here (a CUDA GPU with Triton, or TRITON_INTERPRET=1 on the "
             "CPU, without --no-triton), so no rows side by side")
        return [], []
    import warnings

    device, fin, fout = MMAEMU_CASE
    model = bf.device(device).model(fin, fout)
    rows, checks = [], []
    for n in sizes:
        A, B = mmaemu_operands(rng, n, n, n)
        ours, theirs, (a8, b8) = _mmaemu_calls(mmaemu, triton, torch, dev, model, A, B)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            backend = _mmaemu_backend(mmaemu, torch, a8, b8)
            got, want = ours(), theirs()  # the warm-up: compiles, loads and self-tests the kernels
            secs = best_time(theirs, 1, sync)
            if secs < MMAEMU_SLOW_S and repeat > 1:
                secs = min(secs, best_time(theirs, repeat - 1, sync))
        t_ours = best_time(ours, repeat, sync)
        cmp = compare_bits(got, want)
        base = {"n": n, "device": device, "input": fin, "output": fout, "peer": "mmaemu"}
        warned = sorted({f"{w.category.__name__}: {w.message}" for w in caught})
        rows.append({**base, "backend": "mmaemu", "mmaemu_version": mmaemu.__version__, "mmaemu_backend": backend,
                     "call": "accumulate(use_fast_accum=True, profile='hopper', splitk=1)", "seconds": secs,
                     "gmacs": n**3 / secs / 1e9, "warnings": warned, **cmp})
        rows.append({**base, "backend": "triton-kernel", "seconds": t_ours, "gmacs": n**3 / t_ours / 1e9,
                     "speed_over_mmaemu": secs / t_ours})
        checks.append({**base, "backend": "mmaemu", "bit_exact": cmp["differing"] == 0})
        show(f"{n:>5}  mmaemu {mmaemu.__version__} hopper ({backend}) {secs:9.4f} s {n**3 / secs / 1e9:9.2f} GMAC/s"
             f"  ours triton-kernel {t_ours:9.4f} s {n**3 / t_ours / 1e9:9.2f} GMAC/s  ours/mmaemu "
             f"{secs / t_ours:.3g}x  bits: {bits_report(cmp)}")
        for w in warned:
            show(f"       mmaemu warned: {w}")
        if secs >= MMAEMU_SLOW_S:
            show(f"mmaemu took {secs:.1f} s at n={n} (backend {backend}): larger sizes left out")
            break
    return rows, checks


def metadata(torch, dev) -> dict:
    """The run's provenance (blockfma.provenance: date, versions, commit, host, the torch device's facts) and
    whether the GPU engine compiles its steps with torch.compile on this device."""
    return {**provenance(dev), "torch_compile": gpu.COMPILE.get(dev.type, False)}


def _triton(args, dev):
    """blockfma.engine.triton where its rows are wanted and can run (a CUDA GPU with Triton installed; on the
    CPU only under TRITON_INTERPRET=1, as a smoke test of this script), else None."""
    if args.no_triton or not optional.available("triton"):
        return None
    from blockfma.engine import triton

    runs = triton.interpreting() if dev.type == "cpu" else not triton.interpreting()
    return triton if runs and triton.available() else None


def _triton_rows(triton, torch, dev, model, A, B, C, n, t_mm, repeat, sync, show, case) -> list[dict]:
    """Rows of backend='triton' for one case: the whole bf.gemm call on host arrays (``triton``) and on device
    tensors of the input dtype (``triton-tensors``: checks, conversions, the finish, all on the device), and
    the kernel alone on the device tensors bf.gemm hands it (``triton-kernel``: A and B of the input dtype where
    it loads them as they are, else float32; its first call at this shape timed apart:
    it compiles once per model, not per shape); ``whole_over_kernel``: the tensor call's time over the
    kernel's (issue 31: at most 1.2 at 4096^3)."""
    from blockfma.engine import tensors

    device, fin, fout = case
    macs = n**3
    rows = []
    bf.gemm(A, B, C, model=model, backend="triton")
    t = best_time(lambda: bf.gemm(A, B, C, model=model, backend="triton"), repeat, sync)
    a, b, c = (torch.from_numpy(np.asarray(x, dtype=np.float32)).to(dev) for x in (A, B, C))
    dtype = getattr(torch, tensors.DTYPES.get(fin, "float32"))  # tf32: float32 tensors
    ta, tb = a.to(dtype), b.to(dtype)  # exact: values of the input format
    keep = triton.OPERAND_DTYPES if triton.STORAGE_LOADS else ("float32",)
    ka, kb = (ta, tb) if str(dtype).removeprefix("torch.") in keep else (a, b)  # as bf.gemm hands them over
    start = time.perf_counter()
    triton.gemm_tensors(model, ka, kb, c, specials=False)
    sync()
    first = time.perf_counter() - start
    tk = best_time(lambda: triton.gemm_tensors(model, ka, kb, c, specials=False), repeat, sync)
    bf.gemm(ta, tb, c, model=model, backend="triton")
    tw = best_time(lambda: bf.gemm(ta, tb, c, model=model, backend="triton"), repeat, sync)
    for label, secs in (("triton", t), ("triton-tensors", tw), ("triton-kernel", tk)):
        extra = {"first_seconds": first} if label == "triton-kernel" else \
            {"whole_over_kernel": tw / tk} if label == "triton-tensors" else {}
        rows.append({"n": n, "device": device, "input": fin, "output": fout, "backend": label, "seconds": secs,
                     "gmacs": macs / secs / 1e9, "baseline_seconds": t_mm, "ratio": secs / t_mm, **extra})
        show(f"{n:>5}  {device:8} {fin + '->' + fout:14} {secs:9.4f} {macs / secs / 1e9:9.2f} {secs / t_mm:14.1f}"
             f"  {label}" + (f" (first call {first:.3f} s)" if label == "triton-kernel" else "")
             + (f" (whole call / kernel {tw / tk:.2f})" if label == "triton-tensors" else ""))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="256,1024,2048,4096", help="comma-separated n (n x n x n GEMMs)")
    ap.add_argument("--backend", default="cuda", help="'cuda' (default), 'cuda:N' or 'torch' (CPU)")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per case (best is kept)")
    ap.add_argument("--no-triton", action="store_true", help="leave out the rows of backend='triton'")
    ap.add_argument("--tiles", default=TILES, help="BLOCK_MxBLOCK_NxWARPS launch parameters of the Triton tile "
                    "sweep, comma-separated ('' skips the sweep)")
    ap.add_argument("--sweep-size", type=int, default=4096, help="n of the tile sweep's n x n x n GEMMs")
    ap.add_argument("--cases", metavar="REGEX", help="only the cases whose 'DEVICE IN->OUT' label matches, "
                    "e.g. 'H100 (fp16|e4m3fn)->fp32' (all rows: checks, timings, tile sweep)")
    ap.add_argument("--check-size", type=int, help="n of the bit-for-bit checks against the CPU engine "
                    "(default: the smallest of --sizes)")
    ap.add_argument("--no-general", action="store_true", help="leave out the tile sweep's row of the general "
                    "path, and the block-scaled cases' (much slower than the fast path at large sizes)")
    ap.add_argument("--ptxas", action="store_true", help="no GPU needed: compile the Triton kernels' fast paths "
                    "for sm_90 for each sweep and block-scaled case and --tiles entry and report registers, spills "
                    "and SASS instructions per simulated MAC (per pass over a block's lanes), then stop")
    ap.add_argument("--ptxas-storage", action="store_true", help="with --ptxas: A and B in their storage dtype (fp8, "
                    "fp16, bf16: the kernel with triton.STORAGE_LOADS), not float32 (bf.gemm's default)")
    ap.add_argument("--all-paths", action="store_true", help="with --ptxas: compile, at its default tile, the "
                    "kernel of every preset model the Triton backend runs (general path, and fast path where it "
                    "can hold; SPECIALS off and on; --cases filters by 'DEVICE INSTRUCTION IN->OUT'), report "
                    "those that fail and exit 1 if any does")
    ap.add_argument("--mmaemu", action="store_true", help="for each of --sizes, mmaemu's H100 fp8 chain (PyPI "
                    "mmaemu, preset 'hopper') side by side with our Triton kernel for H100 e4m3fn->fp32: both "
                    "timed, their bits compared (rows 'mmaemu'; one line and no rows where mmaemu is absent)")
    ap.add_argument("--mmaemu-sizes", metavar="N,N", help="n of the mmaemu side by side (default: --sizes)")
    ap.add_argument("--record", metavar="FILE", help="write rows and device metadata to this JSON file "
                    "(atomically; checked before the run; its folder must exist), or - to print them "
                    "(the table then goes to stderr)")
    args = ap.parse_args(argv)
    # a bad destination fails now, not after the run; with --record - the table goes to stderr
    show = functools.partial(print, file=results_option(args.record, "--record", ap.error), flush=True)
    sizes = parse_sizes(args.sizes, "--sizes", ap.error)
    peer_sizes = parse_sizes(args.mmaemu_sizes, "--mmaemu-sizes", ap.error) if args.mmaemu_sizes else sizes
    try:
        tiles = parse_tiles(args.tiles)
    except ValueError as exc:
        ap.error(str(exc))
    if args.sweep_size < 1:
        ap.error(f"--sweep-size {args.sweep_size}: must be a positive integer")
    if args.check_size is not None and args.check_size < 1:
        ap.error(f"--check-size {args.check_size}: must be a positive integer")
    try:
        cases, triton_cases, sweep_cases, scaled_cases = (select(c, args.cases) for c in (CASES, TRITON_CASES,
                                                                                           SWEEP_CASES, SCALED_CASES))
    except re.error as exc:
        ap.error(f"--cases {args.cases!r}: not a regular expression ({exc})")
    if not (cases or triton_cases or scaled_cases):
        ap.error(f"--cases {args.cases!r} matches none of " + ", ".join(f"'{d} {i}->{o}'" for d, i, o in
                                                                      CASES + TRITON_CASES + SCALED_CASES))
    if args.all_paths and not args.ptxas:
        ap.error("--all-paths goes with --ptxas")
    if args.all_paths:
        try:
            rows = all_paths_report(show, args.cases)
        except (ImportError, ValueError) as exc:
            print(f"bench_gpu: {exc}", file=sys.stderr)
            return 2
        if args.record:
            write_text(args.record, json.dumps({"what": "whether each preset's Triton kernel compiles for sm_90",
                                                "rows": rows}, indent=1) + "\n")
        return 0 if all(r["compiled"] for r in rows) else 1
    if args.ptxas:
        try:
            ptx_rows = ptxas_report(tiles, show, sweep_cases, scaled_cases, storage=args.ptxas_storage)
        except (ImportError, ValueError) as exc:
            print(f"bench_gpu: {exc}", file=sys.stderr)
            return 2
        if args.record:
            write_text(args.record, json.dumps({"what": "registers, spills and instructions per simulated MAC "
                                                "of the Triton kernel's fast path, compiled for sm_90 by Triton's "
                                                "ptxas", "rows": ptx_rows},
                                               indent=1) + "\n")
        return 0
    try:
        import torch
        dev = gpu.torch_device(args.backend)
    except (ImportError, ValueError) as exc:
        print(f"bench_gpu: {exc}", file=sys.stderr)
        return 2
    triton = _triton(args, dev)
    meta = metadata(torch, dev)
    show(", ".join(f"{k} {v}" for k, v in meta.items()))
    rng = np.random.default_rng(2024)
    rows, checks = [], []
    n0 = args.check_size or min(sizes)
    for device, fin, fout in cases:  # bit-for-bit check against the CPU engine first
        model = bf.device(device).model(fin, fout)
        A, B, C = _operands(rng, model, fin, n0)
        got = bf.gemm(A, B, C, model=model, backend=args.backend)
        want = cpu_engine(A, B, C, model)
        same = bool(np.array_equal(bf.formats.bits(got), bf.formats.bits(want)))
        checks.append({"device": device, "input": fin, "output": fout, "n": n0, "bit_exact": same})
        show(f"check {device} {fin}->{fout} n={n0}: {'bit-exact' if same else 'MISMATCH'} against the CPU engine")
        if triton and triton.supports(model):
            same = bool(np.array_equal(bf.formats.bits(bf.gemm(A, B, C, model=model, backend="triton")),
                                       bf.formats.bits(want)))
            checks.append({"device": device, "input": fin, "output": fout, "n": n0, "bit_exact": same,
                           "backend": "triton"})
            show(f"check triton {device} {fin}->{fout} n={n0}: {'bit-exact' if same else 'MISMATCH'}")
    for device, fin, fout in triton_cases if triton else ():
        model = bf.device(device).model(fin, fout)
        A, B, C = _operands(rng, model, fin, n0)
        same = bool(np.array_equal(bf.formats.bits(bf.gemm(A, B, C, model=model, backend="triton")),
                                   bf.formats.bits(cpu_engine(A, B, C, model))))
        checks.append({"device": device, "input": fin, "output": fout, "n": n0, "bit_exact": same,
                       "backend": "triton"})
        show(f"check triton {device} {fin}->{fout} n={n0}: {'bit-exact' if same else 'MISMATCH'}")
    for case in scaled_cases if triton else ():
        checks.append(_scaled_check(triton, case, n0, rng))
        show(f"check triton {' '.join(case[:2])}->{case[2]} {SCALED_INSTRUCTION[case]} n={checks[-1]['n']}: "
             f"{'bit-exact' if checks[-1]['bit_exact'] else 'MISMATCH'}")
    sync = synchronizer(torch, dev)
    if args.mmaemu:  # before the long rows: the log keeps these where a time limit cuts the rest
        peer_rows, peer_checks = mmaemu_rows(triton, torch, dev, peer_sizes, args.repeat, sync, show, rng)
        rows += peer_rows
        checks += peer_checks
    def save() -> None:  # the record so far (after each part: a time limit that cuts the run keeps the rest)
        if args.record:
            write_text(args.record, json.dumps({
                "what": "blockfma.gemm speed on the GPU engine (times include host-device transfers)",
                "backend": args.backend, "metadata": meta, "checks": checks, "rows": rows}, indent=1) + "\n")

    if triton and tiles and sweep_cases:  # the kernels at the sweep's size first, before the slow rows
        sweep_rows, sweep_checks = tile_sweep(triton, torch, dev, args.sweep_size, n0, tiles, args.repeat, sync,
                                              show, rng, sweep_cases, not args.no_general)
        rows += sweep_rows
        checks += sweep_checks
        save()
    header = f"{'n':>5}  {'device':8} {'in->out':14} {'seconds':>9} {'GMAC/s':>9} {'x fp32 matmul':>14}"
    show(header)
    show("-" * len(header))
    for n in sizes:
        macs = n**3
        a32 = torch.randn(n, n, device=dev)
        b32 = torch.randn(n, n, device=dev)
        torch.backends.cuda.matmul.allow_tf32 = False
        a32 @ b32
        t_mm = best_time(lambda: a32 @ b32, max(args.repeat, 5), sync)
        show(f"{n:>5}  {'torch':8} {'fp32 matmul':14} {t_mm:9.5f} {macs / t_mm / 1e9:9.1f} {1.0:14.1f}")
        for device, fin, fout in cases:
            model = bf.device(device).model(fin, fout)
            A, B, C = _operands(rng, model, fin, n)
            bf.gemm(A, B, C, model=model, backend=args.backend)  # warm-up: compiles this shape
            t = best_time(lambda: bf.gemm(A, B, C, model=model, backend=args.backend), args.repeat, sync)
            rows.append({"n": n, "device": device, "input": fin, "output": fout, "seconds": t,
                         "gmacs": macs / t / 1e9, "baseline_seconds": t_mm, "ratio": t / t_mm})
            show(f"{n:>5}  {device:8} {fin + '->' + fout:14} {t:9.4f} {macs / t / 1e9:9.2f} {t / t_mm:14.1f}")
            if triton and triton.supports(model):
                rows += _triton_rows(triton, torch, dev, model, A, B, C, n, t_mm, args.repeat, sync, show,
                                     (device, fin, fout))
        for device, fin, fout in triton_cases if triton else ():
            model = bf.device(device).model(fin, fout)
            A, B, C = _operands(rng, model, fin, n)
            rows += _triton_rows(triton, torch, dev, model, A, B, C, n, t_mm, args.repeat, sync, show,
                                 (device, fin, fout))
        for case in scaled_cases if triton else ():
            rows += _scaled_rows(triton, torch, dev, case, n, t_mm, args.repeat, sync, show, rng, not args.no_general)
    save()
    return 0 if all(c["bit_exact"] for c in checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
