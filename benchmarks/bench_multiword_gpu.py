"""Speed and accuracy of the multiword methods and the Ozaki schemes on real units (torch), against native
SGEMM and DGEMM timed in the same run.

For each n (n x n x n products) and each distribution (entries uniform on (0, 1] or (-0.5, 0.5], drawn by
``blockfma.experiments.multiword.sample``; fp32 matrices for the fp32-level methods as in ``blockfma
multiword``, the same draws unrounded (fp64) for Ozaki and DGEMM), every method is timed two ways:

* **seconds**: ``multiword.matmul(A, B, method=..., backend="hardware")`` end to end.  ``--inputs tensors``
  (the default): from float64 tensors on the device to a float64 tensor there, every step on the device
  (``multiword.tensors``: the split, the additions, Ozaki's slicing, residues and CRT as torch operations).
  ``--inputs numpy``: from float64 numpy arrays to numpy arrays, the split, additions, slicing, residues and
  CRT on the host (numpy), the transfers and unit calls on the device: for most methods the host dominates.
* **device s**: the unit calls alone, operands already on the device in the unit's dtype: the word
  products in the method's order with its accumulation (inside: chained through cuBLAS with beta = 1;
  outside: fp32 additions on the device), replayed on the same words (the result is checked to be the
  end-to-end result's bits); for Ozaki the same number of ``torch._int_mm`` calls on random int8
  matrices (the fused Ozaki I: one per level, its slice pairs side by side along k).  A lower bound for a
  GPU-resident implementation (no splitting, no CRT).

``ozaki1`` and ``ozaki2`` run fused where Triton runs the device (``multiword.ozaki_fused``: one kernel per
operand for the slices, or the scaling and every residue; the int8 products; one kernel for the levels' sums,
or the CRT, and the unscaling; their rows' unit says "fused"), and ``ozaki1-unfused`` and ``ozaki2-unfused`` are
the same schemes with every step a torch operation (``ozaki.ozaki1_steps``, ``ozaki.ozaki2_steps``), timed in
the same run beside DGEMM; their rows say whether their bits are the fused ones (they must be).  With
``--inputs numpy`` all four are the host path.

Each time is the median of ``--repeat`` runs after one warm-up run (synchronised); TFLOP/s counts the
useful 2 n^3 flops, not the word products; ``t/SGEMM`` is the time over native SGEMM's (torch float32
matmul, TF32 off, device-resident, same run).  Errors: componentwise max |C - C_hat| / (|A||B|) (Fasi et
al. eq. 3.1, ``multiword.metrics.componentwise``) and the Frobenius normwise error, against the exact
product (``multiword.reference(exact=True)``) for n <= ``--exact-max``; above it, the float64 product for
the fp32-level methods (its own error, at most n 2^-53 |A||B|, is far below theirs) and the exact product
on ``--sample-rows`` random rows for the fp64-level ones (Ozaki, DGEMM): the max over those rows.

    python benchmarks/bench_multiword_gpu.py                       # on a CUDA GPU: n = 1024 ... 8192
    python benchmarks/bench_multiword_gpu.py --n 8192 --methods 3xtf32,ozaki2 --repeat 3
    python benchmarks/bench_multiword_gpu.py --backend hardware:cpu --n 64 --repeat 1   # smoke test, CPU

Results go to ``--out`` (JSON, written atomically after every size and distribution; default on CUDA
``data/hardware/<gpu>-multiword-speed.json``; on the CPU only with ``--out``).  Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
METHODS = ["fp16", "bf16", "tf32", "double-fp16", "double-bf16", "markidis", "ootomo", "3xtf32", "4xtf32",
           "bf16x9", "ozaki1", "ozaki1-unfused", "ozaki2", "ozaki2-unfused"]
NATIVE = ["fp32", "fp64"]  # torch's SGEMM (TF32 off) and DGEMM: the baselines
FP64_LEVEL = {"ozaki1", "ozaki1-unfused", "ozaki2", "ozaki2-unfused", "fp64"}
FUSED = ("ozaki1", "ozaki2")  # each beside its "-unfused" row, their bits compared
DISTRIBUTIONS = {"uniform01": "uniform(0,1]", "uniform-half": "uniform(-0.5,0.5]"}
TIMING = ("seconds: multiword.matmul(backend='hardware') end to end ({inputs}); device s: the unit calls alone on "
          "device-resident "
          "operands (Ozaki: its number of torch._int_mm calls on random int8); median of --repeat runs after a "
          "warm-up, synchronised; TFLOP/s = 2 n^3 / time; t/SGEMM = time / native SGEMM time (device-resident)")
INPUTS = {"tensors": "float64 tensors on the device in and out, every step there", "numpy": "float64 numpy arrays "
          "in and out: host split, transfers, unit calls, host-side additions; Ozaki: slicing/residues/CRT on the host"}
AIM_3XTF32 = "3xTF32 at least 2x native SGEMM's speed (time <= 0.5 SGEMM) at SGEMM accuracy (error <= 2x SGEMM's)"
AIM_OZAKI2 = ("Ozaki-II at DGEMM accuracy (error <= 2x DGEMM's) at or above native DGEMM speed (time <= DGEMM's) "
              "for n >= 8192")


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# --- metadata ------------------------------------------------------------------------------------------------
def metadata(hw: Any, device: Any) -> dict[str, Any]:
    """The run's provenance (blockfma.provenance: date, versions, commit, host) and the torch device's facts."""
    from blockfma.provenance import provenance

    return provenance(device)


def gpu_slug(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'h100', 'NVIDIA GeForce RTX 4090' -> 'rtx-4090': the model, for file names."""
    words = [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w]
    skip = re.compile(r"^(nvidia|geforce|tesla|amd|radeon|instinct|\d+gb|hbm\w*|pcie|sxm\d*|nvl\d*|gddr\w*)$")
    kept = [w for w in words if not skip.match(w)]
    return "-".join(kept) or "gpu"


