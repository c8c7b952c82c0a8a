"""FTTN's "porting danger" GEMM (Li et al., FTTN, sec. V).

D = C - A·B with C = 2**20 everywhere; row i of A is (2**10, -2**-2, -2**-3, -2**-2, -2**-3, ...) (odd columns -2**-2,
even columns after the first -2**-3) and column j of B is (2**10, 2**-3, 2**-3, ...), so the exact answer is 2**7 + 2**6
- 2**-6 = 191.984375.  The small products are negative so that C - A·B is positive, as the paper's expansion shows.
FTTN's kernel starts from acc = 0, accumulates the 512 tiles of 16x16x16 over K = 8192 on the matrix unit (each tile's
result is the next tile's C), then computes D = C - acc in fp32 on ordinary cores.  Published results: 0 on V100, A100
and MI250X, 255.875 on MI100, 191.875 on H100.  Every element of D is the same, so one dot product tells.  The
reproductions (``blockfma reproduce``): :func:`porting` and :func:`table_4` (FTTN's Table IV).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..engine import dot
from ..model import Model

K = 8192
C_VALUE = 2.0**20
EXACT = 2.0**7 + 2.0**6 - 2.0**-6

#: FTTN's published values of D (Table in sec. V; MI250X as FTTN measured it).
PUBLISHED = {"V100": 0.0, "A100": 0.0, "MI250X": 0.0, "MI100": 255.875, "H100": 191.875}


def operands(k: int = K) -> tuple[np.ndarray, np.ndarray]:
    """Row of A and column of B of FTTN's matrices (binary16-representable)."""
    j = np.arange(k)
    a = np.where(j % 2 == 1, -(2.0**-2), -(2.0**-3))
    a[0] = 2.0**10
    b = np.full(k, 2.0**-3)
    b[0] = 2.0**10
    return a, b


def run(device: str | None = None, *, model: Model | None = None, input_format: str = "fp16", k: int = K) -> float:
    """D = C - acc for one device preset (or model), as FTTN's kernel computes it."""
    a, b = operands(k)
    if model is None:
        acc = dot(a, b, 0.0, device=device, input_format=input_format, output_format="fp32")
    else:
        acc = dot(a, b, 0.0, model=model)
    return float(np.float32(np.float32(C_VALUE) - np.float32(acc)))


# --- reproductions (blockfma reproduce fttn-table4, fttn-porting) ----------------------------------------------

#: FTTN Table IV (p. 5) as printed, per (inputs, GPU): subnormal inputs handled, subnormal outputs handled,
#: extra bits, rounding mode exhibited, FMA unit width, rounding of FP16/BF16 output (FP16/BF16 inputs) or of
#: the product (FP32/FP64 inputs).  "N.A." as printed; ">=2" for the table's "≥ 2".
TABLE_IV: dict[tuple[str, str], tuple[bool, bool, str, str, str, str]] = {
    ("fp16", "V100"): (True, True, "0", "truncate", "N.A.", "RTN-TE"),
    ("fp16", "A100"): (True, True, "1", "truncate", "8", "RTN-TE"),
    ("fp16", "H100"): (True, True, ">=2", "truncate", ">=16", "RTN-TE"),
    ("fp16", "MI100"): (True, True, "3", "RTN-TE", "4", "RTN-TE"),
    ("fp16", "MI250X"): (False, False, "3", "RTN-TE", "1", "RTN-TE"),
    ("bf16", "A100"): (True, True, "1", "truncate", "8", "N.A."),
    ("bf16", "H100"): (True, True, ">=2", "truncate", ">=16", "RTN-TE"),
    ("bf16", "MI100"): (True, True, "3", "RTN-TE", "2", "RTN-TE"),
    ("bf16", "MI250X"): (False, False, "3", "RTN-TE", "1", "RTN-TE"),
    ("tf32", "A100"): (True, True, "1", "RTN-TE", "4", "N.A."),
    ("tf32", "H100"): (True, True, ">=2", "truncate", "4", "N.A."),
    ("fp32", "MI100"): (True, True, "3", "RTN-TE", "1", "RTN-TE"),
    ("fp64", "MI250X"): (True, True, "3", "RTN-TE", "1", "RTN-TE"),
    ("fp64", "A100"): (True, True, "3", "RTN-TE", "1", "RTN-TE"),
    ("fp64", "H100"): (True, True, "3", "RTN-TE", "1", "RTN-TE"),
}
TABLE_IV_COLUMNS = ("subnormal inputs", "subnormal outputs", "extra bits", "rounding", "FMA width",
                    "FP16/BF16 output or product rounding")

