"""Library plans (issue 34 part 1): split-K decisions with their evidence, ``split_k=`` for every routed dtype,
``Emulation.explain``, strict refusal of unrecorded shapes, and mmaemu's fp8 split-K as an oracle (optional).

Oracles: ``bf.gemm`` with the numpy engine on each contiguous part, partial sums added here in numpy binary32,
numpy's float16 for the store into fp16 and C's addition; mmaemu 0.1.0 (hardware-validated on an H100 PCIe)
for cuBLASLt's fp8 split.  Results compared as bit patterns."""

from __future__ import annotations

import gzip
import importlib.util
import json
import sys
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import blockfma as bf  # noqa: E402
from blockfma.arguments import ArgumentError  # noqa: E402
from blockfma.evidence import Unbacked  # noqa: E402
from blockfma.torch import compute, orders  # noqa: E402
from blockfma.torch_switches import matmul_switches  # noqa: E402
from helpers import REPO  # noqa: E402

INT = {torch.float16: torch.int16, torch.float32: torch.int32}
H100_FP8 = bf.device("H100").model("e4m3fn", "fp32")
PROMOTED = H100_FP8.replace(c_entry="after", instruction_k=128)
ONE = torch.tensor(1.0)


def same_bits(x, y):
    assert x.dtype == y.dtype and x.shape == y.shape, (x.dtype, y.dtype, x.shape, y.shape)
    assert torch.equal(x.contiguous().view(INT[x.dtype]), y.contiguous().view(INT[y.dtype]))


def fp8(rows, k, seed, dtype=torch.float8_e4m3fn):
    """fp8 values over a wide exponent range, a large first column (the fp32 sums then round: a split matters)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, k, generator=g) * 2.0 ** torch.randint(-6, 5, (rows, k), generator=g)
    x[:, 0] = 448.0 if dtype == torch.float8_e4m3fn else 4096.0
    return x.clamp(-448, 448).to(dtype)


def parts_oracle(A, B, bounds, model):
    """numpy binary32 sum, in order, of bf.gemm's fp32 result of each [lo, hi) range of K."""
    total = np.zeros((A.shape[0], B.shape[1]), np.float32)
    for lo, hi in bounds:
        total = total + np.asarray(bf.gemm(A[:, lo:hi], B[lo:hi], model=model, backend="numpy"), np.float32)
    return total


def codes(t):
    """An fp8 tensor as float32 values (exact), for the numpy oracle."""
    return t.float().numpy()


# --- the decisions and their evidence ---------------------------------------------------------------------------
def test_decisions_say_their_source_and_a_device_other_than_the_records_has_none():
    h100, h200 = bf.torch.emulate("H100"), bf.torch.emulate("H200")
    with matmul_switches(torch, tf32=True):
        rec, other = h100.route(torch.float32).split_k.decide(16, 16, 64), h100.route(torch.float32).split_k
        alias = h200.route(torch.float32).split_k.decide(16, 16, 64)
    assert (rec.parts, rec.evidence.basis.value, rec.evidence.count) == (2, "recorded", 300)
    assert "H100 80GB HBM3, torch 2.11.0+cu130, CUDA 13.0" in rec.evidence.label
    unsplit = h100.route(torch.float16).split_k.decide(16, 16, 1024)  # fp16 was one chain at every recorded shape
    assert (unsplit.parts, unsplit.evidence.basis.value, unsplit.text) == (1, "recorded", "unsplit: one chain over K")
    for d, who in ((other.decide(16, 16, 4096), "H100 tf32"), (alias, "H200's tf32 GEMMs"),
                   (bf.torch.emulate("A100").route(torch.float16).split_k.decide(16, 16, 64), "A100's fp16")):
        assert (d.parts, d.evidence.basis.value) == (1, "assumed")
        assert f"no record for this shape ({who}" in d.evidence.source and "run unsplit" in d.evidence.source
    assert h100.route(torch.bfloat16).split_k.decide(16, 16, 1024).evidence.basis.value == "assumed"  # not probed
    over = bf.torch.emulate("H100", overrides={torch.float32: bf.device("H100").model("bf16", "fp32")})
    with matmul_switches(torch, tf32=True):  # operands scaled into bf16: the record's split of fp32 sums is not its
        assert over.route(torch.float32).parts(16, 16, 64) == 1


