"""blockfma.experiments.multiword (the multiword figures as rows), blockfma.plot and their reproductions
(``blockfma reproduce``), at tiny sizes: the row schema, determinism, the CSV round trip, the RangeWarning
count, the seeds' qualitative findings on small problems, and the plots (skipped without matplotlib)."""

from __future__ import annotations

import math
import sys
import warnings

import numpy as np
import pytest

import blockfma as bf
from blockfma import plot
from blockfma.experiments import multiword as mw
from blockfma.experiments import reproduce as rp
from blockfma.multiword import RangeWarning, split

NO_MPL = "matplotlib is not installed (pip install 'blockfma[plot]')"


def _strip(rows):
    """Rows without the timing column (the only one that may change between runs)."""
    return [{k: v for k, v in r.items() if k != "seconds"} for r in rows]


def _one(rows, **match):
    got = [r for r in rows if all(r.get(k) == v for k, v in match.items())]
    assert len(got) == 1, (match, len(got))
    return got[0]


@pytest.fixture(scope="module")
def ci_rows():
    """Every figure's rows at the ci scale, computed once."""
    return {name: getattr(mw, name)(scale="ci") for name in FIGURE_NAMES}


# --- rows --------------------------------------------------------------------------------------------------
# The figures of the seeds (Fasi et al. 2021, Valero-Lara et al., Ozaki) and the columns every row carries,
# written out here: the CSV schema readers rely on, not read back from the module under test.
FIGURE_NAMES = {"fig_3_1", "fig_4_3", "fig_4_4", "fig_4_5", "valero_lara_fig_4", "valero_lara_fig_5",
                "ozaki_slices", "accuracy_table"}
# the reproduction (blockfma reproduce NAME) that runs and draws each figure
REPRODUCTION = {"fig_3_1": "fasi2023-fig3.1", "fig_4_3": "fasi2023-fig4.3", "fig_4_4": "fasi2023-fig4.4",
                "fig_4_5": "fasi2023-fig4.5", "valero_lara_fig_4": "valero-lara-fig4",
                "valero_lara_fig_5": "valero-lara-fig5", "ozaki_slices": "ozaki-slices",
                "accuracy_table": "multiword-accuracy"}
CORE_COLUMNS = ("figure", "panel", "series", "method", "distribution", "m", "n", "q", "device", "model",
                "products", "unit_calls", "componentwise", "normwise_1", "normwise_2", "normwise_inf", "l1", "l2",
                "linf", "bound", "bound_probabilistic", "reference", "range_warnings", "underflowed_entries",
                "seconds", "seed", "scale")


def test_every_figure_has_the_core_columns(ci_rows):
    assert set(REPRODUCTION) == FIGURE_NAMES
    for name in FIGURE_NAMES:  # rows, a plot, and a registered reproduction for each figure
        assert callable(getattr(mw, name)) and callable(getattr(plot, name)), name
        assert rp.get(REPRODUCTION[name]).name == REPRODUCTION[name]
    assert mw.COLUMNS == CORE_COLUMNS  # in CSV order
    for name, rows in ci_rows.items():
        assert rows, name
        for r in rows:
            assert r["figure"] == name and r["scale"] == "ci" and r["seed"] == 0
            assert list(r)[:len(CORE_COLUMNS)] == list(CORE_COLUMNS), (name, list(r))
            for key in ("componentwise", "normwise_2", "l2"):
                assert r[key] >= 0 and math.isfinite(r[key]), (name, r["series"], key)
            assert isinstance(r["range_warnings"], int) and isinstance(r["underflowed_entries"], int)
            assert r["reference"] in ("exact", "fp64")
            assert r["products"] >= 1 and r["unit_calls"] >= 1
        assert mw.sizes_note(rows)


def test_rows_are_deterministic_for_a_seed(ci_rows):
    for name in ("fig_3_1", "valero_lara_fig_4", "ozaki_slices"):
        assert _strip(getattr(mw, name)(scale="ci")) == _strip(ci_rows[name]), name
    other = mw.fig_3_1(scale="ci", seed=1)
    assert [r["componentwise"] for r in other] != [r["componentwise"] for r in ci_rows["fig_3_1"]]


def test_unknown_names_are_errors():
    with pytest.raises(ValueError, match="no reproduction"):
        rp.get("fig_9_9")
    with pytest.raises(ValueError, match="scale"):
        mw.fig_3_1(scale="huge")
    with pytest.raises(ValueError, match="unknown distribution"):
        mw.sample("cauchy", (2, 2), np.random.default_rng(0))
    with pytest.raises(ValueError, match="unknown unit"):
        mw.fig_4_3([64], units=["RZ"])


def test_csv_round_trip(tmp_path, ci_rows):
    rows = ci_rows["fig_4_4"]
    (tmp_path / "sub").mkdir()  # write_csv makes no folder
    path = mw.write_csv(rows, tmp_path / "sub" / "fig_4_4.csv")
    back = mw.read_csv(path)
    assert list(back[0])[: len(mw.COLUMNS)] == list(mw.COLUMNS)
    assert len(back) == len(rows)
    for r, b in zip(rows, back):
        for k, v in r.items():
            assert b[k] == (None if v == "" else v), (k, v, b[k])
    assert not list(tmp_path.glob("sub/.*.tmp"))  # the temporary file was renamed