# --- timing ---------------------------------------------------------------------------------------------------
def timed(fn: Callable[[], Any], repeat: int, sync: Callable[[], None]) -> tuple[float, list[float], Any]:
    """(median seconds of ``repeat`` synchronised runs after one warm-up run, the times, the warm-up's result);
    ``repeat=0``: the one run, timed."""
    if repeat == 0:
        sync()
        t0 = time.perf_counter()
        result = fn()
        sync()
        dt = time.perf_counter() - t0
        return dt, [dt], result
    result = fn()
    times = []
    for _ in range(repeat):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times, result


def multiword_replay(mw: Any, unit: Any, name: str, A: np.ndarray, B: np.ndarray) -> Callable[[], Any]:
    """The method's word products on device-resident words, in its order and with its accumulation, as
    ``multiword.matmul`` does them (outside additions: fp32 on the device, rounding to nearest)."""
    m = mw.METHODS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mw.RangeWarning)
        Aw = [unit.to_device(w, check=False) for w in mw.split(A, m.low, m.p, scale=m.scale, rounding=m.split_rounding)]
        Bw = [unit.to_device(w, check=False) for w in mw.split(B, m.low, m.p, scale=m.scale, rounding=m.split_rounding)]

    def scaled(i: int, j: int, T: Any) -> Any:
        return T * 2.0 ** (-m.scale * (i + j)) if m.scale else T  # exact: a power of two, no underflow here

    def run() -> Any:
        C = None
        if m.outside_groups:
            for group in sorted(m.outside_groups, key=lambda g: -min(sum(m.products[t]) for t in g)):
                T = None
                for t in group:
                    i, j = m.products[t]
                    T = unit.product(Aw[i], Bw[j], T)
                i, j = m.products[group[0]]
                C = scaled(i, j, T) if C is None else C + scaled(i, j, T)
            return C
        for i, j in m.products:
            if m.accumulate == "inside":
                C = unit.product(Aw[i], Bw[j], C)
            else:
                T = scaled(i, j, unit.product(Aw[i], Bw[j]))
                C = T if C is None else C + T
        return C

    return run


