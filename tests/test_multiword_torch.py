"""multiword.matmul on real units through torch (``backend="hardware"``, :mod:`blockfma.multiword.hardware`):
the CPU path in every run (torch's fp32 matmul of the words), the CUDA path (tensor cores, fp32 output)
in the tests marked ``gpu``, which skip with a reason where torch sees no GPU.  The hardware's bits are not
the simulator's (cuBLAS picks its own order and adds C in its epilogue), so results are held to the exact
product: exactly where no rounding can occur, within the method's bound elsewhere."""

from __future__ import annotations

import importlib.util
import json
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from blockfma import cli
from blockfma import multiword as mw
from blockfma.multiword import hardware as hw
from blockfma.torch_switches import readable

ROOT = Path(__file__).resolve().parents[1]
HAVE_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="backend='hardware' needs torch: pip install 'blockfma[torch]'")
HAVE_CUDA = False
HAVE_FP32_PRECISION = False  # torch's per-backend fp32 precision API (torch >= 2.9)
if HAVE_TORCH:
    import torch

    HAVE_CUDA = torch.cuda.is_available()
    HAVE_FP32_PRECISION = hasattr(torch._C, "_get_fp32_precision_getter")
needs_cuda = pytest.mark.skipif(not HAVE_CUDA, reason="no CUDA GPU visible to torch")
CPU = "hardware:cpu"

MULTIWORD = ["double-fp16", "double-bf16", "triple-bf16", "markidis", "ootomo", "3xtf32", "4xtf32", "bf16x9"]
LOW = ["fp16", "bf16", "tf32"] + MULTIWORD


def _data(m, n, q, dist, seed=0):
    rng = np.random.default_rng(seed)
    if dist == "uniform01":
        A, B = 1.0 - rng.random((m, n)), 1.0 - rng.random((n, q))
    else:
        A, B = 0.5 - rng.random((m, n)), 0.5 - rng.random((n, q))
    return A.astype(np.float32).astype(np.float64), B.astype(np.float32).astype(np.float64)


def _quiet(fn, *args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mw.RangeWarning)
        return fn(*args, **kw)


def _bits(x):
    return np.asarray(x, dtype=np.float64).view(np.uint64)


def _switch_state():
    """Every switch matmul_flags touches, as this torch reads it (never the legacy allow_tf32 where the new
    API exists: torch refuses that read once the two are mixed)."""
    m = torch.backends.cuda.matmul
    get = getattr(torch._C, "_get_fp32_precision_getter", None)
    state = {}
    if get is not None:
        for b, o in (("generic", "all"), ("cuda", "all"), ("cuda", "matmul"), ("mkldnn", "all"), ("mkldnn", "matmul")):
            state[f"{b}.{o}"] = get(b, o)
    else:
        state["allow_tf32"] = m.allow_tf32
    for name in ("allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction",
                 "allow_fp16_reduced_precision_reduction_split_k", "allow_bf16_reduced_precision_reduction_split_k",
                 "allow_fp16_accumulation"):
        state[name] = readable(m, name)
    return state


# --- the CPU path ------------------------------------------------------------------------------------------
@needs_torch
@pytest.mark.parametrize("method,dtype", [("fp32", "float32"), ("fp64", "float64")])
def test_baselines_are_torchs_matmul_bit_for_bit(method, dtype):
    A, B = _data(40, 72, 24, "uniform-half", seed=1)
    A[0, 0] = 0.1  # not an fp32 value: the baseline rounds the inputs to fp32 first, as numpy's does
    got, info = mw.matmul(A, B, method=method, backend=CPU, return_info=True)
    dt = getattr(torch, dtype)
    want = torch.mm(torch.from_numpy(A).to(dt), torch.from_numpy(B).to(dt)).numpy().astype(np.float64)
    assert got.dtype == np.float64 and np.array_equal(_bits(got), _bits(want))
    assert info["hardware"]["device"] == "cpu" and info["calls"] == 1 and info["unit_seconds"] >= 0