def test_strict_refuses_an_unrecorded_shape_naming_it_the_device_and_the_record():
    a = torch.ones(4, 64, dtype=torch.float16)
    with pytest.raises(Unbacked, match=r"of \(m, n, k\) = \(4, 3, 64\) in emulate\('H100'\) under strict=True: "
                                       r"the split-K plan .* no record for this shape \(H100 fp16; the records: "
                                       r"H100 80GB HBM3, torch 2.11.0\+cu130, CUDA 13.0\): run unsplit"):
        with bf.torch.emulate("H100", strict=True):
            a @ torch.ones(64, 3, dtype=torch.float16)
    with pytest.raises(Unbacked, match=r"given by split_k="):  # the user's plan is an assumption too
        with bf.torch.emulate("H100", strict=True, split_k={torch.float16: {(4, 3, 64): 2}}):
            a @ torch.ones(64, 3, dtype=torch.float16)


def test_unrecorded_shapes_run_unsplit_and_the_report_and_log_say_so():
    a, b = torch.ones(4, 64, dtype=torch.float16), torch.ones(64, 3, dtype=torch.float16)
    with bf.torch.emulate("H100") as emu:
        a @ b
    (op,) = emu.log
    assert [d.shape for d in op.plans] == [(4, 3, 64)] and op.evidence[-1].basis.value == "assumed"
    row = emu.report().splitlines()[-1]
    assert " assumed " in row and row.endswith("; unsplit: one chain over K (assumed)")


def test_recorded_table_is_the_hardware_record():
    """Each recorded decision read from the record here (split: a verified contiguous split with sequential
    partial sums; unsplit: one chain), and the loader's reading of the same file."""
    with gzip.open(REPO / "data" / "hardware" / "h100-torch-order.json.gz") as f:
        survey = json.load(f)["orders"]
    found: dict = {}
    for r in survey["runs"]:
        ok = (r.get("verify_preset") or r.get("verify_fp32") or {}).get("ok")
        parts = {"split-k": r.get("ways"), "blocks": 1, "sequential": 1}.get(r.get("kind"))
        if ok and parts and r.get("combine") in (None, "sequential"):
            key = ("H100", "tf32" if r.get("allow_tf32") else r["dtype"])
            found.setdefault(key, {})[(r["m"], r["n_cols"], r["n"])] = parts
    assert found == orders.RECORDED == _script().from_survey(survey, "H100")
    assert survey["environment"] == {"torch": "2.11.0+cu130", "cuda": "13.0", "device": "cuda", "capability": "9.0",
                                     "gpu": "NVIDIA H100 80GB HBM3", "preset": "H100"}
    assert all(w in orders.RECORD for w in ("H100 80GB HBM3", "torch 2.11.0+cu130", "CUDA 13.0"))


# --- split_k= for every routed dtype ------------------------------------------------------------------------------
def test_an_fp16_split_through_the_h100_cublas_model_is_cublas_split():
    """fp32 partial sums by the model's chain of 16-blocks from +0, added in fp32, stored to fp16, then C in fp16."""
    g = np.random.default_rng(4)
    A, B = g.standard_normal((5, 96)) / 16, g.standard_normal((96, 3)) / 16
    A[:, 0], B[0], A[:, -1], B[-1] = 256.0, 256.0, -256.0, 256.0  # 2^16 and its negative: the fp32 sums round
    A, B = A.astype(np.float16), B.astype(np.float16)
    C = g.standard_normal((5, 3)).astype(np.float16)
    C[0, 0] = -0.0
    with bf.torch.emulate("H100", split_k={"fp16": {(5, 3, 96): 4}}):
        got = torch.addmm(torch.from_numpy(C), torch.from_numpy(A), torch.from_numpy(B))
        whole = torch.from_numpy(A[:4]) @ torch.from_numpy(B[:, :3])  # another shape: unsplit
    s = parts_oracle(A, B, [(0, 24), (24, 48), (48, 72), (72, 96)], bf.device("H100").model("fp16", "fp32"))
    same_bits(got, torch.from_numpy(s.astype(np.float16) + C))
    cublas = bf.device("H100").instruction("cublas").models[("fp16", "fp16")]
    same_bits(whole, torch.from_numpy(np.asarray(bf.gemm(A[:4], B, model=cublas, backend="numpy"))))
    unsplit = torch.from_numpy(np.asarray(bf.gemm(A, B, C, model=cublas, backend="numpy")))
    assert not torch.equal(got, unsplit)  # the split changes bits here


