"""Probes of block-scaled units (issue 23): the target that takes scales, the feature tests of the scale path
and the inference of scaled-fused Models from simulated black boxes.

Expected outputs of the feature rows are written out by hand (hex literals, exact powers of two); the
inference is held to the presets themselves and, with ``priors="none"``, bit for bit on random rows."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import blockfma as bf
from blockfma.arguments import ArgumentError
from blockfma.formats import bits
from blockfma.model import Family
from blockfma.probes import ProbeError
from blockfma.probes import scaled as sc
from blockfma.inputs import Formats
from blockfma.probes.targets import sim_jobs

B200 = bf.device("B200")
MXF4 = B200.model("e2m1fn", "fp32", "tcgen05.mxf4.block32")
NVF4 = B200.model("e2m1fn", "fp32", "tcgen05.mxf4nvf4.block16.ue4m3")
MXF8 = B200.model("e4m3fn", "fp32", "tcgen05.mxf8f6f4.block32")


def _with(m, **options):
    return m.replace(options={**dict(m.options), **options})


def _ctx(m):
    return sc.ScaledContext.of(sc.SimScaledTarget(m))


def _run(m, test, known=None):
    """The rows of one feature test, the simulated target's outputs and its reading."""
    ctx = _ctx(m)
    ctx.known.update(known or {})
    rows = sc.SCALED_TESTS[test].build(ctx)
    d = sc.SimScaledTarget(m)(*sc.arrays(rows, ctx))
    return rows, d, sc.SCALED_TESTS[test].read(ctx, rows, d)


def _out(rows, d, label):
    return next(int(u) for r, u in zip(rows, bits(d)) if r.label == label)


# --- the target ------------------------------------------------------------------------------------------
def test_sim_target_is_dot_with_scales_and_checks_shapes():
    t = sc.SimScaledTarget(MXF4)
    assert (t.k, t.blocks, t.scale_format.name, t.scale_block) == (64, 2, "e8m0fnu", 32)
    a = np.zeros((2, 64))
    a[:, 0], a[:, 40] = 1.5, -6.0
    b = np.ones((2, 64))
    sa, sb = np.array([[2.0**-3, 2.0**4], [1.0, 1.0]]), np.array([[2.0**127, 2.0**-127], [1.0, np.nan]])
    d = t(a, b, np.array([0.25, 0.0]), sa, sb)
    assert d.dtype == np.float32 and t.calls == 1 and t.rows == 2
    # 1.5 * 2^-3 * 2^127 - 6 * 2^4 * 2^-127 + 0.25: the second term is far below the cut
    assert bits(d)[0] == bits(np.float32(1.5 * 2.0**124))
    assert bits(d)[1] == 0x7FFFFFFF  # a NaN scale: the canonical NaN
    with pytest.raises(ValueError, match=r"sa and sb shape \(n, 2\)"):
        t(a, b, np.zeros(2), sa[:, :1], sb)


def test_callable_target_and_errors():
    f = sc.scaled_target(lambda a, b, c, sa, sb: c, "e2m1fn", "fp32", k=32, scale_format="e8m0fnu",
                         scale_block=16)
    assert isinstance(f, sc.CallableScaledTarget) and f.blocks == 2
    assert bits(f(np.zeros((1, 32)), np.zeros((1, 32)), np.array([3.0]), np.ones((1, 2)), np.ones((1, 2))))[0] \
        == 0x40400000
    with pytest.raises(ArgumentError, match="scale_format"):
        sc.scaled_target(lambda *x: x[2], "e2m1fn", k=32, scale_format="fp16", scale_block=16)
    with pytest.raises(ArgumentError, match="needs k"):
        sc.scaled_target(lambda *x: x[2], "e2m1fn")
    with pytest.raises(ArgumentError, match="not a block-scaled"):
        sc.scaled_target("sim:B200:tcgen05", "fp16", "fp32")
    with pytest.raises(ArgumentError, match="names no block-scaled"):
        sc.scaled_target("sim:B200")
    bad = sc.scaled_target(lambda a, b, c, sa, sb: np.zeros(3), "e2m1fn", k=32, scale_format="e8m0fnu",
                           scale_block=32)
    with pytest.raises(bf.probes.TargetError, match="shape"):
        bad(np.zeros((1, 32)), np.zeros((1, 32)), np.zeros(1), np.ones((1, 1)), np.ones((1, 1)))


