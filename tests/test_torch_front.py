"""The torch front (blockfma.torch_front): a rule of a few methods plugs into the one interception layer and
gets torch.matmul's shape rules, addmm/linear, out=, in-place forms and autograd; torch calls made inside the
rule's gemm are not intercepted again.  A toy rule: float32 products computed in float64, rounded once."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from blockfma.arguments import ArgumentError  # noqa: E402
from blockfma import torch_front as front  # noqa: E402


class Wide:
    """float32 matmuls in float64, rounded once to float32; C added inside (adds_c) or by torch after."""

    layer = "wide()"

    def __init__(self, adds_c: bool = False) -> None:
        self.adds_c = adds_c
        self.log: list[tuple] = []

    def native(self, op, tensors, keywords, dims):
        if tensors[-1].dtype != torch.float32 or keywords:
            self.log.append((op, "native"))
            return True
        return False

    def route_of(self, a):
        return "float64"

    def gemm(self, a, b, c, route, ran):
        ran.append(route)
        d = a.double() @ b.double()  # a torch matmul inside the rule: not intercepted again
        return (d if c is None else d + c.double()).float()

    def record(self, op, tensors, route, products=0, ran=()):
        self.log.append((op, front.shapes(tensors), products, tuple(ran)))

    def __enter__(self):
        self._mode = front.Mode(self)
        self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        self._mode.__exit__(*exc)


def _wide(a, b):
    return (a.double() @ b.double()).float()


def test_a_rule_gets_the_shape_rules_addmm_out_and_native_calls():
    g = torch.Generator().manual_seed(0)
    a, b, c = (torch.randn(*s, generator=g) for s in ((2, 3, 40), (40, 5), (3, 5)))
    out = torch.empty(0)
    with Wide() as rule:
        folded = a @ b
        vector = a[0, 0] @ b
        batched = torch.bmm(a, b.expand(2, 40, 5))
        addmm = torch.addmm(c, a[0], b, beta=2.0, alpha=0.5)
        linear = F.linear(a[0], b.t(), c[0])
        torch.mm(a[0], b, out=out)
        ints = torch.ones(2, 3, dtype=torch.int64) @ torch.ones(3, 2, dtype=torch.int64)
    assert torch.equal(folded, _wide(a, b)) and torch.equal(vector, _wide(a[0, :1], b)[0])
    assert torch.equal(batched, _wide(a, b)) and torch.equal(out, _wide(a[0], b))
    assert torch.equal(addmm, 0.5 * _wide(a[0], b) + 2.0 * c) and torch.equal(linear, _wide(a[0], b) + c[0])
    assert torch.equal(ints, torch.full((2, 2), 3))
    assert rule.log[0] == ("matmul", "2x3x40 x 40x5", 1, ("float64",))  # A's batch folded: one product
    assert rule.log[2] == ("bmm", "2x3x40 x 2x40x5", 2, ("float64",)) and rule.log[-1] == ("matmul", "native")


def test_c_inside_the_product_refuses_scaling_and_the_backward_runs_through_the_rule():
    g = torch.Generator().manual_seed(1)
    a, b, c = (torch.randn(*s, generator=g) for s in ((3, 40), (40, 5), (3, 5)))
    with Wide(adds_c=True) as rule:
        c2 = c.clone()
        c2.addmm_(a, b)
        with pytest.raises(ArgumentError, match="addmm under wide\\(\\) takes alpha=1 only"):
            torch.addmm(c, a, b, alpha=2)
        w = b.clone().requires_grad_(True)
        y = a @ w
    y.sum().backward()  # after the block: the graph keeps its rule
    assert torch.equal(c2, (a.double() @ b.double() + c.double()).float())
    assert torch.allclose(w.grad, _wide(a.t(), torch.ones(3, 5)), rtol=0, atol=1e-6)
    assert [entry[0] for entry in rule.log] == ["addmm", "matmul", "backward grad_B"]


def test_second_order_gradients_run_through_the_rule():
    """create_graph=True: the backward's products are the rule's, differentiable in their turn (the grad of
    sum(H * (G @ B^T)) w.r.t. B is (G^T @ H)^T, by the rule), not detached."""
    g = torch.Generator().manual_seed(2)
    a, b, gy, h = (torch.randn(*s, generator=g) for s in ((3, 40), (40, 5), (3, 5), (3, 40)))
    a.requires_grad_(True)
    b.requires_grad_(True)
    with Wide() as rule:
        y = a @ b
        ga, = torch.autograd.grad((y * gy).sum(), a, create_graph=True)
        assert ga.grad_fn is not None
        (ga * h).sum().backward()
    assert torch.equal(ga.detach(), _wide(gy, b.detach().t()))
    assert torch.equal(b.grad, _wide(gy.t(), h).t())
    assert [entry[0] for entry in rule.log].count("backward grad_B") == 2  # first order, and the second's


def test_out_of_another_dtype_or_device_is_refused_as_torch_refuses_it():
    a, b = torch.ones(2, 3), torch.ones(3, 4)
    with pytest.raises(RuntimeError, match="dtype"):
        torch.mm(a, b, out=torch.empty(0, dtype=torch.float64))  # torch itself, outside a block
    with Wide() as rule:
        with pytest.raises(RuntimeError, match="out= is a torch.float64 tensor on cpu and the result a "
                                               "torch.float32 one on cpu: torch refuses this too"):
            torch.mm(a, b, out=torch.empty(0, dtype=torch.float64))
        with pytest.raises(RuntimeError, match="cross-device"):  # a meta out: the call is torch's own
            torch.mm(a, b, out=torch.empty(0, device="meta"))
        with pytest.raises(RuntimeError, match="out= is a torch.float16"):
            torch.addmm(torch.ones(2, 4), a, b, out=torch.empty(0, dtype=torch.float16))
    assert rule.log == []  # refused before any product ran
    with pytest.raises(RuntimeError, match="out= is a torch.float32 tensor on meta and the result a torch.float32 "
                                           "one on cpu"):
        front.with_out(torch.ones(2), torch.empty(0, device="meta"))


def test_meta_tensors_run_natively_for_their_shapes():
    with Wide() as rule:
        meta = torch.mm(torch.ones(2, 3, device="meta"), torch.ones(3, 4, device="meta"))
        lin = F.linear(torch.empty(5, 2, 3, device="meta"), torch.empty(4, 3, device="meta"))
    assert meta.is_meta and meta.shape == (2, 4) and lin.is_meta and lin.shape == (5, 2, 4)
    assert rule.log == []  # nothing reached the rule


@pytest.mark.slow  # FakeTensorMode imports torch._dynamo: seconds, once
def test_fake_tensors_run_natively_for_their_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with Wide() as rule:
        with FakeTensorMode() as fake:
            faked = fake.from_tensor(torch.ones(2, 3)) @ fake.from_tensor(torch.ones(3, 4))
    assert type(faked).__name__ == "FakeTensor" and faked.shape == (2, 4) and rule.log == []


def test_a_thread_started_inside_a_block_is_warned_of_once():
    import threading
    import warnings

    seen = []

    def work():
        seen.append(len(torch.overrides._get_current_function_mode_stack()))

    start = threading.Thread.start
    with Wide():
        with pytest.warns(RuntimeWarning, match="a thread started inside wide\\(\\) runs torch's matmuls natively"):
            t = threading.Thread(target=work)
            t.start()
            t.join()
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # once per block
            t = threading.Thread(target=work)
            t.start()
            t.join()
    assert seen == [0, 0] and threading.Thread.start is start  # restored after the block