def int8_replay(torch: Any, device: Any, n: int, calls: int, seed: int, levels: int = 0) -> Callable[[], Any]:
    """``calls`` torch._int_mm products of random n x n int8 matrices, padded and laid out as the Ozaki
    units hand them over (:func:`blockfma.multiword.ozaki.int_mm`: B column-major); ``levels`` (the fused
    Ozaki I's slices): one product per level p = 1 ... levels instead, of inner dimension p n (views of the
    first p n columns, as its slices side by side)."""
    from blockfma.multiword.ozaki import int_mm_shape

    g = torch.Generator(device="cpu").manual_seed(seed)
    m, k, q = int_mm_shape(n, n, n)
    a = torch.randint(-128, 128, (m, max(levels, 1) * k), dtype=torch.int8, generator=g).to(device)
    b = torch.randint(-128, 128, (q, max(levels, 1) * k), dtype=torch.int8, generator=g).to(device).t()

    def run() -> Any:
        out = None
        for p in range(1, levels + 1) if levels else [1] * calls:
            out = torch._int_mm(a[:, :p * k], b[:p * k])
        return out

    return run


def unfused_ozaki(torch: Any, name: str, A: Any, B: Any, backend: str, n_moduli: int | None = None,
                  slices: int | None = None) -> tuple[Any, dict]:
    """Ozaki I's or II's unfused device path (``name``; every step a torch operation, as ``multiword.tensors``
    runs it where Triton does not run the device) on device-resident float64 tensors: (C, info) as ``matmul``
    gives them."""
    from blockfma.multiword import bounds, hardware, ozaki

    unit = hardware.Int8Unit(backend)
    if name == "ozaki1":
        slices = bounds.ozaki_slices(53) if slices is None else slices  # matmul's default
        C = ozaki.ozaki1_steps(torch, A, B, slices, ozaki.slice_width(A.shape[1]), unit.product)
        return C, {"calls": unit.calls, "unit": f"{unit.name}, {slices} slices, unfused", "unit_seconds": unit.seconds}
    mods = ozaki.pick_moduli(None, n_moduli)
    C = ozaki.ozaki2_steps(torch, A, B, mods, "fast", unit.product, block=max(1, A.shape[0] // 8))
    return C, {"calls": unit.calls, "unit": f"{unit.name}, {len(mods)} moduli, unfused", "unit_seconds": unit.seconds}


# --- one size and distribution ----------------------------------------------------------------------------------
def data(n: int, dist: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    from blockfma.experiments import multiword as ex

    rng = np.random.default_rng([seed, n, list(DISTRIBUTIONS).index(dist)])
    return ex.sample(DISTRIBUTIONS[dist], (n, n), rng), ex.sample(DISTRIBUTIONS[dist], (n, n), rng)


def block(args: argparse.Namespace, hw: Any, mw: Any, torch: Any, device: Any, n: int, dist: str) -> list[dict]:
    """Rows of every method at one n and distribution (the natives first)."""
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    A64, B64 = data(n, dist, args.seed)
    A32, B32 = (X.astype(np.float32).astype(np.float64) for X in (A64, B64))
    exact = n <= args.exact_max
    rows_idx = None if exact else np.sort(np.random.default_rng([args.seed, n, 7]).choice(
        n, min(args.sample_rows, n), replace=False))
    say(f"n={n} {dist}: references ({'exact' if exact else 'float64 / exact on sampled rows'}) ...")
    ref32 = mw.reference(A32, B32, exact=exact)
    ref64 = mw.reference(A64 if exact else A64[rows_idx], B64, exact=True)
    ref_text32 = "exact" if exact else "float64 product"
    ref_text64 = "exact" if exact else f"exact on {len(rows_idx)} sampled rows"

    def measure(C: np.ndarray, fp64: bool) -> dict[str, Any]:
        A, B = (A64, B64) if fp64 else (A32, B32)
        R = ref64 if fp64 else ref32
        if fp64 and rows_idx is not None:
            C, A = C[rows_idx], A[rows_idx]
        return {"componentwise": mw.metrics.componentwise(C, R, A, B), "normwise_2": mw.metrics.normwise(C, R, 2),
                "reference": ref_text64 if fp64 else ref_text32}

    # the baselines, device-resident
    def native_seconds(name: str, A: np.ndarray, B: np.ndarray) -> float:
        unit = hw.TorchUnit(name, args.backend)
        a, b = unit.to_device(A, check=False), unit.to_device(B, check=False)
        return timed(lambda: unit.product(a, b), max(args.repeat, 3), sync)[0]

    native = {"fp32": native_seconds("fp32", A32, B32), "fp64": native_seconds("fp64", A64, B64)}
    tensors = args.inputs == "tensors"
    if tensors:  # the operands on the device once, outside the timings (float64, as the numpy arrays are)
        T64, U64, T32, U32 = (torch.from_numpy(X).to(device) for X in (A64, B64, A32, B32))
    t_sgemm = native["fp32"]
    flops = 2.0 * n**3
    out = []
    fused_bits: dict[str, np.ndarray] = {}
    for name in args.methods:
        fp64 = name in FP64_LEVEL
        A, B = (A64, B64) if fp64 else (A32, B32)
        kw: dict[str, Any] = {}
        if name.startswith("ozaki1") and args.slices:
            kw["slices"] = args.slices
        if name.startswith("ozaki2") and args.moduli:
            kw["n_moduli"] = args.moduli
        say(f"n={n} {dist}: {name} ...")
        e2e_repeat = args.repeat if n <= args.e2e_max else 0
        X, Y = ((T64, U64) if fp64 else (T32, U32)) if tensors else (A, B)
        base = name.removesuffix("-unfused")
        run = (lambda: unfused_ozaki(torch, base, X, Y, args.backend, **kw)) if name != base and tensors \
            else (lambda: mw.matmul(X, Y, method=base, backend=args.backend,
                                    return_info=True, **kw))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", mw.RangeWarning)
            seconds, times, (C, info) = timed(run, e2e_repeat, sync)
        if tensors:
            C = C.cpu().numpy()  # for the errors, outside the timing
        if base in FUSED:
            fused_bits[name] = C.view(np.uint64)
        underflow = sum(issubclass(w.category, mw.RangeWarning) for w in caught) > 0
        replay_same = None
        if name in NATIVE:
            dev_s = native[name]
        elif name in mw.METHODS:
            unit = hw.TorchUnit(mw.METHODS[name].low, args.backend)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", mw.RangeWarning)
                dev_s, _, D = timed(multiword_replay(mw, unit, name, A, B), args.repeat, sync)
            D = D.cpu().numpy().astype(np.float64)
            replay_same = bool(np.array_equal(D.view(np.uint64), C.view(np.uint64)))
            del D
        else:
            fused1 = base == "ozaki1" and "fused" in str(info.get("unit"))
            levels = (kw.get("slices") or mw.bounds.ozaki_slices(53)) if fused1 else 0  # matmul's default slices
            dev_s = timed(int8_replay(torch, device, n, int(info["calls"]), args.seed, levels), args.repeat, sync)[0]
        row = {"method": name, "distribution": dist, "n": n, "data": "fp64" if fp64 else "fp32",
               "inputs": args.inputs, "e2e_over_device": seconds / dev_s,
               "seconds": seconds, "times": times, "warm_up_timed": e2e_repeat == 0,
               "tflops": flops / seconds / 1e12, "t_sgemm": seconds / t_sgemm,
               "device_seconds": dev_s, "device_tflops": flops / dev_s / 1e12, "device_t_sgemm": dev_s / t_sgemm,
               "unit_seconds": info.get("unit_seconds"), "calls": info.get("calls"), "unit": info.get("unit"),
               "words_underflow": underflow, "replay_equals_result": replay_same,
               **{f"equals_{f}": bool(np.array_equal(C.view(np.uint64), fused_bits[f]))
                  if name == f"{f}-unfused" and f in fused_bits else None for f in FUSED},
               "sgemm_seconds": t_sgemm, "dgemm_seconds": native["fp64"], **measure(C, fp64)}
        out.append(row)
        say(f"  {seconds:.4g} s end to end, {dev_s:.4g} s on the device, componentwise {row['componentwise']:.3e}")
        if row.get(f"equals_{base}") is False:
            say(f"  note: {name} differs from the fused {base}: they must agree bit for bit")
        if replay_same is False:
            say(f"  note: the device replay of {name} differs from the end-to-end result (cuBLAS chose another "
                "kernel?); the timing stands, the error is the end-to-end result's")
    return out


# --- the aims -------------------------------------------------------------------------------------------------
def aims(rows: list[dict]) -> list[dict]:
    """Whether each aim is met, per (n, distribution) measured, on the device part and end to end."""
    out = []
    keys = sorted({(r["n"], r["distribution"]) for r in rows}, key=lambda t: (t[0], list(DISTRIBUTIONS).index(t[1])))
    for n, dist in keys:
        by = {r["method"]: r for r in rows if r["n"] == n and r["distribution"] == dist}
        for aim, name, base, limit in ((AIM_3XTF32, "3xtf32", "fp32", 0.5), (AIM_OZAKI2, "ozaki2", "fp64", 1.0)):
            if name not in by or base not in by or (name == "ozaki2" and n < 8192):
                continue
            r, b = by[name], by[base]
            t_base = r["sgemm_seconds"] if base == "fp32" else r["dgemm_seconds"]  # timed in the same run as r
            accurate = r["componentwise"] <= 2 * b["componentwise"]
            dev, e2e = r["device_seconds"] / t_base, r["seconds"] / t_base
            out.append({"aim": aim, "method": name, "n": n, "distribution": dist, "device_ratio": dev,
                        "end_to_end_ratio": e2e, "limit": limit, "error": r["componentwise"],
                        "baseline_error": b["componentwise"], "accurate": accurate,
                        "met_device": accurate and dev <= limit, "met_end_to_end": accurate and e2e <= limit})
    return out


def aim_lines(rows: list[dict], found: list[dict], methods: list[str]) -> list[str]:
    lines = []
    for aim, name in ((AIM_3XTF32, "3xtf32"), (AIM_OZAKI2, "ozaki2")):
        lines.append(f"aim: {aim}")
        mine = [a for a in found if a["method"] == name]
        if not mine:
            why = "needs n >= 8192 (--n 8192)" if name == "ozaki2" and name in methods else f"needs {name} in --methods"
            lines.append(f"  not measured: {why}")
        for a in mine:
            base = "SGEMM" if name == "3xtf32" else "DGEMM"
            lines.append(f"  n={a['n']} {a['distribution']}: device {a['device_ratio']:.3g}x {base} time -> "
                         f"{'met' if a['met_device'] else 'not met'}; end to end {a['end_to_end_ratio']:.3g}x -> "
                         f"{'met' if a['met_end_to_end'] else 'not met'}; error {a['error']:.3e} vs {base} "
                         f"{a['baseline_error']:.3e} ({'accurate' if a['accurate'] else 'less accurate'})")
    return lines


# --- main -------------------------------------------------------------------------------------------------------
COLUMNS = ["method", "distribution", "n", "seconds", "TFLOP/s", "t/SGEMM", "device s", "dev TFLOP/s", "dev t/SGEMM",
           "e2e/dev",
           "componentwise", "normwise", "reference / notes"]


def _g(x: float, digits: int = 4) -> float:
    """x rounded to ``digits`` significant digits, printed by the table as its shortest repr."""
    return float(f"{x:.{digits}g}")


def table_rows(rows: list[dict]) -> list[dict]:
    return [{"method": r["method"], "distribution": r["distribution"], "n": r["n"], "seconds": _g(r["seconds"]),
             "TFLOP/s": _g(r["tflops"], 3), "t/SGEMM": _g(r["t_sgemm"], 3), "device s": _g(r["device_seconds"]),
             "dev TFLOP/s": _g(r["device_tflops"], 3), "dev t/SGEMM": _g(r["device_t_sgemm"], 3),
             "e2e/dev": _g(r["seconds"] / r["device_seconds"], 3),
             "componentwise": _g(r["componentwise"]), "normwise": _g(r["normwise_2"]),
             "reference / notes": "; ".join([r["reference"]] + (["words underflow"] if r["words_underflow"] else [])
                                            + (["seconds: one run"] if r.get("warm_up_timed") else [])
                                            + [f"bits {'=' if r[f'equals_{f}'] else '!='} {f}'s" for f in FUSED
                                               if r.get(f"equals_{f}") is not None])}
            for r in rows]


def _order(row: dict) -> tuple:
    methods = METHODS + NATIVE
    return (row["n"], list(DISTRIBUTIONS).index(row["distribution"]),
            methods.index(row["method"]) if row["method"] in methods else len(methods))


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--n takes comma-separated positive integers, not {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"--n takes comma-separated positive integers, not {text!r}")
    return sizes


def _names(known: list[str], what: str) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        names = [s.strip().lower() for s in text.split(",") if s.strip()]
        bad = [s for s in names if s not in known]
        if bad or not names:
            raise argparse.ArgumentTypeError(f"{what} takes a comma-separated list of {', '.join(known)}; "
                                             f"not {', '.join(bad) or repr(text)}")
        return names
    return parse


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] + " " + __doc__.splitlines()[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=_sizes, help="comma-separated sizes (default 1024,2048,4096,8192 on CUDA, 256 on "
                                             "the CPU)")
    ap.add_argument("--dists", type=_names(list(DISTRIBUTIONS), "--dists"), default=list(DISTRIBUTIONS),
                    help="uniform01 (0, 1] and/or uniform-half (-0.5, 0.5] (default both)")
    ap.add_argument("--methods", type=_names(METHODS + NATIVE, "--methods"), default=METHODS + NATIVE,
                    help=f"comma-separated methods (default all: {', '.join(METHODS + NATIVE)}); fp32 and fp64 (native "
                         "SGEMM and DGEMM, the baselines) are always included")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs after the warm-up (median; default 3)")
    ap.add_argument("--inputs", choices=["tensors", "numpy"], default="tensors",
                    help="tensors: device-resident float64 tensors in and out, every step on the device (default); "
                         "numpy: float64 arrays in and out, the split/CRT on the host")
    ap.add_argument("--backend", default="hardware",
                    help="hardware (CUDA if torch sees a GPU), hardware:cuda[:N], hardware:cpu")
    ap.add_argument("--out", metavar="FILE", help="JSON results (default on CUDA: "
                                              "data/hardware/<gpu>-multiword-speed.json; "
                                              "checked before the run; its folder must exist), or - to print them "
                                              "at the end (the table then goes to stderr)")
    ap.add_argument("--merge", action="store_true",
                    help="keep the rows of an existing --out (same GPU) that this run does not measure again")
    ap.add_argument("--e2e-max", type=int, default=4096,
                    help="above this n the end-to-end time is the one (warm-up) run, not a median (with --inputs numpy "
                         "host-bound: minutes a run at n = 8192); default 4096")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--exact-max", type=int, default=1024, help="largest n with the exact reference everywhere")
    ap.add_argument("--sample-rows", type=int, default=64, help="rows of the exact reference above --exact-max")
    ap.add_argument("--slices", type=int, help="Ozaki I slices (default: matmul's, 9)")
    ap.add_argument("--moduli", type=int, help="Ozaki II moduli (default: matmul's, 16)")
    args = ap.parse_args(argv)
    if args.repeat < 1 or args.sample_rows < 1:
        ap.error("--repeat and --sample-rows must be positive")
    args.methods += [x for x in NATIVE if x not in args.methods]  # the baselines of t/SGEMM and of the aims

    from blockfma import multiword as mw
    from blockfma import files, report
    from blockfma.arguments import ArgumentError

    if args.out == files.STDOUT and args.merge:
        ap.error("--merge keeps the rows of an existing --out file; standard output (-) has none")
    try:  # a bad destination fails now, not after the run
        if args.out is not None:
            files.destination(args.out, name="out")
    except ArgumentError as exc:
        ap.error(exc.message({"out": "--out"}))
    printed = args.out == files.STDOUT  # the JSON goes to stdout at the end, the table to stderr
    show = say if printed else print
    from blockfma.multiword import hardware as hw

    try:
        torch = hw.import_torch()
        device = hw.hardware_device(args.backend)
    except (ImportError, ValueError) as exc:
        print(f"bench_multiword_gpu: {exc}", file=sys.stderr)
        return 2
    cuda = device.type == "cuda"
    sizes = args.n or ([1024, 2048, 4096, 8192] if cuda else [256])
    meta = metadata(hw, device)
    timing = TIMING.format(inputs=INPUTS[args.inputs])
    out = None if args.out is None or printed else Path(args.out)
    if args.out is None and cuda:
        out = REPO / "data" / "hardware" / f"{gpu_slug(meta['name'])}-multiword-speed.json"
        try:
            files.destination(out, name="out")
        except ArgumentError as exc:
            ap.error(exc.message({"out": "--out"}))
    say(", ".join(f"{k} {v}" for k, v in meta.items()))
    if out is None and not printed:
        say("no --out: results are printed only (on the CPU a file needs --out)")
    settings = {"n": sizes, "distributions": args.dists, "methods": args.methods, "repeat": args.repeat,
                "backend": args.backend, "seed": args.seed, "exact_max": args.exact_max, "e2e_max": args.e2e_max,
                "sample_rows": args.sample_rows, "slices": args.slices, "moduli": args.moduli, "inputs": args.inputs}
    record: dict[str, Any] = {
        "what": "multiword methods and Ozaki schemes on real units through torch, with native SGEMM/DGEMM",
        "timing": timing, "metadata": meta, "settings": settings, "runs": [], "rows": [], "aims": []}
    kept: list[dict] = []
    if args.merge and out is not None and out.exists():
        try:
            old = json.loads(out.read_text())
            kept, runs = list(old["rows"]), list(old.get("runs", []))
            same = old["metadata"].get("name") == meta["name"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"bench_multiword_gpu: cannot merge into {out}: {exc}", file=sys.stderr)
            return 2
        if not same:
            print(f"bench_multiword_gpu: {out} holds {old['metadata'].get('name')!r}, not {meta['name']!r}; "
                  "refusing to merge", file=sys.stderr)
            return 2
        record["runs"] = runs
    record["runs"].append({"date": meta["date"], "commit": meta["commit"], "dirty": meta["dirty"], **settings})
    new: list[dict] = []
    try:
        for n in sizes:
            for dist in args.dists:
                new += block(args, hw, mw, torch, device, n, dist)
                done = {(r["method"], r["distribution"], r["n"]) for r in new}
                record["rows"] = sorted([r for r in kept if (r["method"], r["distribution"], r["n"]) not in done] + new,
                                        key=_order)
                record["aims"] = aims(record["rows"])
                if out is not None:
                    files.write_json(out, record)
    except KeyboardInterrupt:
        say("interrupted" + (f"; {out} holds the sizes finished" if out is not None else ""))
        return 130
    where = f", CUDA {meta['cuda']}, compute capability {meta['compute_capability']}" if cuda else ""
    show(f"{meta['name']} ({meta['device']}), torch {meta['torch']}{where}")
    show(f"timing: {timing}")
    show("errors: componentwise max |C - C_hat| / (|A||B|) (Fasi et al. eq. 3.1) and normwise ||C - C_hat||_F / "
         "||C||_F, against the reference named per row; fp32 data for the fp32-level methods, fp64 for Ozaki and "
         "fp64")
    show(report.table(table_rows(record["rows"]), COLUMNS))
    if any(r.get("warm_up_timed") for r in record["rows"]):
        show("(seconds: one run: the end-to-end time of a single run, warm-up included, not a median; --e2e-max)")
    for line in aim_lines(record["rows"], record["aims"], args.methods):
        show(line)
    if out is not None:
        show(f"written: {out}")
    if printed:
        files.write_json(files.STDOUT, record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