@needs_torch
@pytest.mark.parametrize("dist", ["uniform01", "uniform-half"])
@pytest.mark.parametrize("method", LOW)
def test_methods_on_torch_cpu_are_within_their_bounds(method, dist):
    n = 160
    A, B = _data(24, n, 20, dist, seed=2)
    C, info = _quiet(mw.matmul, A, B, method=method, backend=CPU, return_info=True)
    assert C.shape == (24, 20) and C.dtype == np.float64 and np.isfinite(C).all()
    assert np.array_equal(C, C.astype(np.float32)), "the unit's output is fp32"
    err = mw.errors(C, mw.reference(A, B, exact=True), A, B)["componentwise"]
    assert err <= mw.bound(method, n), (err, mw.bound(method, n))
    assert info["calls"] == mw.METHODS[method].n_products and info["hardware"]["path"] == "fp32"


@needs_torch
@pytest.mark.parametrize("method", LOW + ["fp32", "fp64", "ozaki1", "ozaki2"])
def test_integer_data_gives_the_exact_product(method):
    """Small integers: every word, product and sum is exact, so any slip in order, chaining or scaling shows."""
    rng = np.random.default_rng(3)
    A, B = rng.integers(-8, 9, (12, 48)).astype(float), rng.integers(-8, 9, (48, 10)).astype(float)
    assert np.array_equal(mw.matmul(A, B, method=method, backend=CPU), A @ B)


@needs_torch
@pytest.mark.parametrize("method", MULTIWORD)
def test_two_word_data_gives_the_exact_product(method):
    """A = i + j 2^-12 (15 bits: two words of fp16, bf16 or tf32 hold it exactly), B integers (one word): the
    dropped products vanish and every sum is exact in fp32, so each multiword method must be exact; the
    scaled residuals of ootomo and the residual products are exercised."""
    rng = np.random.default_rng(4)
    A = rng.integers(-4, 5, (12, 32)) + rng.integers(-4, 5, (12, 32)) * 2.0**-12
    B = rng.integers(-4, 5, (32, 10)).astype(float)
    assert np.array_equal(mw.matmul(A, B, method=method, backend=CPU), A @ B)


@needs_torch
@pytest.mark.parametrize("method", ["ozaki1", "ozaki2"])
def test_ozaki_on_torch_int_mm_equals_the_exact_unit(method):
    """torch._int_mm is an exact int8 unit, so the scheme gives the same bits as with the exact unit."""
    A, B = _data(20, 96, 18, "uniform-half", seed=5)
    A, B = A + 2.0**-40 * np.arange(A.size).reshape(A.shape), B  # fp64 data
    got, info = mw.matmul(A, B, method=method, backend=CPU, return_info=True)
    assert np.array_equal(_bits(got), _bits(mw.matmul(A, B, method=method)))
    assert "torch._int_mm" in info["unit"] and info["calls"] > 0 and info["hardware"]["path"] == "_int_mm"
    with pytest.raises(ValueError, match=r"unit=<function exact_unit.*and backend='hardware' both pick the int8 unit"):
        mw.matmul(A, B, method=method, backend=CPU, unit=mw.ozaki.exact_unit)


@needs_torch
def test_info_names_the_hardware():
    A, B = _data(8, 16, 8, "uniform-half")
    _, info = mw.matmul(A, B, method="3xtf32", backend=CPU, return_info=True)
    assert info["hardware"]["device"] == "cpu" and info["hardware"]["name"] and info["hardware"]["torch"]
    assert info["unit"].startswith(info["hardware"]["name"]) and info["calls"] == 3 and info["unit_seconds"] >= 0
    assert info["accumulate"] == "inside" and info["products"] == mw.METHODS["3xtf32"].products


