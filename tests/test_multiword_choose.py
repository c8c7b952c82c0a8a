"""multiword.choose and matmul(accuracy=): the method chosen for an accuracy meets it on real data (held to
the exact product), a looser accuracy never costs more, small and skinny products go native, the Choice
explains itself, bad input is refused before any work.

Oracles: the exact product (metrics.reference(exact=True)) and metrics.componentwise for errors; the
methods' bits through matmul(method=...) for what accuracy= runs."""

from __future__ import annotations

import dataclasses
import importlib.util
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blockfma import multiword as mw
from blockfma.arguments import ArgumentError
from blockfma.multiword import bounds, ozaki
from blockfma.multiword.choose import RATES, Rates, choose, ozaki2_bound, target

# A card whose fp64 unit is slow and whose memory and launches cost nothing: the methods win even on the
# small products a test can afford, so that every kind of method gets chosen and run.
CARD = Rates("slow-fp64 card", fp64=1e9, fp32=1e12, tf32=1e13, fp16=1e13, bf16=1e13, int8=1e13, bandwidth=1e15,
             preset="H100", launch=0.0, source="a test card")
HAVE_TORCH = importlib.util.find_spec("torch") is not None


def _data(m, k, n, kind, seed=0):
    rng = np.random.default_rng(seed)
    if kind == "narrow":  # each row of A and column of B within two binades: a small exponent spread
        A = rng.uniform(1, 2, (m, k)) * rng.choice([-1.0, 1.0], (m, k))
        B = rng.uniform(1, 2, (k, n)) * rng.choice([-1.0, 1.0], (k, n))
    else:  # (0, 1]: a wide spread
        A, B = 1 - rng.uniform(0, 1, (m, k)), 1 - rng.uniform(0, 1, (k, n))
    return A, B


def _bits(X):
    return np.asarray(X, dtype=np.float64).view(np.uint64)


@pytest.mark.parametrize("kind", ["narrow", "wide"])
@pytest.mark.parametrize("accuracy", ["fp64", "fp32", 1e-9, 1e-5, 3e-5, 1e-3, 2e-2])
def test_the_choice_meets_the_accuracy_on_the_exact_product(accuracy, kind):
    A, B = _data(12, 128, 10, kind)
    C, info = mw.matmul(A, B, accuracy=accuracy, device=CARD, backend="numpy", return_info=True)
    choice = info["choice"]
    err = mw.metrics.componentwise(C, mw.reference(A, B, exact=True), A, B)
    assert err <= choice.bound <= choice.target
    assert choice.target == target(accuracy, 128)
    # accuracy= runs exactly the chosen method: the same bits as naming it
    assert np.array_equal(_bits(C), _bits(mw.matmul(A, B, **choice.arguments())))


def test_the_test_card_makes_every_kind_of_method_win():
    """The accuracy test above exercises the methods, not only the native GEMM."""
    A, B = _data(12, 128, 10, "narrow")
    chosen = {choose(12, 128, 10, accuracy=a, device=CARD, data=(A, B)).method for a in ("fp64", 3e-5, 2e-2)}
    assert "fp64" not in chosen and "ozaki2" in chosen and chosen & {"fp16", "bf16", "tf32"} and chosen & {"double-fp16", "ootomo", "3xtf32", "double-bf16"}


@pytest.mark.parametrize("scaling", ["fast", "accurate"])
@pytest.mark.parametrize("n_moduli", [4, 8, 13])
def test_ozaki2_bound_holds(n_moduli, scaling):
    A, B = _data(10, 300, 8, "narrow", seed=n_moduli)
    A[0, :5] *= 2.0**-9  # a wider spread in one row
    C = mw.matmul(A, B, method="ozaki2", n_moduli=n_moduli, scaling=scaling)
    err = mw.metrics.componentwise(C, mw.reference(A, B, exact=True), A, B)
    assert err <= ozaki2_bound(300, n_moduli, scaling=scaling, exponent_spread=mw.bounds.exponent_spread(A, B))
    assert ozaki2_bound(300, n_moduli + 1) < ozaki2_bound(300, n_moduli)


ACCURACIES = [1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-8, 1e-10, 1e-12, 1e-13, "fp32", "fp64"]


