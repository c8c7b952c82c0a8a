"""multiword.choose and matmul(accuracy=): the method chosen for an accuracy meets it on real data (held to
the exact product), a looser accuracy never costs more, small and skinny products go native, the Choice
explains itself, bad input is refused before any work.

Oracles: the exact product (metrics.reference(exact=True)) and metrics.componentwise for errors; the
methods' bits through matmul(method=...) for what accuracy= runs."""

from __future__ import annotations

import dataclasses
import importlib.util
import math

import numpy as np
import pytest

from blockfma import multiword as mw
from blockfma.arguments import ArgumentError
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
    assert "accuracy='fp32'" in out and "chosen:" in out and "(from the data)" in out


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


def test_the_spread_of_the_data_costs_slices_and_moduli():
    narrow, wide = _data(64, 256, 64, "narrow"), _data(64, 256, 64, "wide")
    a = choose(64, 256, 64, accuracy=1e-10, device=CARD, data=narrow)
    b = choose(64, 256, 64, accuracy=1e-10, device=CARD, data=wide)
    assert a.spread < b.spread and a.spread_from_data

    def moduli(c):
        return next(dict(o.params)["n_moduli"] for o in (c.option,) + c.alternatives
                    if o.method == "ozaki2" and dict(o.params)["scaling"] == "fast")

    assert moduli(a) < moduli(b)
    assert choose(64, 256, 64, accuracy=1e-10, device=CARD, exponent_spread=b.spread).option == b.option


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
    assert (got.method, got.params, got.bound) == (want.method, want.params, want.bound)
    C = mw.matmul(tA, tB, accuracy="fp64", device=CARD, backend="hardware:cpu")
    assert isinstance(C, torch.Tensor) and C.shape == (24, 16)


def test_a_misspelt_keyword_is_named_not_taken_for_a_missing_method():
    A = np.ones((4, 4))
    with pytest.raises(ArgumentError, match=r"^accuarcy='fp64': matmul\(\) takes no argument 'accuarcy'; did you "
                                            r"mean accuracy=\?"):
        mw.matmul(A, A, accuarcy="fp64")
    with pytest.raises(ArgumentError, match=r"did you mean explain=\?"):
        mw.matmul(A, A, accuracy="fp64", explian=True)