# --- the switches ------------------------------------------------------------------------------------------
@needs_torch
@pytest.mark.parametrize("method,tf32", [("fp16", False), ("3xtf32", True), ("fp32", False)])
def test_switches_during_the_call_and_restored_after(method, tf32, monkeypatch):
    before = _switch_state()
    seen = []
    real_mm, real_addmm = torch.mm, torch.addmm

    def spy(real):
        def call(*args, **kw):
            seen.append(_switch_state())
            return real(*args, **kw)
        return call

    monkeypatch.setattr(torch, "mm", spy(real_mm))
    monkeypatch.setattr(torch, "addmm", spy(real_addmm))
    A, B = _data(8, 16, 8, "uniform-half")
    _quiet(mw.matmul, A, B, method=method, backend=CPU)
    assert seen and _switch_state() == before
    for state in seen:
        assert state["allow_fp16_reduced_precision_reduction"] in (False, None)
        assert state["allow_bf16_reduced_precision_reduction"] in (False, None)
        assert state["allow_fp16_accumulation"] in (False, None)
        if "cuda.matmul" in state:
            assert state["cuda.matmul"] == ("tf32" if tf32 else "ieee") and state["mkldnn.matmul"] == "ieee"
        else:
            assert state["allow_tf32"] is tf32


@needs_torch
def test_switches_restored_after_an_exception(monkeypatch):
    before = _switch_state()

    def broken(*args, **kw):
        raise RuntimeError("CUBLAS_STATUS_EXECUTION_FAILED when calling cublasGemmEx\nmore lines from torch")

    monkeypatch.setattr(torch, "addmm", broken)
    A, B = _data(8, 16, 8, "uniform-half")
    one_line = r"^torch's tf32 matmul on cpu failed: CUBLAS_STATUS_EXECUTION_FAILED[^\n]*$"
    with pytest.raises(RuntimeError, match=one_line):
        mw.matmul(A, B, method="3xtf32", backend=CPU)
    assert _switch_state() == before


@needs_torch
@pytest.mark.skipif(HAVE_TORCH and not HAVE_FP32_PRECISION, reason="this torch has no per-backend fp32 precision")
@pytest.mark.parametrize("setting", ["generic", "cuda-matmul", "legacy-allow-tf32"])
def test_a_users_tf32_setting_survives_the_call(setting):
    """Restoring must not pin an inherited value (a later change of the parent must still reach cuda
    matmuls), nor break the legacy readers of a user who set allow_tf32."""
    get, put = torch._C._get_fp32_precision_getter, torch._C._set_fp32_precision_setter
    old = {k: get(*k) for k in (("generic", "all"), ("cuda", "matmul"))}
    try:
        if setting == "generic":
            torch.backends.fp32_precision = "tf32"
        elif setting == "cuda-matmul":
            torch.backends.cuda.matmul.fp32_precision = "tf32"
        else:
            torch.backends.cuda.matmul.allow_tf32 = True
        before = _switch_state()
        A, B = _data(8, 16, 8, "uniform-half")
        mw.matmul(A, B, method="fp32", backend=CPU)
        mw.matmul(A, B, method="3xtf32", backend=CPU)
        assert _switch_state() == before
        if setting == "legacy-allow-tf32":
            assert torch.backends.cuda.matmul.allow_tf32 is True
            assert torch.get_float32_matmul_precision() == "high"
        else:
            torch.backends.fp32_precision = "ieee"
            assert torch.backends.cuda.matmul.fp32_precision == ("ieee" if setting == "generic" else "tf32")
    finally:
        for (b, o), v in old.items():
            put(b, o, v)


