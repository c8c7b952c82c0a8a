"""The seed papers' published feature tests as data: inputs (a, b, c) and each device's published output.

One :class:`SeedCase` is one dot product d = a·b + c in one (input, output) format pair, with the output
each device gave in the paper (``expected``: device preset name -> value, or the output's bit pattern as a
hex string where a paper states bits).  The seed tests (``tests/test_seeds.py``) run every (case, device)
pair through :func:`blockfma.dot` and compare bits; the probe runner takes :func:`rows` of them as extra
rows for a target of k products.  Nothing here is output of this package: each value is the paper's, or
derived by hand from the paper's sentence that ``note`` quotes (the derivation is stated there).

Sources (``shared/seeds``): Fasi, Higham, Mikaitis, Pranesh 2021, "Results" (V100, T4, A100: wmma 16x16x16,
the top-left 4x4 block); Valpey et al., Tables 1, 3, 5 (Titan V, RTX 2080 Ti, RTX A6000 read as the V100, T4
and A100 presets); Li et al. 2024 (FTTN), sec. III with Table IV's per-device readings.

The rows of a case are its printed positions (a_11 b_11 first); positions a paper leaves out are zero.  What
the seeds state but no (a, b, c) -> d case can hold is listed in ``NOT_CASES``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from .. import formats as _formats
from ..inputs import Row

__all__ = ["SeedCase", "SEED_CASES", "NOT_CASES", "seed_case", "cases", "rows", "expected_bits", "SOURCES"]

FASI = "Fasi et al. 2021"
VALPEY = "Valpey et al."
FTTN = "FTTN (Li et al. 2024)"
SOURCES = (FASI, VALPEY, FTTN)

#: the three devices of Fasi et al. (V100, T4, A100); FTTN adds H100, MI100, MI250X
FASI_DEVICES = ("V100", "T4", "A100")


@dataclass(frozen=True)
class SeedCase:
    """d = a·b + c in ``input_format`` (a, b) and ``output_format`` (c, d); ``expected`` maps a device preset
    name to its published d: a float (compared bit for bit in the output format, so -0.0 and NaN count) or
    the output's bit pattern as a hex string such as ``"0x3F800001"``."""

    id: str
    source: str
    title: str
    input_format: str
    output_format: str
    a: tuple[float, ...]
    b: tuple[float, ...]
    c: float
    expected: Mapping[str, float | str] = field(hash=False)
    note: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "a", tuple(float(x) for x in self.a))
        object.__setattr__(self, "b", tuple(float(x) for x in self.b))
        object.__setattr__(self, "c", float(self.c))
        object.__setattr__(self, "expected", MappingProxyType(dict(self.expected)))
        if len(self.a) != len(self.b) or not self.a:
            raise ValueError(f"seed case {self.id}: a and b need the same nonzero length")
        if not self.expected:
            raise ValueError(f"seed case {self.id}: no device's output")
        if not self.source.startswith(SOURCES):
            raise ValueError(f"seed case {self.id}: source {self.source!r} names none of {SOURCES}")
        fin, fout = _formats.get(self.input_format), _formats.get(self.output_format)
        for name, values, fmt in (("a", self.a, fin), ("b", self.b, fin), ("c", (self.c,), fout)):
            ok = _formats.is_representable(fmt, np.array(values)) | np.isnan(values)
            if not ok.all():
                raise ValueError(f"seed case {self.id}: {name} holds a value {fmt.name} does not")
        for device in self.expected:
            expected_bits(self, device)  # every expected value is a value (or bit pattern) of the output

    @property
    def k(self) -> int:
        """Number of product positions the case uses."""
        return len(self.a)


def expected_bits(case: SeedCase, device: str) -> int:
    """The published output of ``device`` as a bit pattern of ``case.output_format`` (sign, NaN payload kept)."""
    fmt = _formats.get(case.output_format)
    want = case.expected[device]
    if isinstance(want, str):
        code = int(want, 16)
        if not want.lower().startswith("0x") or code >> fmt.bits:
            raise ValueError(f"seed case {case.id}: {want!r} is not a {fmt.bits}-bit hex pattern")
        return code
    return int(_formats.encode(fmt, np.float64(want)))