def test_one_part_of_the_split_is_the_models_own_epilogue():
    """compute.split_k with one part gives the route's unsplit bits: the model's fp32 form, the store, C."""
    g = torch.Generator().manual_seed(9)
    a = torch.randn(6, 80, generator=g).mul(2.0 ** torch.randint(-10, 10, (6, 80), generator=g)).half()
    b, c = torch.randn(80, 5, generator=g).half(), torch.randn(6, 5, generator=g).half()
    c[0, :2] = torch.tensor([-0.0, float("nan")])
    a[1, 3] = float("inf")
    for dev, dtype in (("H100", torch.float16), ("H100", torch.bfloat16), ("MI300X", torch.float16)):
        emu = bf.torch.emulate(dev, backend="numpy")
        route = emu.route(dtype)
        x, y, z = a.to(dtype), b.to(dtype), c.to(dtype)
        one = compute.split_k(emu._whole, x, y, z, route, 1)
        want = emu._whole(x, y, z, route)
        assert torch.equal(one.view(torch.int16), want.view(torch.int16)), (dev, dtype)


def test_an_fp8_split_cuts_128_wide_k_tiles_with_and_without_fast_accumulation():
    a, b = fp8(4, 640, 1), fp8(3, 640, 2, torch.float8_e5m2).t()
    plan = {(torch.float8_e4m3fn, torch.float8_e5m2): {(4, 3, 640): 3}}  # 5 tiles: 2 + 2 + 1
    mixed = bf.device("H100").model("e4m3fn*e5m2", "fp32")
    for fast, model in ((True, mixed), (False, mixed.replace(c_entry="after", instruction_k=128))):
        with bf.torch.emulate("H100", split_k=plan, backend="numpy") as emu:
            got = torch._scaled_mm(a, b, ONE, ONE, out_dtype=torch.float32, use_fast_accum=fast)
        want = parts_oracle(codes(a), codes(b), [(0, 256), (256, 512), (512, 640)], model)
        same_bits(got, torch.from_numpy(want))
        assert emu.log[0].plans[0].text.startswith("split-K: K cut into 3 contiguous parts of 128-wide k-tiles")


@pytest.mark.parametrize("key,want", [
    (torch.float8_e4m3fn, "e4m3fn"), ("e5m2", "e5m2"), ((torch.float8_e5m2, torch.float8_e4m3fn), "e5m2*e4m3fn"),
    ("e4m3fn*e5m2", "e4m3fn*e5m2"), ((torch.float8_e4m3fn, torch.float8_e4m3fn), "e4m3fn"), ("half", "fp16"),
    (torch.bfloat16, "bf16"), ("float32", "fp32")])
def test_split_k_keys(key, want):
    from blockfma.torch.routes import split_key

    assert split_key(key) == want