# --- errors ------------------------------------------------------------------------------------------------
@needs_torch
def test_clear_errors():
    A, B = _data(4, 8, 4, "uniform-half")
    with pytest.raises(ValueError, match="^backend='hardware': tf64 needs a unit with exact fp32 x fp32 products "
                                         ".*; pass backend='auto'$"):
        mw.matmul(A, B, method="tf64", backend="hardware")
    with pytest.raises(ValueError, match="^device='V100': picks a simulated unit, and backend='hardware' runs real"):
        mw.matmul(A, B, method="fp16", backend=CPU, device="V100")
    with pytest.raises(ValueError, match="^backend='hardware:nowhere': names no real unit; use 'hardware'"):
        mw.matmul(A, B, method="fp16", backend="hardware:nowhere")
    for old, new in (("torch", "hardware"), ("Torch:CPU", "hardware:cpu"), ("torch:cuda:1", "hardware:cuda:1")):
        with pytest.raises(ValueError, match=f"^backend='{old}': is the old name .*; pass backend='{new}'$"):
            mw.matmul(A, B, method="fp16", backend=old)
    with pytest.raises(ValueError, match="runs fp16, bf16 and tf32 words"):
        mw.matmul(A, B, method="mmm", p=2, low="e4m3", backend=CPU)
    with pytest.raises(ValueError, match=r"^A\[0, 0\] = 0.1 is not a finite fp16 value; round it first"):
        hw.TorchUnit("fp16", CPU).gemm([[0.1]], [[1.0]])
    if not HAVE_CUDA:
        with pytest.raises(ValueError, match="needs a CUDA GPU.*; pass backend='hardware:cpu'"):
            mw.matmul(A, B, method="fp16", backend="hardware:cuda")
    assert hw.is_hardware("Hardware:CPU") and not hw.is_hardware("cuda") and not hw.is_hardware(None)
    assert not hw.is_hardware("torch")