def test_plain_probe_refuses_block_scaled_targets():
    for spec in (MXF4, sc.SimScaledTarget(NVF4)):
        with pytest.raises(ArgumentError, match="probe_scaled"):
            bf.probe(spec, verify=100)


def test_probe_scaled_arguments_are_checked():
    for kw, match in (({"verify": 5}, "verify"), ({"priors": "some"}, "priors"), ({"seed": -1}, "seed")):
        with pytest.raises(ArgumentError, match=match):
            sc.probe_scaled(MXF4, **kw)
    with pytest.raises(ArgumentError, match="names no block-scaled instruction"):
        sc.probe_scaled("sim:B200", "e2m1fn")
    with pytest.raises(TypeError):
        sc.probe_scaled(MXF4, scale_blok=16)


def test_sim_jobs_split_block_scaled_presets():
    scaled = sim_jobs(scaled=True)
    assert scaled and all(m.family is Family.SCALED_FUSED for *_, m in scaled)
    assert not any(m.family is Family.SCALED_FUSED for *_, m in sim_jobs(scaled=False))
    assert len(sim_jobs()) == len(scaled) + len(sim_jobs(scaled=False))


@pytest.mark.parametrize("fmt, scale", [("e2m1fn", "e8m0fnu"), ("e2m1fn", "ue4m3"), ("e4m3fn", "e8m0fnu"),
                                        ("e3m2fn", "ue4m3")])
def test_place_block_is_exact(fmt, scale):
    f, fs = Formats.of(fmt, fmt, "fp32", "fp32"), bf.formats.get(scale)
    low = 2.0**-30 if scale == "e8m0fnu" else 2.0**-15  # ue4m3 scales reach 2^-18 (2^-9 squared)
    for values in ([low], [2.0**20, -2.0**18], [0.75 * 2**-5, 2.0**-6], [0.0, 2.0**3]):
        placed = sc.place_block(f, fs, values)
        assert placed is not None, values
        elems, sa, sb = placed
        assert bool(bf.formats.is_representable(fs, sa)) and bool(bf.formats.is_representable(fs, sb))
        for v, (x, y) in zip(values, elems):
            assert bool(bf.formats.is_representable(f.a, x)) and bool(bf.formats.is_representable(f.b, y))
            assert Fraction(x) * Fraction(y) * Fraction(sa) * Fraction(sb) == Fraction(v)