@pytest.mark.parametrize("device", ["H100", "A100", "V100", "RTX 4090", CARD])
@pytest.mark.parametrize("shape", [(64, 64, 64), (1024, 1024, 1024), (4096, 512, 4096), (16384,) * 3,
                                   (8192, 8192, 16)])
def test_a_looser_accuracy_never_picks_a_costlier_method(shape, device):
    rows = []
    for acc in ACCURACIES:
        try:
            c = choose(*shape, accuracy=acc, device=device)
        except ArgumentError:  # no method reaches it here
            continue
        assert c.bound <= c.target
        rows.append((c.target, c.cost, c.option.label))
    rows.sort()
    assert len(rows) >= 5
    for (t0, c0, l0), (t1, c1, l1) in zip(rows, rows[1:]):
        assert c1 <= c0, f"target {t1:.3g} picks {l1} ({c1:.3g} s), costlier than {l0} ({c0:.3g} s) for {t0:.3g}"


@pytest.mark.parametrize("shape", [(32, 32, 32), (256, 256, 256), (8192, 8192, 1), (1, 8192, 8192),
                                   (16384, 16384, 8)])
def test_small_and_skinny_products_go_native(shape):
    for acc in ("fp64", "fp32"):
        c = choose(*shape, accuracy=acc, device="H100")
        assert c.native, c.explain()


def test_large_products_do_not_go_native():
    """So that the test above can fail: at n = 16384 the int8 units win on an H100."""
    c = choose(16384, 16384, 16384, accuracy="fp64", device="H100")
    assert c.method == "ozaki2" and not c.native
    assert c.cost < next(o.cost for o in c.alternatives if o.method == "fp64")


def test_explain_names_the_method_and_the_rejected_ones(capsys):
    c = choose(4096, 4096, 4096, accuracy="fp64", device="H100")
    text = c.explain()
    assert c.option.label in text and "rejected" in text and "DGEMM" in text
    for o in c.alternatives:
        assert o.label in text and o.reason and o.reason in text
    assert {o.method for o in c.alternatives} >= {"fp64", "3xtf32", "bf16x9", "ozaki1", "tf64"}
    assert "exponent spread 0 (assumed" in text  # no data: the assumption is said
    A, B = _data(8, 64, 8, "narrow")
    mw.matmul(A, B, accuracy="fp32", device=CARD, backend="numpy", explain=True)
    out = capsys.readouterr().out
    assert "accuracy='fp32'" in out and "chosen:" in out and "Ozaki bounds: " in out


def test_a_truncating_unit_gets_the_truncated_u():
    sim = choose(2048, 2048, 2048, accuracy="fp32", device="H100")
    u = {o.method: o.u_high for o in sim.alternatives + (sim.option,)}
    assert u["3xtf32"] == u["bf16x9"] == 2.0**-23  # the H100 presets truncate
    assert mw.bounds.bound("3xtf32", 2048, u_high=2.0**-23) == next(
        o.bound for o in sim.alternatives + (sim.option,) if o.method == "3xtf32")
    if HAVE_TORCH:  # the CPU's fp32 matmul rounds to nearest
        cpu = choose(2048, 2048, 2048, accuracy="fp32", backend="hardware:cpu")
        assert cpu.rates.name == "cpu"
        assert {o.method: o.u_high for o in cpu.alternatives + (cpu.option,)}["3xtf32"] == 2.0**-24


def _moduli(c):
    """The fast-scaling Ozaki II option's moduli in a Choice."""
    return next(dict(o.params)["n_moduli"] for o in (c.option,) + c.alternatives
                if o.method == "ozaki2" and dict(o.params)["scaling"] == "fast")