def test_missing_torch_gives_the_install_hint(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    A, B = _data(4, 8, 4, "uniform-half")
    with pytest.raises(ImportError, match=r"^backend='hardware' needs PyTorch, which is not installed: "
                                          r"pip install 'blockfma\[torch\]'$"):
        mw.matmul(A, B, method="fp16", backend="hardware")
    assert np.array_equal(mw.matmul(A, B, method="fp32"), (A.astype(np.float32) @ B.astype(np.float32)))
    assert cli.main(["multiword", "fp16", "--n", "8", "--backend", "hardware", "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("pip install 'blockfma[torch]'") and "\n" not in err


@needs_torch
def test_cli_multiword_runs_on_torch(capsys):
    assert cli.main(["multiword", "3xtf32", "--n", "16", "--backend", CPU, "-q"]) == 0
    out = capsys.readouterr().out
    assert "3xtf32" in out and "(cpu)" in out


# --- the benchmark -----------------------------------------------------------------------------------------
def _bench():
    """benchmarks/bench_multiword_gpu.py as a module (it is a script, not part of the package)."""
    spec = importlib.util.spec_from_file_location("bench_multiword_gpu", ROOT / "benchmarks" / "bench_multiword_gpu.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


@needs_torch
def test_benchmark_script_writes_its_record(tmp_path, capsys):
    bench = _bench()
    out = tmp_path / "speed.json"
    assert bench.main(["--n", "32", "--repeat", "1", "--backend", CPU, "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "t/SGEMM" in text and "aim: 3xTF32" in text and "not measured: needs n >= 8192" in text
    record = json.loads(out.read_text())
    assert set(record) == {"what", "timing", "metadata", "settings", "runs", "rows", "aims"}
    assert record["settings"]["n"] == [32] and len(record["runs"]) == 1
    meta = record["metadata"]
    assert meta["device"] == "cpu" and meta["torch"] == torch.__version__ and meta["date"] and "commit" in meta
    methods = bench.METHODS + bench.NATIVE
    assert [(r["method"], r["distribution"]) for r in record["rows"]] == [
        (m, d) for d in ("uniform01", "uniform-half") for m in methods]
    for r in record["rows"]:
        assert r["n"] == 32 and r["seconds"] > 0 and r["device_seconds"] > 0 and r["reference"] == "exact"
        assert r["tflops"] == pytest.approx(2 * 32**3 / r["seconds"] / 1e12)
        assert r["t_sgemm"] == pytest.approx(r["seconds"] / r["sgemm_seconds"])
        assert 0 <= r["componentwise"] < (1e-14 if r["data"] == "fp64" else 1e-2)
        assert r["replay_equals_result"] in ((True,) if r["method"] in mw.METHODS else (None,))
        assert r["equals_ozaki2"] is (True if r["method"] == "ozaki2-unfused" else None)  # checked, and equal
    assert [(a["method"], a["distribution"]) for a in record["aims"]] == [("3xtf32", "uniform01"),
                                                                         ("3xtf32", "uniform-half")]
    # --merge: a second run measures one method again; the other rows stay, the runs are listed
    assert bench.main(["--n", "32", "--repeat", "1", "--backend", CPU, "--out", str(out), "--merge",
                       "--methods", "3xtf32", "--dists", "uniform01", "--e2e-max", "16"]) == 0
    merged = json.loads(out.read_text())
    assert len(merged["runs"]) == 2 and len(merged["rows"]) == len(record["rows"])
    again = [r for r in merged["rows"] if r["method"] == "3xtf32" and r["distribution"] == "uniform01"]
    assert again[0]["warm_up_timed"] and not record["rows"][0]["warm_up_timed"]
    assert bench.gpu_slug("NVIDIA H100 80GB HBM3") == "h100"
    assert bench.gpu_slug("NVIDIA GeForce RTX 4090") == "rtx-4090"
    assert bench.gpu_slug("NVIDIA A100-SXM4-80GB") == "a100"


# --- on a GPU ------------------------------------------------------------------------------------------------
@pytest.mark.gpu
@needs_cuda
def test_cuda_fp16_output_is_fp32_not_fp16():
    """1 + 2^-12 is no fp16 value: an fp16 output would round it; the unit's fp32 output keeps it."""
    A = np.array([[1.0, 1.0, 1.0]])
    B = np.array([[1.0], [2.0**-13], [2.0**-13]])
    C, info = mw.matmul(A, B, method="fp16", backend="hardware:cuda", return_info=True)
    assert C[0, 0] == 1 + 2.0**-12 and info["hardware"]["path"] == "out_dtype"
    assert info["hardware"]["name"] == torch.cuda.get_device_name() and info["hardware"]["compute_capability"]


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("method", LOW + ["fp32"])
def test_cuda_methods_within_their_bounds(method):
    n = 1024
    A, B = _data(64, n, 64, "uniform-half", seed=6)
    C = _quiet(mw.matmul, A, B, method=method, backend="hardware:cuda")
    err = mw.errors(C, mw.reference(A, B, exact=True), A, B)["componentwise"]
    assert np.isfinite(C).all() and err <= mw.bound(method, n), (err, mw.bound(method, n))
    if method == "fp32":
        assert err < 1e-5  # TF32 (2^-11) would be far above SGEMM's error: the switch was off


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("method", ["ozaki1", "ozaki2"])
def test_cuda_ozaki_equals_the_exact_unit(method):
    A, B = _data(64, 512, 48, "uniform-half", seed=7)
    got = mw.matmul(A, B, method=method, backend="hardware:cuda")
    assert np.array_equal(_bits(got), _bits(mw.matmul(A, B, method=method)))


@pytest.mark.gpu
@needs_cuda
def test_cuda_benchmark_runs(tmp_path, capsys):
    bench = _bench()
    out = tmp_path / "speed.json"
    assert bench.main(["--n", "256", "--repeat", "1", "--methods", "fp16,3xtf32,ozaki2,ozaki2-unfused", "--out",
                       str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["metadata"]["name"] == torch.cuda.get_device_name() and record["metadata"]["cuda"]
    rows = {(r["method"], r["distribution"]): r for r in record["rows"]}
    assert rows[("fp16", "uniform01")]["unit"].endswith("torch.mm(out_dtype=float32)")
    assert all(r["componentwise"] < 1e-2 for r in record["rows"])
    assert rows[("ozaki2", "uniform01")]["unit"].endswith("fused (Triton)")  # where Triton runs the GPU
    assert all(r["equals_ozaki2"] for r in record["rows"] if r["method"] == "ozaki2-unfused")