# --- building blocks (exact literals only) ------------------------------------------------------------------
ONES = (1.0, 1.0, 1.0, 1.0)
U24 = 2.0**-24  # 2^-24: ulp(1)/2 in binary32; binary16's smallest subnormal
U25 = 2.0**-25


def _put(n: int, at: dict[int, float]) -> tuple[float, ...]:
    """n values, zero except at the given positions."""
    return tuple(at.get(i, 0.0) for i in range(n))


def _case(id: str, source: str, title: str, a: Sequence[float], b: Sequence[float], c: float,
          expected: Mapping[str, float | str], note: str = "", input_format: str = "fp16",
          output_format: str = "fp32") -> SeedCase:
    return SeedCase(id, source, title, input_format, output_format, tuple(a), tuple(b), c, expected, note)


_RESULTS = f"{FASI}, sec. Results"
_SUB = f"{_RESULTS}, Support for subnormal numbers"
_ACC = f"{_RESULTS}, Accuracy of the dot products"
_RND = f"{_RESULTS}, Rounding modes in tensor core computations"
_FEAT = f"{_RESULTS}, Features of the accumulator"
_TUR = f"{_RESULTS}, NVIDIA Turing tensor cores"
_AMP = f"{_RESULTS}, NVIDIA Ampere tensor cores"
_FTTN_SUB = "; H100 and MI100: FTTN Table IV (subnormal inputs and outputs handled) on these inputs"
_DEV5 = FASI_DEVICES + ("H100", "MI100")
_RZ_B = (2.0, 2.0**-23 + 2.0**-24, 0.0, 0.0)  # b of Fasi et al.'s round-toward-zero test (ones in a)


def _fasi() -> list[SeedCase]:
    """Fasi et al. 2021's tests, in the order of the paper's sections."""
    return [*_fasi_subnormal(), *_fasi_accuracy(), *_fasi_rounding(), *_fasi_accumulator(), *_fasi_turing_ampere()]


def _fasi_subnormal() -> list[SeedCase]:
    """Support for subnormal numbers."""
    out: list[SeedCase] = []
    quote = ('"setting a11 = 2^-24, b11 = 2^2 (arbitrarily chosen), and the remaining elements to zero. The '
             'tensor cores return the subnormal result a11 b11 = 2^-22 in both binary16 and binary32 mode"')
    for fmt in ("fp32", "fp16"):
        out.append(_case(f"fasi-subnormal-input-{fmt}", _SUB + _FTTN_SUB, f"subnormal binary16 input, {fmt} output",
                         [U24], [2.0**2], 0.0, dict.fromkeys(_DEV5, 2.0**-22), quote, output_format=fmt))
    out.append(_case("fasi-subnormal-c", _SUB + "; H100 and MI100: FTTN sec. III T_sa and Table IV",
                     "binary32 subnormal C passes through", [0.0] * 4, [0.0] * 4, 2.0**-149,
                     dict.fromkeys(_DEV5, 2.0**-149),
                     '"setting c11 to the smallest positive binary32 subnormal 2^-149 and all the elements of A '
                     'and B to zero yields d11 = 2^-149"'))
    quote = ('"set a11 to 2^-14, the smallest normal number in binary16, and b11 to 2^-1, and confirm that '
             'tensor cores return the binary16 subnormal 2^-15 in both binary16 and binary32 modes"')
    for fmt in ("fp32", "fp16"):
        out.append(_case(f"fasi-subnormal-output-{fmt}", _SUB + _FTTN_SUB, f"binary16 subnormal from normal "
                         f"inputs, {fmt} output", [2.0**-14], [2.0**-1], 0.0, dict.fromkeys(_DEV5, 2.0**-15),
                         quote, output_format=fmt))
    quote = ('"a11 = 2^-14, b11 = 1, and c11 = -2^-15, which produces the subnormal binary16 number '
             'd11 = 2^-15" (the mode is not stated: 2^-14 - 2^-15 is exact in both)')
    for fmt in ("fp16", "fp32"):
        out.append(_case(f"fasi-subnormal-output-c-{fmt}", _SUB, f"binary16 subnormal from 2^-14 - 2^-15, {fmt} "
                         f"output", [2.0**-14], [1.0], -(2.0**-15), dict.fromkeys(FASI_DEVICES, 2.0**-15), quote,
                         output_format=fmt))
    out.append(_case("fasi-subnormal-rounded-down", _SUB, "subnormal input rounded down in the tensor core",
                     [1.0, 1.0], [2.0**-23 + 2.0**-24, 2.0], 0.0, {"V100": 2.0},
                     '"we set a11 and a12 to 1, b11 to the binary16 subnormal 2^-23 + 2^-24, b21 to 2 ... This '
                     'computation returned the value 2"'))
    return out


