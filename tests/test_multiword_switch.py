"""multiword.accurate: inside the block torch's routed matmuls give the chosen method's bits (those of
calling multiword.matmul on the same operands), outside it torch's own; what stays native is logged; bad
input is refused when the switch is made.  CPU torch."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from blockfma import multiword as mw  # noqa: E402
from blockfma.arguments import ArgumentError  # noqa: E402
from blockfma.multiword.choose import Rates  # noqa: E402

# fp64 slow, memory and launches free: the int8 and low-precision methods win on small products
CARD = Rates("slow-fp64 card", fp64=1e9, fp32=1e12, tf32=1e13, fp16=1e13, bf16=1e13, int8=1e13, bandwidth=1e15,
             preset="H100", launch=0.0, source="a test card")
SIM = {"device": CARD, "backend": "numpy"}


def _operands(m, k, n, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = (torch.rand(m, k, generator=g, dtype=torch.float64) + 1) * torch.randn(m, k, generator=g, dtype=torch.float64).sign()
    b = (torch.rand(k, n, generator=g, dtype=torch.float64) + 1) * torch.randn(k, n, generator=g, dtype=torch.float64).sign()
    return a.to(dtype), b.to(dtype)


def _direct(a, b, accuracy="fp64"):
    C = mw.matmul(a.numpy(), b.numpy(), accuracy=accuracy, **SIM)
    return torch.from_numpy(C).to(a.dtype)


def _same_bits(x, y):
    return x.dtype == y.dtype and x.shape == y.shape and torch.equal(x.view(torch.int64 if x.dtype == torch.float64
                                                                              else torch.int32),
                                                                      y.view(torch.int64 if y.dtype == torch.float64
                                                                             else torch.int32))


def test_routed_ops_give_the_chosen_methods_bits():
    a, b = _operands(12, 64, 10)
    c = torch.ones(12, 10, dtype=torch.float64) / 3
    want = _direct(a, b)
    with mw.accurate("fp64", **SIM) as acc:
        got = {"@": a @ b, "matmul": torch.matmul(a, b), "mm": torch.mm(a, b), "Tensor.mm": a.mm(b),
               "linear": F.linear(a, b.t()), "bmm": torch.bmm(a[None].expand(3, 12, 64), b[None].expand(3, 64, 10))[2],
               "batched @": (a[None].expand(2, 12, 64) @ b)[1]}
        addmm = torch.addmm(c, a, b, beta=2.0, alpha=0.5)
        linear_bias = F.linear(a, b.t(), c[0])
    for op, y in got.items():
        assert _same_bits(y, want), op
    assert torch.equal(addmm, 0.5 * want + 2.0 * c) and torch.equal(linear_bias, want + c[0])
    chosen = acc.log[0].choice
    assert chosen is not None and chosen.method == "ozaki2"  # not the native GEMM: the test can tell them apart
    assert [c.op for c in acc.log] == ["matmul", "matmul", "mm", "mm", "linear", "bmm", "matmul", "addmm", "linear"]
    assert all(c.method.startswith("ozaki2") for c in acc.log)
    assert acc.log[5].products == 3 and acc.log[6].products == 1  # bmm: one per batch entry; A's batch folded


def test_native_outside_the_block_and_for_other_dtypes():
    a, b = _operands(8, 32, 6)
    before = a @ b
    with mw.accurate(3e-5, **SIM) as acc:
        inside = a @ b
        single = a.float() @ b.float()
    after = a @ b
    assert _same_bits(before, after) and torch.equal(after, torch.mm(a, b))
    assert acc.log[0].method == "ootomo" and _same_bits(inside, _direct(a, b, 3e-5))
    assert not torch.equal(inside, before)  # the method's bits differ from DGEMM's here
    assert acc.log[1].method == "native" and "float32 is not routed" in acc.log[1].note
    assert torch.equal(single, a.float() @ b.float())
    assert len(acc.log) == 2  # nothing after the block


def test_float32_routed_when_asked():
    a, b = _operands(8, 32, 6, dtype=torch.float32)
    with mw.accurate(3e-5, dtypes=(torch.float64, torch.float32), **SIM) as acc:
        y = a @ b
    C = mw.matmul(a.numpy(), b.numpy(), accuracy=3e-5, **SIM)
    assert y.dtype == torch.float32 and _same_bits(y, torch.from_numpy(C.astype(np.float32)))
    assert acc.log[0].dtype == "float32" and acc.log[0].method != "native"


def test_vectors_and_broadcast_batches_follow_torch_matmul():
    a, b = _operands(6, 20, 5)
    x = a[0].clone()
    with mw.accurate("fp64", **SIM) as acc:
        vm, mv = x @ b, a @ b[:, 0]
        batched = a[None].expand(2, 6, 20) @ b[None].expand(3, 20, 5)[:1]  # broadcast batch 2 x 1
    want = _direct(a, b)
    assert vm.shape == (5,) and _same_bits(vm, _direct(a[:1], b)[0])
    assert mv.shape == (6,) and _same_bits(mv, _direct(a, b[:, :1])[:, 0])
    assert batched.shape == (2, 6, 5) and _same_bits(batched[1], want)
    assert [c.products for c in acc.log] == [1, 1, 2]


def test_what_stays_native_is_logged():
    a, b = _operands(4, 16, 4)
    bad = a.clone()
    bad[1, 2] = float("nan")
    with mw.accurate("fp64", **SIM) as acc:
        y_nan = bad @ b
        y_int = torch.ones(3, 4, dtype=torch.int64) @ torch.ones(4, 2, dtype=torch.int64)
    assert torch.isnan(y_nan[1]).all() and not torch.isnan(y_nan[0]).any()
    assert torch.equal(y_int, torch.full((3, 2), 4))
    notes = [c.note for c in acc.log]
    assert "NaN or infinite" in notes[0] and "int64 is not routed" in notes[1]
    assert all(c.method == "native" and c.choice is None for c in acc.log)


def test_gradients_run_through_the_chosen_methods():
    a0, b0 = _operands(6, 40, 5)
    g = _operands(6, 40, 5, seed=1)[0][:, :5].contiguous()  # the upstream gradient
    for backward_inside in (True, False):
        a, w = a0.clone().requires_grad_(True), b0.clone().requires_grad_(True)
        with mw.accurate("fp64", **SIM) as acc:
            y = a @ w
            if backward_inside:
                y.backward(g)
        if not backward_inside:  # a graph made inside the block keeps its routes
            y.backward(g)
        assert _same_bits(y.detach(), _direct(a0, b0))
        assert _same_bits(a.grad, _direct(g, b0.t())) and _same_bits(w.grad, _direct(a0.t(), g))
        assert [c.op for c in acc.log] == ["matmul", "backward grad_A", "backward grad_B"]
        assert all(c.method.startswith("ozaki2") for c in acc.log)
        assert torch.allclose(a.grad, g @ b0.t(), rtol=1e-13, atol=0)


def test_the_hardware_backend_on_this_machine():
    """Real units (the CPU's, with the nominal cpu rates): a small product goes to torch's own fp64 matmul,
    so the bits are torch's."""
    a, b = _operands(16, 16, 16)
    with mw.accurate("fp64", backend="hardware:cpu") as acc:
        y = a @ b
    assert acc.log[0].method == "fp64" and acc.log[0].choice.rates.name == "cpu"
    assert _same_bits(y, torch.mm(a, b))
    w = b.clone().requires_grad_(True)
    with mw.accurate("fp64", backend="hardware:cpu") as acc:
        (a @ w).sum().backward()  # the backward's products run inside the block: the units' own torch.mm
    assert [c.op for c in acc.log] == ["matmul", "backward grad_B"]  # are not routed again
    assert _same_bits(w.grad, torch.mm(a.t(), torch.ones(16, 16, dtype=torch.float64)))


def test_nested_blocks_the_innermost_routes_and_the_units_are_not_routed_again():
    a, b = _operands(16, 16, 16)
    with mw.accurate("fp64", backend="hardware:cpu") as outer:
        with mw.accurate("fp64", dtypes=(torch.float64, torch.float32), backend="hardware:cpu") as inner:
            y = a @ b  # the inner block's fp64 GEMM runs torch.mm inside: the outer block must not route it
        z = a.float() @ b.float()  # float32 is not the outer block's
    assert [c.method for c in inner.log] == ["fp64"] and _same_bits(y, torch.mm(a, b))
    assert [(c.method, c.dtype) for c in outer.log] == [("native", "float32")] and z.dtype == torch.float32


def test_bad_input_is_refused_when_the_switch_is_made():
    for kwargs, text in [({"accuracy": "fp128"}, "accuracy='fp128'"), ({"accuracy": -1.0}, "accuracy=-1.0"),
                         ({"dtypes": (torch.int32,)}, "dtypes="), ({"dtypes": ()}, "is empty"),
                         ({"backend": "torch"}, "backend='torch'"), ({"device": "H900", "backend": "numpy"}, "H900")]:
        with pytest.raises(ArgumentError) as info:
            mw.accurate(**kwargs)
        assert text in str(info.value), str(info.value)
    a, _b = _operands(4, 8, 4)
    with mw.accurate("fp64", **SIM):
        with pytest.raises(ValueError, match="cannot be multiplied"):
            a @ a