def test_double_fp16_matrices_split_exactly_without_warnings():
    X = mw.double_fp16(mw.sample("uniform(0,1]", (16, 512), np.random.default_rng(3)))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RangeWarning)
        w1, w2 = split(X, "fp16", 2)
    assert np.array_equal(w1 + w2, X)
    assert np.array_equal(X.astype(np.float32).astype(np.float64), X)  # fl32(A) = A1 + A2


def test_range_warnings_are_counted_and_others_pass_through():
    with pytest.warns(UserWarning, match="not a range warning"):
        with mw._range_warnings() as got:
            split(np.array([[1e-6, 2.0**-10, 3e-7]]), "fp16", 2)  # the row's largest is small: it matters
            warnings.warn("not a range warning", UserWarning, stacklevel=2)
    assert (got.warnings, got.entries) == (1, 2)


def test_rn_unit_of_width_one_is_an_fp16_fma_chain():
    """The engine takes Fig. 3.1's unit, and it is the RN FMA chain fp16 -> fp32 it stands for."""
    rng = np.random.default_rng(5)
    A = mw.double_fp16(rng.random((4, 300)))
    B = mw.double_fp16(rng.random((300, 3)))
    A1, B1 = split(A, "fp16", 1)[0], split(B, "fp16", 1)[0]
    chain = bf.Model(bf.Family.FMA_CHAIN, "fp16", "fp32", block_width=1)
    got = np.asarray(bf.gemm(A1, B1, None, model=mw.RN1_UNIT), dtype=np.float32)
    want = np.asarray(bf.gemm(A1, B1, None, model=chain), dtype=np.float32)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


# --- the seeds' findings, small ---------------------------------------------------------------------------
def test_fig_3_1_double_fp16_beats_fp16_and_a2b2_does_not_matter():
    rows = mw.fig_3_1([4096], scale="ci")
    for dist in ("uniform(0,1]", "uniform(-0.5,0.5]"):
        three = _one(rows, distribution=dist, series="double-fp16")["componentwise"]
        four = _one(rows, distribution=dist, series="double-fp16 (4 products)")["componentwise"]
        assert abs(three - four) <= 0.1 * three
        assert three <= _one(rows, distribution=dist, series="double-fp16")["bound"]
    centred = "uniform(-0.5,0.5]"
    assert (_one(rows, distribution=centred, series="double-fp16")["componentwise"]
            < _one(rows, distribution=centred, series="fp16")["componentwise"] / 10)


def test_fig_4_3_round_to_nearest_removes_the_penalty_on_positive_data():
    rows = mw.fig_4_3([2**14], distributions=("uniform(0,1]",), units=("RZ (V100)", "RN"))
    rz = _one(rows, panel="RZ (V100)", series="double-fp16")["componentwise"]
    rn = _one(rows, panel="RN", series="double-fp16")["componentwise"]
    fp32 = _one(rows, series="fp32 (BLAS)")["componentwise"]
    assert rz > 10 * rn
    assert rn < 3 * fp32


def test_fig_4_4_fabsum_beats_the_chained_algorithm():
    rows = mw.fig_4_4([4096], devices=("V100",), blocks=(128,), outer=8, split_k=(1,))
    chained = _one(rows, series="double-fp16 (Alg. 4.1)")["componentwise"]
    for v in (1, 2):
        r = _one(rows, series=f"FABsum-v{v} b=128")
        assert r["componentwise"] < chained / 5
        assert r["unit_calls"] == 2 + 4096 // 128


def test_fig_4_5_rows():
    rows = mw.fig_4_5([1024], blocks=(128, 512), outer=8)
    assert [r["series"] for r in rows] == ["fp32 (BLAS)", "double-fp16 FABsum-v2 b=256", "fp16 FABsum-v2 b=128",
                                          "fp16 FABsum-v2 b=512"]
    assert all(r["device"] in ("", "A100") for r in rows)


def test_valero_lara_multiword_reaches_the_high_precision():
    rows = mw.valero_lara_fig_4([128])
    sgemm = _one(rows, series="SGEMM")["l2"]
    assert _one(rows, series="3xTF32")["l2"] < 10 * sgemm < _one(rows, series="1xTF32")["l2"]
    assert _one(rows, series="SGEMM")["vs_baseline_l2"] == 0.0
    rows = mw.valero_lara_fig_5([64])
    dgemm = _one(rows, series="DGEMM")["l2"]
    assert _one(rows, series="3xTF64")["l2"] < 20 * dgemm
    assert _one(rows, series="1xTF64")["l2"] > 1e6 * dgemm
    assert _one(rows, series="4xTF64")["products"] == 4