def _fasi_accuracy() -> list[SeedCase]:
    """Accuracy of the dot products."""
    out: list[SeedCase] = []
    x = 1 - 2.0**-11
    out.append(_case("fasi-products-exact", _ACC, "products held exactly (binary32 output)", [x] * 4, [x] * 4,
                     0.0, dict.fromkeys(FASI_DEVICES, 4 * (1 - 2.0**-10 + 2.0**-22)),
                     '"we set the first row of A and the first column of B to 1 - 2^-11 and c11 to 0 ... tensor '
                     'cores produce the exact binary32 answer d11 = 4 (1 - 2^-10 + 2^-22)"; T4 and A100: "all '
                     'the conclusions ... remain valid"'))
    out.append(_case("fasi-products-exact-fp16", _ACC, "products held exactly (binary16 output)", [x, x], [x, 2.0**-11],
                     0.0, dict.fromkeys(FASI_DEVICES, 1 - 2.0**-10 + 2.0**-11),
                     '"a11 = b11 = a12 = 1 - 2^-11, b21 = 2^-11 ... we found that tensor cores output the exact '
                     'value" 1 - 2^-10 + 2^-11', output_format="fp16"))
    for p in range(5):
        terms = [U24] * 5
        terms[p] = 1.0
        out.append(_case(f"fasi-order-p{p}", _ACC, f"four rounding errors, largest first: 1 at "
                         f"{'c' if p == 4 else f'b{p + 1}1'}, 2^-24 elsewhere", ONES, terms[:4], terms[4],
                         {"V100": 1.0}, '"run 5 different cases with one of the addends in (3) set to 1 and the '
                         'rest set to 2^-24 ... All permutations return d11 = 1"'))
    return out


def _fasi_rounding() -> list[SeedCase]:
    """Rounding modes in tensor core computations."""
    out: list[SeedCase] = []
    b = _RZ_B
    out.append(_case("fasi-rz-positive", _RND, "round toward zero, positive semi-axis", ONES, b, 0.0,
                     {"V100": 2.0, "T4": 2.0, "A100": 2.0},
                     '"set in (3) b11 = 2, b21 = 2^-23 + 2^-24 ... returns c11 = 2"; T4: the conclusions remain '
                     'valid (with the extra bit 2 + 2^-23 is still truncated to 2); A100: "the TensorFloat-32/'
                     'binary32 mode exhibits the same features as the binary16/binary32 configuration"'))
    out.append(_case("fasi-rz-negative", _RND, "round toward zero, negative semi-axis", ONES, [-v for v in b], 0.0,
                     {"V100": -2.0}, '"changing the sign of the nonzero elements in B. This experiment produces '
                     'c11 = -2"'))
    out.append(_case("fasi-fp16-output-rn", _RND + "; H100, MI100: FTTN Table IV (RTN-TE when outputting FP16)",
                     "binary16 output rounded to nearest", [U24, U24], [2.0**-1, 2.0**-2], 0.0,
                     dict.fromkeys(_DEV5, U24), '"we set a11 = a12 = 2^-24, b11 = 2^-1, b21 = 2^-2 ... The fact '
                     'that tensor cores return 2^-24 confirms that round-towards-zero is not used"',
                     output_format="fp16"))
    return out


