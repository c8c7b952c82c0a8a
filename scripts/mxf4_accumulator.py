"""Inputs that read the B200 mxf4 accumulator width F (issue 23; DeepGEMM issue 176 asked "34, 35, 36 or 37
bits?").  No command-line options: run it as

    PYTHONPATH=src python scripts/mxf4_accumulator.py            # about a minute with bitwuzla on 2 cores

The preset (``B200`` instruction ``tcgen05.mxf4.block32``, MMA-Sim 2.1.1's reading) sums every 16 fp4
products exactly, gives each sum its scales' exponent, aligns the four sums and C to the largest exponent,
cuts every term at F = 35 fraction bits below it, adds, and rounds toward zero into fp32.  For every pair of
F in 34..37 the SMT solver finds one instruction's input (A and B zero but at positions 0, 16, 32 and 48;
the ue8m0 scales and C free, exponents within +-32; then again with C = 0, what a GEMM library with beta = 0
gives the unit) whose fp32 results differ, and one input whose four results are pairwise different; a
hand-made input does the same in plain numbers.  Every expected output
is computed by the exact reference (``blockfma.reference.dot_bits``) and must equal the engine's and the
formula's.  Run each row on a B200 (one tcgen05.mma.kind::mxf4.block_scale, A's row 0 and B's column 0, the
rest of A and B zero) and compare D[0, 0] with the columns: the column that matches is the hardware's F.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import blockfma as bf
from blockfma import formats as F
from blockfma import reference as R
from blockfma.smt import queries as Q

FRACTIONS = (34, 35, 36, 37)
K, BLOCK = 64, 32


def model() -> bf.Model:
    return bf.device("B200").model("e2m1fn", "fp32", instruction="tcgen05.mxf4.block32")


def designed() -> tuple[np.ndarray, np.ndarray, float, np.ndarray, np.ndarray]:
    """No C: the groups at positions 0 and 16 (scale 1) sum to 1 and -1, which sets e_max = 0 and cancels;
    the group at positions 32..34 sums to 1.75 with scale 2**-35, so F = 34 cuts it to 0, F = 35 keeps
    2**-35, F = 36 1.5 * 2**-35 and F = 37 all of it."""
    a, b = np.zeros(K), np.zeros(K)
    a[0], b[0], a[16], b[16] = 1.0, 1.0, 1.0, -1.0
    a[32:35], b[32:35] = [1.0, 0.5, 0.5], [1.0, 1.0, 0.5]
    return a, b, 0.0, np.array([1.0, 2.0 ** -35]), np.array([1.0, 1.0])


def codes(fmt: str, x: np.ndarray) -> str:
    """Codes of a vector as hex digits, element 0 first (fp4: one digit an element)."""
    f = F.get(fmt)
    width = (f.bits + 3) // 4
    return " ".join(f"{int(c):0{width}x}" for c in F.encode(f, np.asarray(x, dtype=np.float64)))


def outputs(m: bf.Model, a, b, c, sa, sb) -> list[int]:
    """The fp32 bits of d under each F: the reference's, checked against the engine's."""
    out = []
    for f in FRACTIONS:
        mf = m.replace(fraction_bits=f)
        ref = R.dot_bits(mf, list(a), list(b), c, list(sa), list(sb))
        eng = bf.dot(np.asarray(a)[None], np.asarray(b)[None], np.array([c]), model=mf, scale_a=np.asarray(sa)[None],
                     scale_b=np.asarray(sb)[None])
        assert int(F.bits(eng)[0]) == ref, (f, hex(ref), eng)
        out.append(ref)
    return out


def main() -> None:
    m = model()
    print(f"model: {m.name}: F = {m.fraction_bits}, scale_group G = {m.option('scale_group')}, e_zero = {m.e_zero}, "
          f"{m.output_rounding.name} into fp32 (MMA-Sim 2.1.1, TCGen05MMABlockScale)")
    rows = [("designed, C=0", *designed())]
    for zero_c in (False, True):
        reading = Q.accumulator_inputs(m, FRACTIONS, zero_c=zero_c, timeout=300, progress=print)
        print(f"one input with four different results{' (C = 0)' if zero_c else ''}: {reading.joint_status}")
        rows += [(label + (", C=0" if zero_c else ""), s.a, s.b, s.c, s.scale_a, s.scale_b)
                 for label, s in reading.rows()]
    head = f"\n{'input':<22}" + "".join(f"  {'F = ' + str(f):<10}" for f in FRACTIONS)
    print(head)
    print("-" * len(head))
    details = []
    for i, (label, a, b, c, sa, sb) in enumerate(rows):
        outs = outputs(m, a, b, c, sa, sb)
        print(f"{i:>2}: {label:<18}" + "".join(f"  0x{o:08x}" for o in outs))
        details.append((i, label, a, b, c, sa, sb, outs))
    print("\ninputs (A's row 0 and B's column 0 along K = 64, fp4 e2m1 codes, element 0 first; "
          "C fp32 bits; ue8m0 scale codes, one per 32 elements):")
    for i, label, a, b, c, sa, sb, outs in details:
        nz = [j for j in range(K) if a[j] != 0 or b[j] != 0]
        print(f"{i}: {label}")
        print(f"   A = {codes('e2m1fn', a).replace(' ', '')}")
        print(f"   B = {codes('e2m1fn', b).replace(' ', '')}")
        print(f"   nonzero at {nz}: a = {[float(a[j]) for j in nz]}, b = {[float(b[j]) for j in nz]}")
        print(f"   C = 0x{int(F.encode(F.fp32, np.float64(c))):08x} ({float(c).hex()})")
        print(f"   scale_a = {codes('e8m0fnu', sa)} ({', '.join(float(x).hex() for x in sa)}), "
              f"scale_b = {codes('e8m0fnu', sb)} ({', '.join(float(x).hex() for x in sb)})")
        print("   D = " + ", ".join(f"F={f}: 0x{o:08x} ({np.uint32(o).view(np.float32).item().hex()})"
                                    for f, o in zip(FRACTIONS, outs)))


if __name__ == "__main__":
    main()