def test_the_data_bound_counts_what_the_data_need():
    """Rows and columns whose large entries meet only small ones (|A||B| far below the norms' product) need
    more moduli; a few small entries in a row do not (the bound is per entry against |A||B|, not per term);
    without data a given exponent spread costs moduli."""
    A, B = _data(64, 256, 64, "narrow")
    few = A.copy()
    few[0, :5] *= 2.0**-30
    anti_A, anti_B = A.copy(), B.copy()
    anti_A[0, 128:] *= 2.0**-20  # row 0: big on the first half, column 0 of B big on the second
    anti_B[:128, 0] *= 2.0**-20
    a, b, c = (choose(64, 256, 64, accuracy=1e-10, device=CARD, data=d) for d in ((A, B), (few, B), (anti_A, anti_B)))
    assert a.ratios is not None and "from the data" in a.explain()
    assert _moduli(a) == _moduli(b) < _moduli(c)
    spread = [choose(64, 256, 64, accuracy=1e-10, device=CARD, exponent_spread=e) for e in (0, 20)]
    assert _moduli(spread[0]) < _moduli(spread[1]) and "exponent spread 20 (given)" in spread[1].explain()


def _operands(style, m, k, n, seed):
    """Random and adversarial operands for the data bounds."""
    rng = np.random.default_rng(seed)
    A, B = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    if style == "uniform":
        A, B = rng.random((m, k)), rng.random((k, n))
    elif style == "binades":  # every entry in its own binade, 2^-20 .. 2^20
        A, B = A * 2.0 ** rng.integers(-20, 21, (m, k)), B * 2.0 ** rng.integers(-20, 21, (k, n))
    elif style == "anti":  # each row's large entries meet each column's small ones
        A[:, : k // 2] *= 2.0**-9
        B[k // 2:] *= 2.0**-9
    elif style == "sparse":
        A, B = np.where(rng.random((m, k)) < 0.5, 0.0, A), np.where(rng.random((k, n)) < 0.5, 0.0, B)
    elif style == "ties":  # powers of two and their halves: the floors and truncations at their edges
        A, B = 2.0 ** rng.integers(-3, 4, (m, k)) * rng.choice([-1.0, 1.0, 1.5], (m, k)), np.ldexp(1.0, -B.round().astype(int))
    return A, B


def _dyadic(x):
    """x = m 2**e exactly, m an integer."""
    f, e = math.frexp(x)
    return int(math.ldexp(f, 53)), e - 53


def _exact(A, B):
    """Each entry's (sum a_il b_lj, sum |a_il b_lj|) as Fractions, in Python integers (no rounding)."""
    da, db = [[_dyadic(x) for x in row] for row in A], [[_dyadic(x) for x in col] for col in B.T]
    out = {}
    for i, row in enumerate(da):
        for j, col in enumerate(db):
            terms = [(ma * mb, ea + eb) for (ma, ea), (mb, eb) in zip(row, col)]
            e0 = min(e for _, e in terms)
            scale = Fraction(2) ** e0
            out[i, j] = (sum(t << (e - e0) for t, e in terms) * scale,
                         sum(abs(t) << (e - e0) for t, e in terms) * scale)
    return out


def _within(C, exact, bound):
    """Every entry's exact error is at most bound (|A||B|)_ij (inf: nothing bounded); ``exact`` from _exact."""
    return not math.isfinite(bound) or all(abs(Fraction(C[ij]) - v) <= Fraction(bound) * a
                                           for ij, (v, a) in exact.items())


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["uniform", "normal", "binades", "anti", "sparse", "ties"]), st.integers(1, 5),
       st.integers(1, 40), st.integers(1, 5), st.integers(0, 2**32 - 1))
def test_the_data_bounds_hold_against_exact_products(style, m, k, n, seed):
    A, B = _operands(style, m, k, n, seed)
    r, exact = bounds.ozaki_ratios(A, B), _exact(A, B)
    for N, scaling in ((2, "fast"), (3, "accurate"), (5, "fast"), (9, "accurate")):
        C = ozaki.ozaki2(A, B, n_moduli=N, scaling=scaling)
        assert _within(C, exact, ozaki2_bound(k, N, scaling=scaling, ratios=r)), (N, scaling)
    for s in (1, 2, 4):
        assert _within(ozaki.ozaki1(A, B, slices=s), exact, bounds.ozaki_bound(k, s, ratios=r)), s