def _fasi_accumulator() -> list[SeedCase]:
    """Features of the accumulator: extra bits, normalisation, carry out."""
    out: list[SeedCase] = []
    out.append(_case("fasi-no-guard-digit", f"{_FEAT}, Extra bits in the alignment of significands",
                     "no guard digit", ONES, [1.0, 0.0, 0.0, 0.0], -1 + U24, {"V100": 2.0**-23},
                     '"If in (3) we set b11 = 1 and c11 = -1 + 2^-24, the tensor cores return d11 = 2^-23"'))
    mono = f"{_FEAT}, Normalization in addition; Monotonicity of dot product"
    out.append(_case("fasi-monotonicity-below", mono, "no normalisation of partial sums: c = 1 - 2^-24",
                     ONES, [U24] * 4, 1 - U24, {"V100": 1 + 2.0**-23, "A100": 1 + 2.0**-23},
                     '"d11 = c11 + 2^-24 + 2^-24 + 2^-24 + 2^-24 = 1 + 2^-23 when c11 = 1 - 2^-24"; A100 (fp16 '
                     'and tf32): "exhibits the same features as the binary16/binary32 configuration"'))
    out.append(_case("fasi-monotonicity-one", mono, "non-monotonic: c = 1 gives less", ONES, [U24] * 4, 1.0,
                     {"V100": 1.0}, '"d11 = c11 + 2^-24 + 2^-24 + 2^-24 + 2^-24 = 1 when c11 = 1"'))
    for i in range(4):
        for j in range(4):
            if i != j:
                out.append(_case(f"fasi-subtraction-1at{i}-tinyat{j}", f"{_FEAT}, Normalization in subtraction",
                                 f"no normalisation in subtraction: b{i + 1}1 = 1, b{j + 1}1 = -2^-24", ONES,
                                 _put(4, {i: 1.0, j: -U24}), -1 + U24, {"V100": 2.0**-23},
                                 '"c11 = -1 + 2^-24, and two of the elements of the first column of B to 1 and '
                                 '-2^-24 ... running this experiment on tensor cores yields d11 = 2^-23" (every '
                                 'placement of the two)'))
    carry = f"{_FEAT}, Extra bits for carry out"
    for j in range(4):
        out.append(_case(f"fasi-carry-2-tinyat{j}", carry, f"two carry bits: 2^-23 at b{j + 1}1, 1 elsewhere",
                         ONES, _put(4, {**{i: 1.0 for i in range(4)}, j: 2.0**-23}), 1 + 2.0**-22 + 2.0**-23,
                         {"V100": 4 + 2.0**-21, "T4": 4 + 2.0**-21},
                         '"c11 = 1 + 2^-22 + 2^-23 ... a permutation of the values 1, 1, 1, and 2^-23 ... all four '
                         'combinations returned the exact result 4 + 2^-21"; T4: the conclusions remain valid'))
    out.append(_case("fasi-carry-3", carry, "third carry bit", ONES, [1.0, 1 + 2.0**-1, 1 + 2.0**-1 + 2.0**-2,
                     1 + 2.0**-1 + 2.0**-2 + 2.0**-3], 1 + 2.0**-1 + 2.0**-2 + 2.0**-3, {"V100": 8.0},
                     '"c11 = 1 + 2^-1 + 2^-2 + 2^-3, b11 = 1, b21 = 1 + 2^-1, b31 = 1 + 2^-1 + 2^-2, b41 = 1 + '
                     '2^-1 + 2^-2 + 2^-3 ... the tensor core returns d11 = 8. If only two extra bits were present '
                     '... the adder would incorrectly return d11 = 0" (the 0 belongs to a model with two carry '
                     'bits, not to a device: tests/test_seeds.py checks it with such a model)'))
    out.append(_case("fasi-final-rounding-rz", carry, "final normalisation rounds toward zero", ONES, ONES,
                     1 + 2.0**-22 + 2.0**-23, {"V100": 5.0},
                     '"In the test case above, by replacing one of the 2^-23 by 1 we can also confirm ... that '
                     'the rounding mode in the final normalization step ... is round-towards-zero": read as b = '
                     '(1, 1, 1, 1); the exact 5 + 3 * 2^-23 lies between 5 and 5 + 2^-21, nearer the top, so RZ '
                     'gives 5 (as tests/test_reference.py reads it)'))
    return out