#: why ours differs from Table IV where it does, with the evidence (shared/DEVICE-FACTS.md, data/hardware)
WHY: dict[tuple[str, str, str], str] = {
    ("fp16", "V100", "FMA width"): (
        "Table IV prints N.A. (no extra bit to test with, its footnote), while FTTN's own text (sec. IV) gives "
        "the V100 a width of 4, as do Fasi et al. 2021, Khattak & Mikaitis and MMA-Sim"),
    ("tf32", "A100", "rounding"): (
        "FTTN reads round-to-nearest; Fasi et al. 2021 (A100 tf32 'exhibits the same features as' fp16, i.e. "
        "truncation), Khattak & Mikaitis and MMA-Sim read truncation, and the A100 tf32 golden data "
        "(shared/golden) fit truncation bit for bit"),
    ("tf32", "H100", "FMA width"): (
        "FTTN did not rerun the width test on the H100 (its footnote 6) and prints 4; MMA-Sim and Khattak & "
        "Mikaitis read 8, and the project's own H100 record (data/hardware/h100-probe-cuda.json.gz) inferred "
        "L = 8 for mma.m16n8k8 tf32 from outputs alone, verified on 10^6 rows"),
    ("fp16", "MI250X", "FMA width"): (
        "open question (DEVICE-FACTS.md): FTTN reports width 1, while AMD's MIOpen note, MMA-Sim and Khattak & "
        "Mikaitis model exact fp32 products added pairwise, (p0+p1)+(p2+p3), which the preset follows; the "
        "instruction FTTN's HIP code reached is not known. For fp16 the order test cannot read the width here: "
        "its unit terms are subnormal, which the preset flushes"),
    ("bf16", "MI250X", "FMA width"): (
        "open question (DEVICE-FACTS.md): FTTN reports width 1; AMD's MIOpen note, MMA-Sim and Khattak & "
        "Mikaitis model pairwise fp32 adds (p0+p1)+(p2+p3), which read as width 2 in this test"),
}


#: why the porting GEMM's D differs from FTTN's published value on a preset
PORTING_WHY = {"MI250X": (
    "open question (DEVICE-FACTS.md): the preset follows AMD's MIOpen note, MMA-Sim and Khattak & Mikaitis "
    "(exact fp32 products, pairwise IEEE fp32 adds), which give 255.875; FTTN's 0 fits a width-1 FMA chain, the "
    "variant MI250X-fttn (0 in the rows), and which instruction FTTN's HIP code reached is not known")}


def _run_test(name: str, context: Any, tgt: Any) -> Any:
    """One probe feature test's reading of target ``tgt`` (None where the test builds no row)."""
    from ..probes.features import arrays, feature_test

    test = feature_test(name)
    rows = test.build(context)
    if not rows:
        return None
    a, b, c = arrays(rows)
    return test.read(context, rows, np.asarray(tgt(a, b, c)))


def _feature_readings(device: str, inp: str, k: int = 32) -> dict[str, Any]:
    """Table IV's columns for one preset and input format, read from the outputs alone: the probes' feature
    tests (subnormals, precision, order; :mod:`blockfma.probes.features`) and two rounding rows of FTTN's
    T_rnd_dir idea (1 ± 0.75 ulp from one product and C), on ``sim:DEVICE`` as a black box."""
    from .. import formats as _formats
    from ..devices import device as _device
    from ..probes.features import Context
    from ..inputs import Formats
    from ..probes.targets import target

    out_fmt = "fp64" if inp == "fp64" else "fp32"
    tg = target(f"sim:{device}", inp, out_fmt, k=k)
    ctx = Context(Formats.of(inp, inp, out_fmt, out_fmt), k)
    got: dict[str, Any] = {}
    sub = _run_test("subnormals", ctx, tg) or {}
    got["subnormal inputs"] = sub.get("subnormal inputs kept (T_si_no)")
    got["subnormal outputs"] = sub.get("subnormal outputs (T_ni_so)")
    half = (inp, "fp16" if inp == "fp16" else "bf16")
    pairs = _device(device).pairs()
    if got["subnormal outputs"] is None and half in pairs:  # fp16 products make no fp32 subnormal: FTTN
        tg16 = target(f"sim:{device}", inp, half[1], k=k)   # reads them in the 16-bit output
        s16 = _run_test("subnormals", Context(Formats.of(inp, inp, half[1], half[1]), k), tg16) or {}
        got["subnormal outputs"] = s16.get("subnormal outputs (T_ni_so)")
    F = _run_test("precision", ctx, tg)["bits kept below the largest term (F)"]
    p = _formats.get(out_fmt).fraction_bits
    got["extra bits"] = "exact" if F >= 59 or F > p + 20 else F - p  # 59: the precision test's last shift
    ctx.known["F"] = F
    order = (_run_test("order", ctx, tg) or {}).get("unit terms counted, M at 0 and -M at j = 1..k-1") or []
    got["FMA width"] = _width(order)
    got["rounding"] = _rounding(ctx, tg, p)
    got["FP16/BF16 output or product rounding"] = _half_or_product_rounding(device, inp, k, half in pairs)
    return got