def test_the_data_bounds_are_not_vacuous():
    """So that the test above can fail: with few moduli or slices the errors come within a small factor of
    the bounds on uniform data."""
    A, B = _operands("uniform", 6, 40, 6, 1)
    r = bounds.ozaki_ratios(A, B)
    err2 = mw.metrics.componentwise(ozaki.ozaki2(A, B, n_moduli=3), mw.reference(A, B, exact=True), A, B)
    err1 = mw.metrics.componentwise(ozaki.ozaki1(A, B, slices=2), mw.reference(A, B, exact=True), A, B)
    assert ozaki2_bound(40, 3, ratios=r) / 64 < err2 <= ozaki2_bound(40, 3, ratios=r)
    assert bounds.ozaki_bound(40, 2, ratios=r) / 64 < err1 <= bounds.ozaki_bound(40, 2, ratios=r)


@pytest.mark.parametrize("kind", ["uniform", "normal"])
def test_the_choice_on_data_is_no_less_accurate_than_dgemm(kind):
    """On the card that makes the methods win at a test's sizes: Ozaki is chosen from the data's bound, and
    its exact error (Fractions, sampled rows) is within that bound, within DGEMM's gamma_k."""
    A, B = _operands(kind, 96, 160, 64, 7)
    C, info = mw.matmul(A, B, accuracy="fp64", device=CARD, backend="numpy", return_info=True)
    c = info["choice"]
    assert c.method in ("ozaki1", "ozaki2") and c.ratios is not None and "from the data" in c.explain()
    assert c.bound <= c.target == bounds.bound("fp64", 160)
    rows = np.random.default_rng(0).choice(96, 12, replace=False)
    assert _within(C[rows], _exact(A[rows], B), c.bound)


def test_wide_range_data_fall_back_to_dgemm_and_say_why():
    """Entries spanning 2^-60 .. 2^60: no count of int8 moduli or slices reaches DGEMM's bound per entry."""
    rng = np.random.default_rng(3)
    A, B = (rng.standard_normal(s) * 2.0 ** rng.integers(-60, 61, s) for s in ((24, 64), (64, 16)))
    c = choose(24, 64, 16, accuracy="fp64", device=CARD, data=(A, B))
    assert c.method == "fp64"
    text = c.explain()
    for o in c.alternatives:
        if o.method.startswith("ozaki"):
            assert "too many binades for int8" in o.reason and o.reason in text


def test_the_data_are_not_examined_where_ozaki_cannot_win(monkeypatch):
    """Small products on an H100 go to DGEMM before any int8 product of the data."""
    monkeypatch.setattr(bounds, "ozaki_ratios", lambda *a: pytest.fail("the data's Ozaki bound was computed"))
    A, B = _operands("uniform", 128, 128, 128, 0)
    c = choose(128, 128, 128, accuracy="fp64", device="H100", data=(A, B))
    assert c.method == "fp64" and c.ratios is None and "not computed" in c.explain()


@pytest.mark.parametrize("kind", ["uniform", "normal"])
def test_13_moduli_meet_dgemms_bound_on_4096_long_rows(kind):
    """The n = 4096 case at the cost of a thin product: rows of A and columns of B 4096 long (the bound's
    ratios depend on k, and on m and n only through the maximum over entries), 13 moduli meet DGEMM's
    gamma_4096, and at 4096^3 on H100 rates 13 moduli beat DGEMM (the test below does it on 4096^3 data)."""
    A, B = _operands(kind, 32, 4096, 32, 11)
    r = bounds.ozaki_ratios(A, B)
    assert ozaki2_bound(4096, 13, ratios=r) <= target("fp64", 4096) < ozaki2_bound(4096, 12, ratios=r)
    c = choose(4096, 4096, 4096, accuracy="fp64", device="H100")
    assert c.method == "ozaki2" and c.params["n_moduli"] == 13