def _fasi_turing_ampere() -> list[SeedCase]:
    """Turing and Ampere: one extra alignment bit, bfloat16, tf32 and binary64."""
    out: list[SeedCase] = []
    out.append(_case("fasi-extra-bit", f"{_TUR}; {_AMP}", "one extra alignment bit: 1 + 2^-24 + 2^-24",
                     [1.0, 1.0], [U24, U24], 1.0, {"T4": 1 + 2.0**-23, "A100": 1 + 2.0**-23, "V100": 1.0},
                     '"the operation 1 + 2^-24 + 2^-24, for example, can now be performed exactly because of the '
                     'presence of the extra bit" (T4; A100 "no differences between the Ampere and Turing tensor '
                     'cores"); V100 has no extra bit, so each 2^-24 is lost in the alignment'))
    for p in range(5):
        a, bb, c = [2.0**-12] * 4, [2.0**-13] * 4, U25
        if p < 4:
            a[p], bb[p] = 1.0, 1.0
        else:
            c = 1.0
        out.append(_case(f"fasi-order-next-bit-p{p}", f"{_TUR}; {_AMP}; FTTN sec. III T_acc_order and Table IV",
                         f"order test with the next bit: 1 at {'c' if p == 4 else f'position {p}'}, 2^-25 "
                         f"elsewhere", a, bb, c, {"T4": 1.0, "A100": 1.0},
                         '"in the test for the order of operations ... the constant 2^-24 should be replaced by '
                         '2^-25, which is the value of the next bit to the right"; 2^-25 is no binary16 value, so '
                         'the products 2^-12 * 2^-13 stand for it. This is also FTTN\'s T_acc_order (1 + 4 '
                         'quarter-ulps in every order), A100: order "not controllable" in Table IV'))
    for c, want, t in ((1 - U24, 1 + 2.0**-23, "below"), (1.0, 1.0, "one")):
        out.append(_case(f"fasi-monotonicity-next-bit-{t}", f"{_TUR}; {_AMP}", f"non-monotonicity with the next "
                         f"bit: eight products 2^-1 * 2^-24, c = {'1 - 2^-24' if t == 'below' else '1'}",
                         [2.0**-1] * 8, [U24] * 8, c, {"T4": want, "A100": want},
                         '"The results obtained on the V100 GPU can be replicated by means of a suitable change of '
                         'the constants": eight products of 2^-25 fill the 8-wide block; with c = 1 - 2^-24 the '
                         'quantum is 2^-25 and the sum 1 + 3 * 2^-24 truncates to 1 + 2^-23; with c = 1 it is '
                         '2^-24 and every product is cut (as tests/test_reference.py reads it)'))
    out.append(_case("fasi-bf16-subnormal-output", _AMP + "; H100, MI100: FTTN Table IV (BF16 subnormals handled)",
                     "binary32 subnormal output from bfloat16 inputs", [2.0**-126], [2.0**-1], 0.0,
                     dict.fromkeys(("A100", "H100", "MI100"), 2.0**-127),
                     '"If in (2) we set a11 = 2^-126, b11 = 2^-1 (normalized bfloat16 values) ... the tensor '
                     'cores correctly produce the subnormal binary32 result d11 = 2^-127"', input_format="bf16"))
    tf32 = ('"the TensorFloat-32/binary32 mode exhibits the same features as the binary16/binary32 configuration" '
            '(the fp16 inputs of this test, run in tf32)')
    out.append(_case("fasi-tf32-monotonicity-below", _AMP, "tf32: no normalisation of partial sums", ONES, [U24] * 4,
                     1 - U24, {"A100": 1 + 2.0**-23}, tf32, input_format="tf32"))
    out.append(_case("fasi-tf32-extra-bit", _AMP, "tf32: one extra alignment bit", [1.0, 1.0], [U24, U24], 1.0,
                     {"A100": 1 + 2.0**-23}, tf32, input_format="tf32"))
    out.append(_case("fasi-tf32-rz-positive", _AMP, "tf32: round toward zero", ONES, _RZ_B, 0.0, {"A100": 2.0}, tf32,
                     input_format="tf32"))
    out.append(_case("fasi-fp64-ieee", _AMP + "; H100 and MI250X: FTTN Table IV (FP64: RTN-TE, FMA unit width 1)",
                     "binary64: round to nearest even, normalised after each addition", [1.0, 1.0],
                     [2.0**-53, 2.0**-53], 1.0, {"A100": 1.0, "H100": 1.0, "MI250X": 1.0, "exact": 1 + 2.0**-52},
                     '"in binary64/binary64 mode ... round-to-nearest with ties to even is used, and the '
                     'normalization is performed after each addition": 1 + 2^-53 + 2^-53 loses each half on its '
                     'own (a tie, to even), whereas one rounding of the exact sum (the "exact" reference) gives '
                     '1 + 2^-52', input_format="fp64", output_format="fp64"))
    return out