def _rounding(ctx: Any, tg: Any, p: int) -> str:
    """C = ±1 and one product of ±0.75 ulp (p fraction bits): round to nearest gives 1 + ulp, truncation 1,
    rounding down -1 - ulp."""
    import math

    from ..probes.features import Builder, arrays

    B = Builder(ctx)
    ulp = math.ldexp(1.0, -p)
    for s in (1.0, -1.0):
        B.add(f"{s:+.0f}", {0: s * 0.75 * ulp}, s)
    a, b, c = arrays(B.rows)
    d = np.asarray(tg(a, b, c), dtype=np.float64)
    up, down = d[0] == 1 + ulp, d[1] == -1 - ulp
    return "RTN-TE" if up and down else "truncate" if not up and not down else "round down" if down else "round up"


def _half_or_product_rounding(device: str, inp: str, k: int, half_output: bool) -> str:
    """Table IV's last column: the rounding of an FP16/BF16 output (16-bit inputs, where the preset has one:
    ``half_output``) or of the products (FP32/FP64 inputs, FTTN's T_prod seed case); else "N.A."."""
    import math

    from .. import formats as _formats
    from ..devices import device as _device
    from ..probes import seeds
    from ..probes.features import Builder, Context, arrays
    from ..inputs import Formats
    from ..probes.targets import target

    if inp in ("fp16", "bf16") and half_output:
        half = "fp16" if inp == "fp16" else "bf16"
        u16 = math.ldexp(1.0, -_formats.get(half).fraction_bits)
        B = Builder(Context(Formats.of(inp, inp, half, half), k))
        B.add("1 + 0.75 ulp", {0: 0.75 * u16}, 1.0)
        a, b, c = arrays(B.rows)
        d16 = float(np.asarray(target(f"sim:{device}", inp, half, k=k)(a, b, c))[0])
        return "RTN-TE" if d16 == 1 + u16 else "truncate"
    if inp in ("fp32", "fp64"):
        case = seeds.seed_case(f"fttn-t-prod-{inp}-positive")
        model = _device(device).model(inp, "fp64" if inp == "fp64" else "fp32")
        d = float(dot(np.array(case.a), np.array(case.b), case.c, model=model))
        uin = math.ldexp(1.0, -_formats.get(inp).fraction_bits)
        return "RTN-TE" if d == 1.25 + 4 * uin else "truncate" if d == 1.25 + 3 * uin else repr(d)
    return "N.A."


def _inferred(device: str, inp: str) -> dict[str, Any]:
    """``blockfma.probe`` of ``sim:DEVICE`` with no presets among its candidates (``priors="none"``): whether
    a Model verified, and its L, F and output rounding (tens of seconds a row; scale "paper" only)."""
    from ..probes import probe

    out_fmt = "fp64" if inp == "fp64" else "fp32"
    try:
        f = probe(f"sim:{device}", inp, out_fmt, verify=2000, priors="none", progress=False)
    except ValueError as exc:
        return {"probe": f"not run: {exc}"}
    r = f.row()
    return {"probe verified": r["verified"], "probe L": r.get("L"), "probe F": r.get("F"),
            "probe rounding": r.get("output_rounding"), "probe seconds": round(f.seconds, 1)}


def _width(counts: list[float]) -> int | None:
    """Block width from the order test's counts (M at 0, -M at j, unit terms elsewhere): the u's of a block
    that holds M or -M are lost, so the count stays at its first value while j is in the first block; a chain
    of width 1 loses one more u at each step.  None where nothing was counted (the u's flushed)."""
    if not counts or not any(counts):
        return None
    if len(counts) > 3 and all(counts[i] - counts[i + 1] == 1 for i in range(3)):
        return 1
    for j, n in enumerate(counts, 1):
        if n != counts[0]:
            return j
    return len(counts) + 1


def _agrees(column: str, paper: Any, ours: Any) -> bool:
    if column == "extra bits":
        if paper == "3":  # FTTN's 3 bits on round-to-nearest units are guard, round and sticky: an exact sum
            return ours == "exact"
        if paper == ">=2":
            return isinstance(ours, int) and ours >= 2
        return str(ours) == paper
    if column == "FMA width" and paper == ">=16":
        return isinstance(ours, int) and ours >= 16
    return str(ours) == str(paper)