def test_ozaki_reaches_fp64_with_enough_slices_and_moduli():
    rows = mw.ozaki_slices([32], distributions=("normal(0,1)",), slices=(2, 10), moduli=(4, 18),
                           devices=("V100", "A100"))
    fp64 = _one(rows, series="fp64 (BLAS)")["componentwise"]
    assert _one(rows, series="Ozaki I", slices=10)["componentwise"] <= 4 * fp64
    assert _one(rows, series="Ozaki II", moduli=18)["componentwise"] <= 4 * fp64
    assert _one(rows, series="Ozaki I", slices=2)["componentwise"] > 1e6 * fp64
    unit = _one(rows, series="fp64 unit (A100)")
    assert "V100" in unit["note"]


def mw_methods():
    from blockfma.multiword import methods

    return methods()


def test_accuracy_table_every_method_on_each_device_under_its_bound(ci_rows):
    rows = ci_rows["accuracy_table"]
    got = {(r["distribution"], r["device"], r["method"]) for r in rows}
    for dist in ("uniform(0,1]", "uniform(-0.5,0.5]"):
        for dev in ("A100", "H100"):
            assert {m for d, v, m in got if (d, v) == (dist, dev)} == set(mw_methods()) - {"mmm"}
        assert not {m for d, v, m in got if (d, v) == (dist, "V100") and ("bf16" in m or "tf32" in m)}
        assert (dist, "V100", "double-fp16") in got
    for r in rows:
        if r["bound"] is not None:
            assert r["componentwise"] <= r["bound"], (r["device"], r["method"], r["distribution"])
    for method in ("tf64", "ozaki1", "ozaki2", "fp64"):  # fp64-level, and the same on every device
        errs = {r["componentwise"] for r in rows if r["method"] == method and r["distribution"] == "uniform(0,1]"}
        assert len(errs) == 1 and max(errs) < 1e-14, method
    h100 = {r["method"]: r["componentwise"] for r in rows if r["device"] == "H100"
            and r["distribution"] == "uniform(0,1]"}
    assert h100["double-fp16"] < h100["fp16"] / 100 and h100["3xtf32"] < h100["tf32"] / 100


# --- plots -------------------------------------------------------------------------------------------------
def test_plots_need_matplotlib_and_say_how_to_get_it(monkeypatch, ci_rows):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match=r"pip install 'blockfma\[plot\]'"):
        plot.fig_3_1(ci_rows["fig_3_1"])


def test_every_figure_plots_to_png(tmp_path, ci_rows):
    pytest.importorskip("matplotlib", reason=NO_MPL)
    for name, rows in ci_rows.items():
        path = tmp_path / f"{name}.png"
        fig = getattr(plot, name)(rows, path)
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert "simulated here" in fig.get_supxlabel()
    with pytest.raises(ValueError, match="no rows"):
        plot.fig_3_1([])
    with pytest.raises(ValueError, match="no reproduction"):
        rp.get("fig_0")


def test_plots_take_rows_read_back_from_csv(tmp_path, ci_rows):
    pytest.importorskip("matplotlib", reason=NO_MPL)
    path = mw.write_csv(ci_rows["fig_4_3"], tmp_path / "fig_4_3.csv")
    plot.fig_4_3(mw.read_csv(path), tmp_path / "fig_4_3.png")
    assert (tmp_path / "fig_4_3.png").stat().st_size > 1000


# --- the reproductions ---------------------------------------------------------------------------------------
def test_reproduction_writes_csv_and_progress(tmp_path, ci_rows):
    said = []
    result = rp.run("fasi2023-fig4.5", scale="ci", progress=said.append)
    assert any("fig_4_5" in line for line in said)
    rp.write(result, tmp_path)
    rows = mw.read_csv(tmp_path / "fasi2023-fig4.5.csv")
    # Fig. 4.5 at the ci scale: n = 256 and 1024; per n the fp32 baseline, Algorithm 4.4 (double-fp16
    # FABsum-v2, b = 256) and plain fp16 FABsum-v2 for the ci blocks b = 32 and 128
    series = ["fp32 (BLAS)", "double-fp16 FABsum-v2 b=256", "fp16 FABsum-v2 b=32", "fp16 FABsum-v2 b=128"]
    assert [(r["n"], r["series"]) for r in rows] == [(n, s) for n in (256, 1024) for s in series]
    assert all(r["scale"] == "ci" and r["seed"] == 0 for r in rows)
    # the reproduction wrote the rows the library computes for the same figure, scale and seed
    (tmp_path / "lib").mkdir()
    assert _strip(rows) == _strip(mw.read_csv(mw.write_csv(ci_rows["fig_4_5"], tmp_path / "lib" / "fig_4_5.csv")))


def test_reproduction_writes_png(tmp_path):
    pytest.importorskip("matplotlib", reason=NO_MPL)
    out = tmp_path / "out"
    rp.write(rp.run("valero-lara-fig5", scale="ci"), out)
    assert sorted(p.name for p in out.iterdir()) == ["valero-lara-fig5.csv", "valero-lara-fig5.json",
                                                     "valero-lara-fig5.png"]
    assert (out / "valero-lara-fig5.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_reproduction_without_matplotlib_still_writes_csv(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    notes = []
    rp.write(rp.run("fasi2023-fig4.5", scale="ci"), tmp_path, note=notes.append)
    assert notes and "pip install 'blockfma[plot]'" in notes[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fasi2023-fig4.5.csv", "fasi2023-fig4.5.json"]