@pytest.mark.parametrize("device,kw,match", [
    ("V100", dict(split_k={torch.float8_e4m3fn: {(4, 3, 64): 2}}), r"^split_k=\{torch.float8_e4m3fn: \.\.\.\}: "
                                                                   r"V100 has no e4m3fn -> fp32 matrix model"),
    ("H100", dict(split_k={torch.float8_e5m2: {(4, 3, 64): 65}}), "1 <= parts <= k"),
    ("H100", dict(split_k={torch.int8: {(4, 3, 64): 2}}), r"^split_k=\{torch.int8: \.\.\.\}: keys must be "
                                                          r"torch.float16, .*\(torch.float8_e4m3fn"),
    ("H100", dict(split_k={"e4m3fn*fp16": {(4, 3, 64): 2}}), r"^split_k=\{'e4m3fn\*fp16': \.\.\.\}: keys must"),
])
def test_bad_split_k(device, kw, match):
    with pytest.raises(ArgumentError, match=match):
        bf.torch.emulate(device, **kw)


# --- explain ---------------------------------------------------------------------------------------------------------
def test_explain_a_shape_and_a_logged_op():
    emu = bf.torch.emulate("H100", split_k={torch.float8_e4m3fn: {(16, 256, 16384): 6}}, backend="numpy")
    text = emu.explain((16, 256, 16384), torch.float8_e4m3fn, fast_accum=True)
    assert "e4m3fn: H100 e4m3fn->fp32" in text and "use_fast_accum" in text
    assert "plan of (16, 256, 16384): split-K: K cut into 6 contiguous parts of 128-wide k-tiles" in text
    assert text.endswith("[assumed: given by split_k=]")
    with matmul_switches(torch, tf32=False):
        assert "[recorded: h100-torch-order.json.gz" in emu.explain((16, 16, 1024), "fp32")
    with emu:
        torch.ones(4, 8) @ torch.ones(8, 2)
    assert emu.explain(emu.log[-1]).splitlines()[-1].startswith("  plan of (4, 2, 8): unsplit: one chain over K "
                                                                "[assumed: no record for this shape")


@pytest.mark.parametrize("args,match", [
    (((4, 3),), r"^op_or_shape=\(4, 3\): must be an \(m, n, k\) tuple"),
    (("mm",), r"^op_or_shape='mm': must be"), (((4, 3, -1), "fp16"), "ints >= 0"),
    (((4, 3, 8),), r"^dtype=None: an \(m, n, k\) shape needs the dtype"),
    (((4, 3, 8), torch.int8), r"^dtype=torch.int8: must be torch.float16"),
])
def test_explain_bad_input(args, match):
    with pytest.raises(ArgumentError, match=match):
        bf.torch.emulate("H100").explain(*args)


def test_explain_of_a_dtype_the_device_lacks_names_dtype():
    with pytest.raises(ArgumentError, match=r"^dtype=torch.float8_e5m2: V100 has no e5m2 -> fp32 matrix model"):
        bf.torch.emulate("V100").explain((4, 3, 8), torch.float8_e5m2)