def test_ozaki_ratios_refuses_bad_operands_and_takes_tensors():
    with pytest.raises(ArgumentError, match=r"^B=.*inner dimensions differ"):
        bounds.ozaki_ratios(np.ones((2, 3)), np.ones((2, 2)))
    with pytest.raises(ArgumentError, match=r"A\[0, 0\] = nan is not finite"):
        bounds.ozaki_ratios(np.array([[np.nan]]), np.ones((1, 1)))
    assert bounds.ozaki_ratios(np.zeros((3, 0)), np.ones((0, 4))) == (0.0, 0.0, 0.0, 0.0)
    if HAVE_TORCH:
        import torch

        for bad in ((torch.ones(2, 2), torch.ones(2, 2)), (torch.ones(2, 2, dtype=torch.float64), np.ones((2, 2))),
                    (torch.full((2, 2), math.inf, dtype=torch.float64), torch.ones(2, 2, dtype=torch.float64))):
            with pytest.raises(ArgumentError, match="must be finite 2-D float64 tensors on one device"):
                bounds.ozaki_ratios(*bad)
        A, B = _operands("normal", 5, 30, 4, 2)
        assert bounds.ozaki_ratios(torch.from_numpy(A), torch.from_numpy(B)) == pytest.approx(
            bounds.ozaki_ratios(A, B), rel=1e-12)  # torch._int_mm on the CPU: the same product


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["uniform", "normal"])
def test_ozaki_is_chosen_for_4096_data_on_h100_rates(kind):
    """The issue's target itself (one 4096^3 int8 product on the CPU: seconds)."""
    A, B = _operands(kind, 4096, 4096, 4096, 5)
    c = choose(4096, 4096, 4096, accuracy="fp64", device="H100", data=(A, B))
    assert c.method == "ozaki2" and c.bound <= c.target and c.ratios is not None, c.explain()


def test_rates_are_sourced():
    for r in RATES.values():
        assert r.source and r.fp64 > 0 and r.bandwidth > 0
    assert RATES["H100"].relative("int8") == pytest.approx(1978.9 / 66.9)


def test_bad_input_is_refused_before_any_work():
    A, B = _data(4, 8, 4, "narrow")
    cases = [
        (lambda: mw.matmul(A, B, accuracy="fp128"), "accuracy="),
        (lambda: mw.matmul(A, B, accuracy=-1e-3), "accuracy=-0.001"),
        (lambda: mw.matmul(A, B, accuracy=0), "accuracy=0"),
        (lambda: mw.matmul(A, B, accuracy=math.nan), "accuracy=nan"),
        (lambda: mw.matmul(A, B, accuracy=True), "accuracy=True"),
        (lambda: mw.matmul(A, B, accuracy="fp64", method="ozaki2"), "both pick the method"),
        (lambda: mw.matmul(A, B), "accuracy='fp64'"),
        (lambda: mw.matmul(A, B, method="fp64", explain=True), "explain=True"),
        (lambda: mw.matmul(A, B, accuracy="fp64", order="cublas"), "order='cublas'"),
        (lambda: mw.matmul(A, B, accuracy="fp64", n_moduli=4), "n_moduli=4"),
        (lambda: mw.matmul(A, B, accuracy="fp64", device="H900"), "device='H900'"),
        (lambda: mw.matmul(A, B.T, accuracy="fp64"), "inner dimensions"),
        (lambda: mw.matmul(A, B, accuracy=1e-30), "no method reaches"),
        (lambda: choose(4, 8, 4, accuracy="fp64", data=(A, B.T)), "data="),
        (lambda: choose(0, 8, 4, accuracy="fp64"), "m=0"),
        (lambda: choose(4, 8, 4, accuracy="fp64", data=(A, B), exponent_spread=2), "exponent_spread=2"),
    ]
    for call, text in cases:
        with pytest.raises(ArgumentError) as info:
            call()
        assert text in str(info.value), str(info.value)
    assert "pass accuracy='fp64'" in str(pytest.raises(ArgumentError, mw.matmul, A, B, accuracy="fp46").value)


def test_a_card_runs_its_presets_units_and_lacks_what_it_lacks():
    ada = dataclasses.replace(CARD, preset="Ada", name="Ada card")
    c = choose(12, 128, 10, accuracy=2e-2, device=ada)
    assert c.method == "fp16" and c.option.unit == "Ada fp16->fp32" and c.arguments()["device"] == "Ada"
    v100 = choose(12, 128, 10, accuracy=2e-2, device="V100")
    missing = {o.method for o in v100.alternatives if "V100 has no" in o.reason}
    assert missing == {"bf16", "tf32", "double-bf16", "triple-bf16", "3xtf32", "4xtf32", "bf16x9", "ozaki1", "ozaki2"}