# --- feature tests: readings against hand-written outputs ----------------------------------------------------
@pytest.mark.parametrize("m", [MXF4, NVF4, MXF8], ids=["2 blocks", "4 blocks", "1 block"])
def test_blocks_reading_names_each_positions_scale(m):
    rows, _d, reading = _run(m, "blocks")
    assert reading["as stated"] and len(rows) == m.block_width
    assert reading["scale block of each position"][:17] == [0] * 16 + [16 // m.option("scale_block")]


def test_blocks_reading_shows_scales_in_the_wrong_blocks():
    t = sc.SimScaledTarget(NVF4)
    swapped = sc.CallableScaledTarget(lambda a, b, c, sa, sb: t(a, b, c, sa[:, ::-1], sb[:, ::-1]), 64,
                                      t.formats, "ue4m3", 16)
    ctx = sc.ScaledContext.of(swapped)
    rows = sc.SCALED_TESTS["blocks"].build(ctx)
    reading = sc.SCALED_TESTS["blocks"].read(ctx, rows, swapped(*sc.arrays(rows, ctx)))
    assert not reading["as stated"] and reading["scale block of each position"][0] == 3


def test_extremes_e8m0():
    rows, d, _ = _run(MXF4, "extremes")
    assert _out(rows, d, "1*1, scales max*max") == 0x7F800000  # 2^254: overflow, to +inf (overflow='inf')
    assert _out(rows, d, "-1*1, scales max*max") == 0xFF800000
    assert _out(rows, d, "1*1, scales max*min") == 0x3F800000  # 2^127 2^-127 = 1
    assert _out(rows, d, "1*1, scales max*1") == 0x7F000000  # 2^127
    assert _out(rows, d, "1*1, scales min*1") == 0x00400000  # 2^-127 = 2^22 2^-149, an fp32 subnormal
    assert _out(rows, d, "1*1, scales min*min") == 0  # 2^-254 rounds toward zero
    assert _out(rows, d, "-1*1, scales min*min") == 0  # +0: rounded_zero='positive'
    assert _out(rows, d, "1*1, scales min*min, C=1") == 0x3F800000
    assert _out(rows, d, "1*1 scales max*max, C=max (overflow)") == 0x7F800000


def test_extremes_ue4m3_exact():
    rows, d, _ = _run(NVF4, "extremes")
    assert _out(rows, d, "amax*bmax, scales max*max") == bits(np.float32(36 * 448 * 448))  # 7225344, exact
    assert _out(rows, d, "1*1, scales min*min") == bits(np.float32(2.0**-18))  # min subnormal 2^-9, squared
    assert _out(rows, d, "1*1, scales max*min") == bits(np.float32(448 * 2.0**-9))
    assert _out(rows, d, "-amax*bmax, scales min*min") == bits(np.float32(-36 * 2.0**-18))


@pytest.mark.parametrize("m", [MXF4, NVF4], ids=["ue8m0", "ue4m3"])
def test_nan_scale_gives_the_canonical_nan(m):
    rows, d, reading = _run(m, "nan")
    assert rows and all(int(u) == 0x7FFFFFFF for u in bits(d))
    assert all("0x7fffffff" in v for v in reading.values())


def test_zero_scale_ue4m3_leaves_c():
    rows, d, _ = _run(NVF4, "zero")
    assert _out(rows, d, "scale of A 0, +1*1, C=1") == 0x3F800000
    assert _out(rows, d, "scale of B 0, amax*bmax, C=-1") == 0xBF800000
    assert _out(rows, d, "scales 0*0, -1*1, C=-0") == 0  # exact zero: +0 (exact_zero='positive')
    assert not any(r.label.startswith("scale") for r in sc.SCALED_TESTS["zero"].build(_ctx(MXF4)))  # e8m0: no 0


@pytest.mark.parametrize("m, F", [(MXF4, 35), (MXF4.replace(fraction_bits=34), 34), (MXF8, 25),
                                  (NVF4.replace(fraction_bits=37, output_rounding="rne"), 37)])
def test_precision_reads_F(m, F):
    assert _run(m, "precision")[2]["bits kept below the largest term (F)"] == F


@pytest.mark.parametrize("m, G", [(MXF4, 16), (_with(MXF4, scale_group=8), 8), (_with(MXF4, scale_group=32), 32),
                                  (MXF8, None), (_with(MXF4.replace(output_rounding="rne"), scale_group=8), 8)])
def test_group_reads_G(m, G):
    assert _run(m, "group", {"F": m.fraction_bits})[2]["group size (G)"] == G


@pytest.mark.parametrize("mode", ["TowardZero", "TiesToEven", "TowardNegative"])
def test_rounding_reads_the_mode(mode):
    m = MXF4.replace(output_rounding=mode)
    assert _run(m, "rounding", {"F": 35})[2]["modes"] == [mode]


def test_e_zero_reading_is_a_bound_or_the_value():
    assert _run(MXF4, "e_zero", {"F": 35})[2] == {"e_zero": None, "e_zero at most": 35 - 149}
    m = MXF4.replace(e_zero=-100)  # high enough to cut C = 2^(y+1) - ulp where y < -100 - 35 + 23
    assert _run(m, "e_zero", {"F": 35})[2]["e_zero"] == -100


# --- inference -------------------------------------------------------------------------------------------
def _same_on_random_rows(m1, m2, n=300, seed=5):
    return sc.disagreements(m1, m2, n, seed)


def test_probe_recovers_the_mxf4_preset():
    f = sc.probe_scaled("sim:B200:tcgen05.mxf4.block32", verify=200)
    assert f.verified and f.model() == MXF4
    assert f.readings["precision"]["bits kept below the largest term (F)"] == 35
    assert f.readings["group"]["group size (G)"] == 16


def test_probe_without_priors_recovers_a_variant_of_width_36():
    m = MXF4.replace(fraction_bits=36, name="F36")
    f = sc.probe_scaled(m, verify=200, priors="none")
    got = f.model()
    assert (got.fraction_bits, got.option("scale_group"), got.output_rounding) == (36, 16, m.output_rounding)
    assert _same_on_random_rows(got, m) == 0


def test_probe_rejects_a_black_box_outside_the_family():
    """Scaled products summed in binary64 and rounded to nearest once: no scaled-fused Model gives it."""
    def f(a, b, c, sa, sb):
        s = np.repeat(sa * sb, 32, axis=1)
        with np.errstate(all="ignore"):
            return np.float32(np.sum(a * b * s, axis=1) + c)

    found = sc.probe_scaled(f, "e2m1fn", k=64, scale_format="e8m0fnu", scale_block=32, verify=100, priors="none")
    assert not found.verified and "no scaled-fused Model" in found.verification["why"]
    with pytest.raises(ProbeError, match="no block-scaled Model passed"):
        found.model()


SLOW_CASES = [(m, p) for m in [*(job[3] for job in sim_jobs(["B200", "RTX 5090"], scaled=True)
                                 if job[1] in ("e2m1fn", "e4m3fn"))] for p in ("presets", "none")]


@pytest.mark.slow
@pytest.mark.parametrize("m, priors", SLOW_CASES, ids=[f"{m.name}-{p}" for m, p in SLOW_CASES])
def test_every_block_scaled_preset_recovered(m, priors):
    f = sc.probe_scaled(m, verify=300, priors=priors)
    got = f.model()
    if priors == "presets":
        assert got == m
    assert (got.fraction_bits, got.output_rounding, dict(got.options)) == \
        (m.fraction_bits, m.output_rounding, dict(m.options))
    assert _same_on_random_rows(got, m, n=300) == 0


VARIANTS = [MXF4.replace(fraction_bits=34), MXF4.replace(fraction_bits=37), _with(MXF4, scale_group=8),
            _with(MXF4, scale_group=32), MXF4.replace(output_rounding="rne"),
            NVF4.replace(fraction_bits=36, output_rounding="rne"), _with(MXF8, scale_group=8),
            MXF8.replace(output_rounding="rne")]


@pytest.mark.slow
@pytest.mark.parametrize("m", VARIANTS, ids=[m.summary() for m in VARIANTS])
def test_variants_recovered_without_priors(m):
    got = sc.probe_scaled(m, verify=300, priors="none").model()
    assert (got.fraction_bits, got.output_rounding, dict(got.options)) == \
        (m.fraction_bits, m.output_rounding, dict(m.options))
    assert _same_on_random_rows(got, m, n=300) == 0


# --- the sm_120a block-scaled mma.sync paths: layouts without a GPU ------------------------------------------
from blockfma.probes import blackwell as bw  # noqa: E402


def test_block_scale_ptx_names():
    assert bw.path("mma.mxf4nvf4.block16.ue4m3").ptx == (
        "mma.sync.aligned.kind::mxf4nvf4.block_scale.scale_vec::4X.m16n8k64.row.col.f32.e2m1.e2m1.f32.ue4m3")
    assert bw.path("mma.mxf4nvf4.block16.ue8m0").ptx.endswith("scale_vec::4X.m16n8k64.row.col.f32.e2m1.e2m1.f32.ue8m0")
    assert bw.path("mma.mxf4.block32").ptx == (
        "mma.sync.aligned.kind::mxf4.block_scale.scale_vec::2X.m16n8k64.row.col.f32.e2m1.e2m1.f32.ue8m0")
    assert bw.path("mma.mxf8f6f4.block32.e4m3").ptx == (
        "mma.sync.aligned.kind::mxf8f6f4.block_scale.scale_vec::1X.m16n8k32.row.col.f32.e4m3.e4m3.f32.ue8m0")
    for p in bw.BLOCK_SCALE_PATHS.values():  # each names a preset instruction of the RTX 5090
        m = p.preset()
        assert (m.option("scale_block"), m.option("scale_format"), m.block_width) == (p.scale_block, p.scale_format, p.k)
        src = bw.kernel_source(p)
        assert p.ptx in src and "%15, {0, 0};" in src
    with pytest.raises(ValueError, match="unknown block-scaled"):
        bw.path("mma.mxf4.block16")


@pytest.mark.parametrize("name", ["mma.mxf4.block32", "mma.mxf8f6f4.block32.e4m3"])
def test_fragments_cover_each_element_once_and_round_trip(name):
    p = bw.path(name)
    rng = np.random.default_rng(3)
    w = bw.element_bits(p)
    for op, shape in (("a", (2, 16, p.k)), ("b", (2, p.k, 8))):
        codes = rng.integers(0, 1 << w, size=shape).astype(np.uint32)
        regs = bw.pack_operand(p, codes, op)
        assert regs.shape == (2, 32, 4 if op == "a" else 2)
        assert np.array_equal(bw.unpack_operand(p, regs, op), codes)
        fm = bw._fragments(p, op).reshape(-1, 2)
        assert len({tuple(x) for x in fm}) == len(fm) == shape[1] * shape[2]


def test_fragment_places_by_hand():
    """Single elements placed where the PTX ISA's m16n8k64 / m16n8k32 figures put them."""
    p4, p8 = bw.path("mma.mxf4.block32"), bw.path("mma.mxf8f6f4.block32.e4m3")
    A = np.zeros((1, 16, 64), np.uint32)
    A[0, 9, 41] = 0xB  # row 9 = g + 8 with g = 1; k 41 in the second half: q = (41 - 32) // 8 = 1, nibble 1
    ra = bw.pack_operand(p4, A, "a")
    assert ra[0, 5, 3] == 0xB << 4 and np.count_nonzero(ra) == 1
    B = np.zeros((1, 64, 8), np.uint32)
    B[0, 7, 3] = 0x7  # column 3 = g, k 7: q = 0, nibble 7 of register 0
    rb = bw.pack_operand(p4, B, "b")
    assert rb[0, 12, 0] == 0x7 << 28 and np.count_nonzero(rb) == 1
    A8 = np.zeros((1, 16, 32), np.uint32)
    A8[0, 2, 21] = 0x38  # row 2, k 21: second half of K (register 2), q = 1, byte 1
    assert bw.pack_operand(p8, A8, "a")[0, 9, 2] == 0x38 << 8
    C = np.zeros((1, 16, 8), np.float32)
    C[0, 9, 2] = 1.0  # lane 4 g + q = 5 (g = 1, q = 1), register 2 (row g + 8, column 2 q)
    assert bw.pack_c(p4, C)[0, 5, 2] == 0x3F800000


def test_scale_lanes_and_bytes_by_hand():
    p = bw.path("mma.mxf4nvf4.block16.ue4m3")  # four scales a row: bytes 0..3
    SA = np.zeros((1, 16, 4), np.uint32)
    SA[0, 9] = [0x38, 0x40, 0x30, 0x28]  # row 9: lanes 4*1 + 1 (thread-id 0) and 4*1 + 2 + 1 (thread-id 1)
    r = bw.pack_scales(p, SA, "a")
    assert r[0, 5] == r[0, 7] == 0x28304038 and np.count_nonzero(r) == 2
    SB = np.zeros((1, 8, 4), np.uint32)
    SB[0, 3, 1] = 0x40  # column 3: lanes 12..15, byte 1
    r = bw.pack_scales(p, SB, "b")
    assert list(r[0, 12:16]) == [0x4000] * 4 and np.count_nonzero(r) == 4
    assert np.array_equal(bw.unpack_scales(p, bw.pack_scales(p, SA, "a"), "a", thread_id=1), SA)
    with pytest.raises(ValueError, match=r"\(T, 16, 4\)"):
        bw.pack_scales(p, SA[:, :, :2], "a")


def test_emulated_pipeline_passes_and_a_wrong_layout_fails():
    p = bw.path("mma.mxf4nvf4.block16.ue4m3")
    good = bw.EmulatedBlockScale(p.preset())
    assert bw.layout_check(p, device=good, tiles=1)["differ"] == 0

    def swapped(path, ra, rb, rc, rsa, rsb):  # B's two registers exchanged: the second half of K misplaced
        return good(path, ra, rb[:, :, ::-1].copy(), rc, rsa, rsb)

    report = bw.layout_check(p, device=swapped, tiles=1)
    assert report["differ"] > 0 and "tile 0" in report["first"]


def test_emulated_registers_give_the_preset_on_random_rows():
    """The data path of the hardware script without a GPU (rows -> tiles -> registers -> the preset read back
    through the PTX layouts -> D's registers -> rows) gives the preset's bits."""
    for name in ("mma.mxf4.block32", "mma.mxf8f6f4.block32.e2m1"):
        t = bw.simulated_target(name)
        t.CHUNK = 16  # several launches a call
        ctx = sc.ScaledContext.of(t)
        rows = sc.random_rows(ctx, 48, np.random.default_rng(2))
        want = bw.preset_target(name)(*rows)
        assert np.array_equal(bits(t(*rows)), bits(want))


@pytest.mark.slow
def test_probe_through_the_emulated_registers():
    t = bw.simulated_target("mma.mxf4nvf4.block16.ue4m3")
    f = sc.probe_scaled(t, verify=200)
    assert f.model() == bf.device("RTX 5090").model("e2m1fn", "fp32", "mma.mxf4nvf4.block16.ue4m3")


@pytest.mark.slow
def test_probe_hardware_script_simulates_the_rtx_5090(tmp_path):
    """scripts/probe_hardware.py --simulate RTX5090: the block-scaled section end to end, registers emulated."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    run = subprocess.run([sys.executable, str(root / "scripts" / "probe_hardware.py"), "--out", str(tmp_path),
                          "--simulate", "RTX5090", "--only", r"^mma\.mxf4\.block32$", "--scaled-verify", "200",
                          "--verify", "100", "--no-torch"], capture_output=True, text=True, timeout=600,
                         env={**__import__("os").environ, "PYTHONPATH": str(root / "src")})
    assert run.returncode == 0, run.stderr[-2000:]
    doc = json.loads((tmp_path / "probe-blockscaled.json").read_text())
    (entry,) = doc["paths"]
    assert entry["layout_check"]["differ"] == 0 and entry["verified"]
    assert entry["rows_differing_from_preset"] == 0


def test_probe_hardware_script_states_the_b200_gap(tmp_path):
    """On an sm_100 GPU the block-scaled section measures nothing and says why in probe-blockscaled.json."""
    import argparse
    import importlib.util
    import json
    import time
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "probe_hardware", Path(__file__).resolve().parent.parent / "scripts" / "probe_hardware.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    args = argparse.Namespace(only=None, budget=60.0, simulate=None, scaled_verify=100)
    said = []
    script.block_scaled(args, tmp_path, 100, {"gpu": "B200"}, time.time(), said.append)
    doc = json.loads((tmp_path / "probe-blockscaled.json").read_text())
    assert doc["paths"] == [] and "tcgen05.mma.block_scale kernels" in doc["missing"] and said
    script.block_scaled(args, tmp_path / "none", 90, {}, time.time(), said.append)  # an H100: no section, no file
    assert not (tmp_path / "none").exists()


# --- an independent black box: MMA-Sim's block-scaled instructions -------------------------------------------
def _mmasim_target(device, cfg):
    """MMA-Sim (tests/test_mx_scaled.py's call of it) as a callable black box: 8 dot products an instruction,
    on the diagonal of a 16 x 8 tile."""
    mx = pytest.importorskip("test_mx_scaled", reason="needs MMA-Sim and torch (tests/test_mx_scaled.py)")
    kind, fa, fb, block, fs = cfg
    k = 64 if kind != "mxf8f6f4" else 32

    def f(a, b, c, sa, sb):
        out = np.zeros(len(c), np.uint32)
        for s in range(0, len(c), 8):
            n = min(8, len(c) - s)
            i = np.arange(n)
            A, B, C = np.zeros((16, k)), np.zeros((k, 8)), np.zeros((16, 8), np.float32)
            SA, SB = np.ones((16, k // block)), np.ones((k // block, 8))
            A[:n], B[:, :n], C[i, i] = a[s:s + n], b[s:s + n].T, c[s:s + n]
            SA[:n], SB[:, :n] = sa[s:s + n], sb[s:s + n].T
            out[s:s + n] = mx.mmasim_d(device, cfg, A, B, C, SA, SB)[i, i]
        return out.view(np.float32)

    return sc.CallableScaledTarget(f, k, Formats.of(fa, fb, "fp32", "fp32"), fs, block, name=f"mmasim:{kind}")


def test_readings_of_mmasim():
    """F, G and the rounding read from MMA-Sim's nvf4 instruction (the feature tests alone, no inference)."""
    t = _mmasim_target("RTX 5090", ("mxf4nvf4", "e2m1fn", "e2m1fn", 16, "ue4m3"))
    ctx = sc.ScaledContext.of(t)
    read = {}
    for test in ("precision", "group"):
        rows = sc.SCALED_TESTS[test].build(ctx)
        read[test] = sc.SCALED_TESTS[test].read(ctx, rows, t(*sc.arrays(rows, ctx)))
        ctx.known["F"] = read["precision"]["bits kept below the largest term (F)"]
    assert ctx.known["F"] == 35 and read["group"]["group size (G)"] == 16


@pytest.mark.slow
@pytest.mark.parametrize("cfg, F, G", [
    (("mxf4nvf4", "e2m1fn", "e2m1fn", 16, "ue4m3"), 35, 16),
    (("mxf8f6f4", "e2m1fn", "e2m1fn", 32, "e8m0fnu"), 25, None),
    (("mxf4", "e2m1fn", "e2m1fn", 32, "e8m0fnu"), 35, 16)])
def test_probe_reads_mmasim(cfg, F, G):
    """The probe of MMA-Sim's RTX 5090 instruction, an implementation of its own, reads MMA-Sim's parameters
    (mmasim/arithmetic/fdpa.py: st_fdpa F = 25 for k = 32, gst_fdpa G = 16, F = 35 for k = 64; RZ; NaN scales
    give 0x7FFFFFFF) without the presets, and the Model it infers gives MMA-Sim's bits on fresh rows."""
    f = sc.probe_scaled(_mmasim_target("RTX 5090", cfg), verify=100, priors="none")
    m = f.model()
    assert (m.fraction_bits, m.option("scale_group"), m.output_rounding.name) == (F, G, "TowardZero")
    assert all("0x7fffffff" in v for k, v in f.readings["nan"].items() if "scale" in k)