def _valpey() -> list[SeedCase]:
    a, b = 265 * 2.0**-24, 1401 * 2.0**-11
    t1 = ("Table 1 prints a = 1.2587890625 * 2^-15 in the normal-number convention; the binary16 value is the "
          "subnormal with fraction field 265, i.e. 265 * 2^-24; b = 1.3681640625 * 2^-1 = 1401 * 2^-11. Exact and "
          "hardware result 1.4162635803222656 * 2^-17 = 371265 * 2^-35")
    t5 = ("Table 5 walk-through (Volta): products a1b1 + a2b2 = exactly 1 - 2^-24, a3b3 = a4b4 = 2^-24. The "
          "table's printed inputs do not reproduce its own walk-through (their products are near 2^-14), so the "
          "products are built to its specification: (1 + 2^-10)(1 - 3 * 2^-11) + (155 * 2^-12)(53 * 2^-12) = "
          "1 - 2^-24")
    a5 = [1 + 2.0**-10, 155 * 2.0**-12, 2.0**-12, 2.0**-12]
    b5 = [1 - 3 * 2.0**-11, 53 * 2.0**-12, 2.0**-12, 2.0**-12]
    return [
        _case("valpey-t1-products-exact", f"{VALPEY}, Table 1", "products in full precision (binary32 output)",
              [a], [b], 0.0, dict.fromkeys(FASI_DEVICES, 371265 * 2.0**-35), t1),
        _case("valpey-t1-products-exact-fp16", f"{VALPEY}, Table 1", "the same product, binary16 output",
              [a], [b], 0.0, dict.fromkeys(FASI_DEVICES, 181 * 2.0**-24),
              t1 + ". Table 1's 'Result (half)' 1.1767578125 * 2^-15 (fraction field 181: 181 * 2^-24) is the "
              "product rounded in binary16; the binary16-mode output rounds the same exact product once to "
              "nearest (Fasi et al.), which gives the same 181 * 2^-24. The paper did not run binary16 output",
              output_format="fp16"),
        _case("valpey-t3-truncation", f"{VALPEY}, Table 3 and sec. 4.2", "truncation, not round toward zero",
              [2.0], [1.0], -(2.0**-40), {"V100": 2.0, "T4": 2.0},
              '"If a and c are 2^1 and -2^-40 (and b is one), then the result in round-to-zero mode should return '
              'the value 2 - 2^-23 ... On the Volta and Turing tensor cores ... results in 2^1"'),
        _case("valpey-t5-markidis", f"{VALPEY}, Table 5", "C added inside the tensor core (Markidis et al.)",
              a5, b5, 2.0**-24, {"V100": 1 + 2.0**-23}, t5 + '; "M: 1 + 2^-23"'),
        _case("valpey-t5-inside", f"{VALPEY}, Table 5", "the tensor core's part of Ootomo-Yokota (C = 0)",
              a5, b5, 0.0, {"V100": 1.0},
              t5 + '; step 6: "0.0 is added to 1.0 + 2^-24 ... normalized, yielding 1.0"; then "1.0 is '
              'accumulated with 2^-24 outside tensor cores. The result is 1.0" (O-Y: 1.0; checked in the tests)'),
    ]