def test_an_empty_product_is_zeros():
    C, info = mw.matmul(np.ones((3, 0)), np.ones((0, 2)), accuracy="fp64", return_info=True)
    assert np.array_equal(_bits(C), _bits(np.zeros((3, 2)))) and info["choice"] is None
    assert mw.matmul(np.ones((0, 4)), np.ones((4, 2)), accuracy="fp32").shape == (0, 2)


def test_words_that_cannot_hold_the_data_are_not_chosen():
    A, B = _data(12, 128, 10, "narrow")
    A[3, 7] = 1e6  # beyond fp16's range: fp16 words cannot split it (matmul would refuse it)
    c = choose(12, 128, 10, accuracy=2e-2, device=CARD, data=(A, B))
    reasons = {o.method: o.reason for o in c.alternatives}
    for name in ("fp16", "double-fp16", "markidis", "ootomo"):
        assert "A[3, 7] = 1000000.0 is beyond fp16's largest value" in reasons[name]
    assert c.method in ("bf16", "tf32")
    C = mw.matmul(A, B, accuracy=2e-2, device=CARD, backend="numpy")
    assert mw.metrics.componentwise(C, mw.reference(A, B, exact=True), A, B) <= c.bound
    huge = A * 2.0**105  # entries within fp32, sums of products beyond it: only the fp64 methods are left
    c = choose(12, 128, 10, accuracy=2e-2, device=CARD, data=(huge, B))
    assert c.method in ("fp64", "ozaki1", "ozaki2") and "beyond fp32's range" in {
        o.method: o.reason for o in c.alternatives}["bf16"]


def test_an_unreachable_accuracy_names_one_that_is_reached():
    for k in (16, 4096):
        with pytest.raises(ArgumentError, match="no method reaches") as info:
            choose(64, k, 64, accuracy=1e-30, device="H100")
        assert choose(64, k, 64, **info.value.use, device="H100").bound <= info.value.use["accuracy"]


def test_the_named_targets_are_dgemm_and_sgemm_bounds():
    for k in (1, 100, 4096):
        u, v = 2.0**-53, 2.0**-24
        assert target("fp64", k) == pytest.approx(k * u / (1 - k * u), rel=1e-15)  # gamma_k, Higham 3.1
        assert target("fp32", k, "fp32") == pytest.approx(k * v / (1 - k * v), rel=1e-15)
        assert target("fp32", k, "bf16") == target("fp32", k, "fp32")  # fp32 holds bf16 data exactly
        assert target("fp32", k) == pytest.approx(2 * v + v * v + k * v / (1 - k * v), rel=1e-15)  # + rounding
        assert target(1e-7, k) == 1e-7


@pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")
def test_tensors_are_looked_at_on_their_device(monkeypatch):
    """choose(data=tensors) and matmul(tensors, accuracy=) read the data where it is: no tensor is copied to
    a numpy array (each such copy would be a host round trip from a GPU), and the spread and the choice are
    those of the same data as arrays."""
    import torch

    A, B = _data(24, 40, 16, "narrow", seed=5)
    want = choose(24, 40, 16, accuracy="fp64", device=CARD, data=(A, B))
    monkeypatch.setattr(torch.Tensor, "numpy", lambda self, *a, **k: pytest.fail("a tensor went to numpy"))
    tA, tB = torch.from_numpy(A), torch.from_numpy(B)
    got = choose(24, 40, 16, accuracy="fp64", device=CARD, data=(tA, tB))
    assert (got.method, got.params) == (want.method, want.params)
    assert got.bound == pytest.approx(want.bound, rel=1e-12)  # the norms summed in torch's order
    C = mw.matmul(tA, tB, accuracy="fp64", device=CARD, backend="hardware:cpu")
    assert isinstance(C, torch.Tensor) and C.shape == (24, 16)


def test_a_misspelt_keyword_is_named_not_taken_for_a_missing_method():
    A = np.ones((4, 4))
    with pytest.raises(ArgumentError, match=r"^accuarcy='fp64': matmul\(\) takes no argument 'accuarcy'; did you "
                                            r"mean accuracy=\?"):
        mw.matmul(A, A, accuarcy="fp64")
    with pytest.raises(ArgumentError, match=r"did you mean explain=\?"):
        mw.matmul(A, A, accuracy="fp64", explian=True)