def table_4(*, scale: str = "ci", progress: Any = None) -> Any:
    """FTTN Table IV: per GPU and input format, the features read from the presets as black boxes, the
    paper's values beside ours and every difference with its evidence."""
    from .result import Comparison, check_scale, result

    check_scale(scale)
    rows, comps = [], []
    for n, ((inp, dev), paper) in enumerate(TABLE_IV.items(), 1):
        if progress is not None:
            progress(f"fttn-table4: {dev} {inp} ({n} of {len(TABLE_IV)})")
        ours = _feature_readings(dev, inp)
        row: dict[str, Any] = {"inputs": inp, "GPU": dev}
        if scale == "paper":  # the whole probe suite too: a Model inferred from outputs alone, verified
            row.update(_inferred(dev, inp))
        for col, want in zip(TABLE_IV_COLUMNS, paper):
            got = ours[col]
            if isinstance(want, bool):
                ok = got is want
                shown_paper, shown_ours = ("yes" if want else "no"), ("?" if got is None else "yes" if got else "no")
            else:
                ok = _agrees(col, want, got)
                shown_paper, shown_ours = want, "?" if got is None else str(got)
            why = WHY.get((inp, dev, col), "")
            if ok and col == "extra bits" and want == "3":
                why = ("ours keeps every bit (an exact sum, rounded once); FTTN's three bits on a round-to-nearest "
                       "unit are the guard, round and sticky bits such a rounding needs, so the two readings agree "
                       "on every FTTN test")
            row[f"{col} (paper)"] = shown_paper
            row[f"{col} (ours)"] = shown_ours
            comps.append(Comparison(f"{dev} {inp}: {col}", shown_paper, shown_ours, ok, "" if ok and not why else why))
        rows.append(row)
    notes = (
        "Ours: the probes' feature tests (blockfma.probes.features: subnormals, precision, order) and FTTN's "
        "T_rnd_dir idea with one product, sent to sim:GPU as a black box at k = 32; the presets' parameters are "
        "not read. 'exact' extra bits: every bit of the block kept (an exact sum, one rounding). At scale paper "
        "each row also runs the whole probe suite (blockfma.probe, no presets among the candidates): the 'probe' "
        "columns give the Model it inferred and verified from the outputs alone.",
        "Table IV's 'order within one FMA unit is controllable' column is not compared (the paper's 'no' for every "
        "unit is what a symmetric exact block sum gives).",
        "MI250X's fp16/bf16 'subnormals not handled' is the preset's flush to zero (AMD's note); A100 bf16 output "
        "is N.A. as printed (no bf16 -> bf16 unit).",
    )
    return result("fttn-table4", "FTTN Table IV: features per GPU and input format", rows,
                  comparisons=tuple(comps), notes=notes, scale=scale)


def porting(*, scale: str = "ci", progress: Any = None) -> Any:
    """FTTN's porting GEMM (sec. V) on every preset it names, and the others with an fp16 -> fp32 unit: D
    beside FTTN's published values (0, 255.875, 191.875) and the exact value 2^7 + 2^6 - 2^-6."""
    from ..devices import devices as _devices
    from .result import Comparison, check_scale, result

    check_scale(scale)
    rows, comps = [], []
    devs = [d for d in _devices() if ("fp16", "fp32") in d.pairs()]
    for n, dev in enumerate(devs, 1):
        if progress is not None and n % 5 == 1:
            progress(f"fttn-porting: {dev.name} ({n} of {len(devs)})")
        d = run(dev.name)
        published = PUBLISHED.get(dev.name)
        rows.append({"device": dev.name, "D": d, "FTTN": published, "exact": EXACT,
                     "error": d - EXACT, "model": dev.model("fp16", "fp32").summary()})
        if published is not None:
            why = "" if d == published else PORTING_WHY.get(dev.name, "")
            comps.append(Comparison(f"{dev.name}: D", published, d, d == published, why))
    comps.append(Comparison("exact D = 2^7 + 2^6 - 2^-6 (sec. V)", 191.984375, EXACT, EXACT == 191.984375))
    notes = ("FTTN's kernel: acc = 0, 512 tiles of 16x16x16 over K = 8192 chained on the unit, then D = C - acc "
             "in fp32 (blockfma.experiments.fttn); every element of D is the same, so one dot product tells.",
             "MI250X: FTTN measured 0; the preset (pairwise fp32 adds, AMD's MIOpen note, MMA-Sim, Khattak & Mikaitis) "
             "gives 255.875, and the variant MI250X-fttn (an FMA chain of width 1, FTTN's reading) gives FTTN's 0: "
             "an open question of the presets (blockfma devices MI250X).",)
    return result("fttn-porting", "FTTN sec. V: the porting GEMM D = C - A·B per device", rows,
                  comparisons=tuple(comps), notes=notes, scale=scale)