def _fttn() -> list[SeedCase]:
    out: list[SeedCase] = []
    rz = ('; kept, 1 - 2^-(24+n) truncates to 1 - 2^-24 ("the resultant value remains 1 - 2^-1 ulp" for n = 0); '
          'lost, the aligned term is truncated away and d = 1 (Table IV: "truncate")')
    extra = {"fp16": {"V100": 0, "A100": 1, "H100": 2}, "bf16": {"A100": 1, "H100": 2}, "tf32": {"A100": 1, "H100": 2}}
    for fmt, bits in extra.items():
        for n in range(4 if fmt == "fp16" else 2):
            want = {dev: (1 - U24 if n < nb else 1.0) for dev, nb in bits.items()}
            src = f"{FTTN}, sec. III T_1_bit and Table IV (extra bits: V100 0, A100 1, H100 >= 2)"
            note = f"c = 1 plus the product -2^-{24 + n}: it survives the alignment exactly when n < extra bits" + rz
            if fmt == "fp16" and n >= 2:
                src += "; H100 beyond 2 bits: shared/DEVICE-FACTS.md (K&M, MMA-Sim: F = 25)"
                note += (". FTTN says H100 keeps >= 2 bits; that it keeps no third (d = 1 for n >= 2) is K&M's and "
                         "MMA-Sim's F = 25")
            out.append(_case(f"fttn-extra-bits-{fmt}-n{n}", src, f"extra alignment bits ({fmt}): 1 - 2^-{24 + n}",
                             [2.0**-12], [-(2.0 ** -(12 + n))], 1.0, want, note, input_format=fmt))
    for fmt in ("fp16", "bf16"):
        out.append(_case(f"fttn-pres-extra-acc-{fmt}", f"{FTTN}, sec. III T_pres_extra_acc and Table IV",
                         f"extra bits kept through the accumulation ({fmt}): 1 + 3 half-ulps",
                         [2.0**-12] * 3, [2.0**-12] * 3, 1.0,
                         {"A100": 1 + 2.0**-23, "H100": 1 + 2.0**-23} | ({"V100": 1.0} if fmt == "fp16" else {}),
                         '"1 + 2^-1 ulp + 2^-1 ulp + 2^-1 ulp ... If intermediate accumulation steps maintain these '
                         'extra bits, the ultimate result will be 1 + ulp; else it will emerge as 1": A100 keeps 1 '
                         'extra bit, H100 >= 2 (Table IV, truncating); V100 none. Not for round-to-nearest units '
                         '(MI100): there 1 + 1.5 ulp is a tie and goes to 1 + 2 ulp, and tf32 on A100 is disputed '
                         '(Table IV RTN-TE, the other sources truncation)', input_format=fmt))
    prod = ('"if we set one term to be 1 + 2 ulp + ulp and the other as 1 + 2^-2, the exact result is 1 + 2^-2 + 3 '
            'ulp + 2^-1 ulp + 2^-2 ulp ... Similarly we can incorporate negative-number test scenarios"; Table IV: '
            'products rounded RTN-TE, so 1.25 + 3.75 ulp goes to 1.25 + 4 ulp')
    for fmt, devices in (("fp64", ("A100", "H100", "MI250X")), ("fp32", ("MI100",))):
        ulp = 2.0 ** -_formats.get(fmt).fraction_bits
        for s, sign in ((1.0, "positive"), (-1.0, "negative")):
            out.append(_case(f"fttn-t-prod-{fmt}-{sign}", f"{FTTN}, sec. III T_prod and Table IV (product: RTN-TE)",
                             f"product rounding ({fmt}, {sign})", [s * (1 + 3 * ulp)], [1 + 2.0**-2], 0.0,
                             dict.fromkeys(devices, s * (1.25 + 4 * ulp)), prod, input_format=fmt, output_format=fmt))
    return out