# --- recording plans: the script's probe path on the CPU, a library of known plans as the target ---------------
def _script():
    spec = importlib.util.spec_from_file_location("record_plans", REPO / "scripts" / "record_plans.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["record_plans"] = module
    spec.loader.exec_module(module)
    return module


def test_record_plans_finds_a_known_libraries_split_and_the_loader_reads_it():
    rp = _script()
    library = bf.torch.emulate("H100", split_k={"fp32": {(8, 4, 256): 4}, torch.float8_e4m3fn: {(8, 16, 512): 2}},
                               backend="numpy")

    def target(kind, a, b, fast):
        with library:
            return rp.library_call(kind, a, b, fast)

    survey = rp.record_plans(target, "H100", shapes=[(8, 4, 256), (8, 16, 512)], kinds=["fp32", "e4m3fn"],
                             parts=range(1, 9), backend="numpy")
    runs = {(r["dtype"], r["m"], r["n_cols"], r["n"], r.get("use_fast_accum")): r.get("ways") for r in survey["runs"]}
    assert runs[("fp32", 8, 4, 256, None)] == 4 and runs[("e4m3fn", 8, 16, 512, True)] == 2
    assert runs[("fp32", 8, 16, 512, None)] == 1 and runs[("e4m3fn", 8, 4, 256, True)] == 1
    assert runs[("e4m3fn", 8, 16, 512, False)] == 2
    assert runs[("e4m3fn", 8, 4, 256, False)] is None  # two tiles, slow: one tile per part sums as unsplit does
    plans = rp.from_survey(survey, "H100")
    assert plans[("H100", "fp32")] == {(8, 4, 256): 4, (8, 16, 512): 1}
    assert plans[("H100", "e4m3fn")][(8, 16, 512)] == 2


# --- mmaemu 0.1.0: cuBLASLt's fp8 split-K on an H100 PCIe (a peer: a test oracle, never the implementation) ------
def _mmaemu():
    if importlib.util.find_spec("mmaemu") is None:
        pytest.skip("mmaemu is not installed (make torch installs mmaemu==0.1.0 with --no-deps)")
    import mmaemu

    return mmaemu


def _ours_and_theirs(m, n, k, fast, splitk, parts):
    mmaemu = _mmaemu()
    a, b = fp8(m, k, 11), fp8(n, k, 12).t()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # mmaemu's maturity and verification notes
        theirs = mmaemu.scaled_mm(a, b, ONE, ONE, out_dtype=torch.float32, use_fast_accum=fast, splitk=splitk,
                                  backend="reference")
    with bf.torch.emulate("H100", split_k={torch.float8_e4m3fn: {(m, n, k): parts}}, backend="numpy"):
        ours = torch._scaled_mm(a, b, ONE, ONE, out_dtype=torch.float32, use_fast_accum=fast)
    with bf.torch.emulate("H100", backend="numpy"):
        unsplit = torch._scaled_mm(a, b, ONE, ONE, out_dtype=torch.float32, use_fast_accum=fast)
    return ours, theirs, unsplit


@pytest.mark.parametrize("shape,parts", [((16, 256, 16384), 6), ((16, 64, 1024), 1)])
def test_mmaemu_table(shape, parts):
    """The issue's shape splits in 6 contiguous parts on mmaemu's H100 PCIe (torch's 1 MiB workspace), with and
    without fast accumulation; 16 x 64 x 1024 is unsplit there."""
    _mmaemu()
    from mmaemu.platform.splitk_table import resolve_splitk

    for fast in (True, False):
        d = resolve_splitk(*shape, a_dtype=torch.float8_e4m3fn, b_dtype=torch.float8_e4m3fn,
                           out_dtype=torch.float32, use_fast_accum=fast, profile="hopper")
        assert (d.S, d.scheme, d.source) == (parts, "contiguous" if parts > 1 else "none", "table")


@pytest.mark.parametrize("fast", [True, False])
def test_fp8_six_part_split_is_mmaemus_bit_for_bit(fast):
    """The issue's cut (K = 16384 in 6 parts of 22, ..., 18 k-tiles) on 16 x 16 rows, the split given to both."""
    ours, theirs, unsplit = _ours_and_theirs(16, 16, 16384, fast, (6, "contiguous"), 6)
    same_bits(ours, theirs)
    assert not torch.equal(unsplit, theirs)


@pytest.mark.parametrize("fast", [True, False])
def test_fp8_unsplit_shape_is_mmaemus_bit_for_bit(fast):
    """16 x 64 x 1024: mmaemu's table records numSplitsK 1 (test_mmaemu_table); ours has no record: unsplit."""
    _, theirs, unsplit = _ours_and_theirs(16, 64, 1024, fast, 1, 1)
    same_bits(unsplit, theirs)


@pytest.mark.slow
@pytest.mark.parametrize("fast", [True, False])
def test_fp8_issue_shape_is_mmaemus_bit_for_bit(fast):
    """16 x 256 x 16384, mmaemu's split from its table (6 parts), ours from split_k (seconds on the CPU)."""
    ours, theirs, unsplit = _ours_and_theirs(16, 256, 16384, fast, "auto", 6)
    same_bits(ours, theirs)
    assert not torch.equal(unsplit, theirs)