#: every seed case, in source order (Fasi et al., Valpey et al., FTTN)
SEED_CASES: tuple[SeedCase, ...] = (*_fasi(), *_valpey(), *_fttn())

_BY_ID: dict[str, SeedCase] = {c.id: c for c in SEED_CASES}
if len(_BY_ID) != len(SEED_CASES):
    raise RuntimeError("seed case ids are not unique")

#: what the seeds state that no single (a, b, c) -> d case holds (kept as text, with where it is checked)
NOT_CASES: tuple[str, ...] = (
    "FTTN sec. V porting GEMM (K = 8192, D = C - A·B in fp32 after the unit): blockfma.experiments.fttn.PUBLISHED "
    "and tests/test_seeds.py",
    "Fasi et al. third carry bit: 'If only two extra bits were present ... d11 = 0' is a model's output "
    "(carry_bits = 2), checked in tests/test_seeds.py on the inputs of fasi-carry-3",
    "Valpey et al. Table 5 O-Y: the tensor core's 1.0 (valpey-t5-inside) then RN(1 + 2^-24) = 1 in fp32 outside "
    "the unit, checked in tests/test_seeds.py",
    "FTTN Table III (T_3_bits_fin_rnd): its products -(2^-3 + 2 ulp) and -(2^-3 + 5 ulp) need 24-bit significands "
    "(no fp16/bf16/tf32 product holds them), its RTN row prints 1 + 2^2 for 1 + 2^-2, and its 3-bit RTN column "
    "(1 + 2^-3) contradicts its own exact value 1 + 2^-3 - 0.625 ulp (nearest: 1 + 2^-3 - ulp); the working form "
    "is probes.features 'rounding'",
    "FTTN Algorithm 1 (T_blk_fma_width) as printed zeroes the previous position and stops at once, and 1 + ulp/2 "
    "under truncation gives 1 at every position; Table IV's widths (A100 8, H100 >= 16, MI100 4/2, tf32 4) are "
    "found by probes.features 'order'",
    "FTTN T_si_no, T_ni_so, T_sa and Table IV's MI250X 'not handled' (fp16, bf16): no concrete inputs, and the "
    "sign of a flushed zero is an open question (src/blockfma/devices/open_questions.json)",
    "Valpey et al. Table 5 as printed (a = 1.0009765625 * 2^-8, ...): its products do not sum to its 'True' "
    "1 + 2^-23 (see valpey-t5-*)",
    "Valpey et al.: 3 carry bits needed on Volta/Turing (the SMT-found inputs are not printed)",
)


def seed_case(case_id: str) -> SeedCase:
    """The seed case of that id."""
    try:
        return _BY_ID[case_id]
    except KeyError:
        raise ValueError(f"unknown seed case {case_id!r}; known: {', '.join(_BY_ID)}") from None


def _device_name(device: str) -> str:
    """The preset name of a device or alias (``"H200"`` -> ``"H100"``); unknown names as given."""
    from ..devices import device as _device

    if device.endswith(".json"):  # a record's path: no lookup (loading it would register it)
        return device
    try:
        return _device(device).name
    except ValueError:
        return device


def cases(device: str | None = None, input_format: str | None = None,
          output_format: str | None = None) -> list[SeedCase]:
    """Seed cases with a published output for ``device`` (a preset name or alias) in those formats (None: any)."""
    name = None if device is None else _device_name(device)
    fin = None if input_format is None else _formats.get(input_format).name
    fout = None if output_format is None else _formats.get(output_format).name
    return [c for c in SEED_CASES
            if (name is None or name in c.expected or device in c.expected)
            and (fin is None or _formats.get(c.input_format).name == fin)
            and (fout is None or _formats.get(c.output_format).name == fout)]


def rows(seed_cases: Iterable[SeedCase], k: int) -> list[Row]:
    """The cases as rows of k products, labelled by case id: a and b in their printed positions, zeros after.
    A case that uses more than k positions does not fit and is left out."""
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    out = []
    for c in seed_cases:
        if c.k <= k:
            pad = (0.0,) * (k - c.k)
            out.append(Row(c.id, c.a + pad, c.b + pad, c.c))
    return out
