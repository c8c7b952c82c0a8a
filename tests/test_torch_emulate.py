"""bf.torch.emulate and bf.torch.divergence, on the CPU.

The oracle for the routing is ``bf.gemm`` called here with the model the emulation reports for the dtype,
on the tensors' values: results are compared as bit patterns (NaN and -0 included)."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import blockfma as bf  # noqa: E402
from blockfma.torch_switches import matmul_switches  # noqa: E402
from helpers import REPO  # noqa: E402

INT = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32, torch.float64: torch.int64}


def bits(t):
    return t.contiguous().view(INT[t.dtype])


def same_bits(x, y):
    assert x.dtype == y.dtype and x.shape == y.shape, (x.dtype, y.dtype, x.shape, y.shape)
    assert torch.equal(bits(x), bits(y))


def oracle(emu, A, B, C=None):
    """bf.gemm with the emulation's model for the dtype, on A (m, k), B (k, n), C (m, n)."""
    route = emu.route(A.dtype)
    assert not route.stored and route.model is not None
    f = lambda t: None if t is None else _np(t)  # noqa: E731
    out = bf.gemm(f(A), f(B), f(C), model=route.model, round_inputs=route.round_inputs)
    if A.dtype == torch.bfloat16:
        return torch.from_numpy(out.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(out))


def _np(t):
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:  # fp32 holds bf16 exactly; NaN payloads of these tests are bf16's own
        return t.float().numpy()
    return t.numpy()


def data(*shape, dtype=torch.float16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


@pytest.mark.parametrize("dev,dtype", [("H100", torch.float16), ("H100", torch.bfloat16), ("MI300X", torch.float16),
                                       ("MI300X", torch.bfloat16), ("V100", torch.float16), ("A100", torch.bfloat16)])
def test_each_op_equals_gemm_with_the_model(dev, dtype):
    A, B, C = data(6, 40, dtype=dtype), data(40, 5, dtype=dtype, seed=1), data(6, 5, dtype=dtype, seed=2)
    bias = data(5, dtype=dtype, seed=3)
    with bf.torch.emulate(dev) as emu:
        want = oracle(emu, A, B)
        same_bits(A @ B, want)
        same_bits(torch.matmul(A, B), want)
        same_bits(torch.mm(A, B), want)
        same_bits(A.mm(B), want)
        same_bits(torch.addmm(C, A, B), oracle(emu, A, B, C))
        same_bits(F.linear(A, B.t(), bias), oracle(emu, A, B, bias.expand(6, 5)))
        batch = torch.stack([A, A.flip(0)])
        same_bits(torch.bmm(batch, torch.stack([B, B])), torch.stack([want, oracle(emu, A.flip(0), B)]))
        same_bits(torch.baddbmm(C.expand(2, 6, 5), batch, B.expand(2, 40, 5))[1], oracle(emu, A.flip(0), B, C))
    assert {o.op for o in emu.log} >= {"matmul", "mm", "addmm", "linear", "bmm", "baddbmm"}
    assert all(o.route.model is not None for o in emu.log)


def test_library_model_choice_and_note():
    with bf.torch.emulate("H100") as h:
        pass
    assert "cublas" in h.route(torch.float16).note
    assert h.route(torch.float16).model == bf.device("H100").model("fp16", "fp16", instruction="cublas")
    mi = bf.torch.emulate("MI300X")
    r = mi.route(torch.bfloat16)
    assert "no library model" in r.note
    assert r.model.c_entry == "end" and r.model.accumulator_format.name == "fp32"
    assert r.model.output_format.name == "bf16"
    v100 = bf.device("V100").model("fp16", "fp32")  # the fp32-accumulating instruction, not fp16->fp16
    assert bf.torch.emulate("V100").route(torch.float16).model == v100.replace(
        output_format="fp16", accumulator_format="fp32", c_entry="end",
        name=bf.torch.emulate("V100").route(torch.float16).model.name)
    with mi:
        torch.ones(2, 3, dtype=torch.bfloat16) @ torch.ones(3, 2, dtype=torch.bfloat16)
    assert "no library model" in mi.report()


def test_batched_broadcast_noncontiguous_and_1d():
    A = data(3, 1, 4, 16)  # broadcast batch (3, 2)
    B = data(2, 16, 5, seed=1)
    Bt = data(2, 5, 16, seed=4).transpose(-1, -2)  # non-contiguous
    with bf.torch.emulate("V100") as emu:
        D = A @ B
        Dt = A @ Bt
        v = A[0, 0, 0] @ B[1]  # 1-D @ 2-D
        w = A[0, 0] @ B[0, :, 0]  # 2-D @ 1-D
        folded = data(2, 3, 16) @ B[0]  # a batched A with a 2-D B: one GEMM over the folded rows
    assert D.shape == (3, 2, 4, 5) and v.shape == (5,) and w.shape == (4,)
    for i in range(3):
        for j in range(2):
            same_bits(D[i, j], oracle(emu, A[i, 0], B[j]))
            same_bits(Dt[i, j], oracle(emu, A[i, 0], Bt[j]))
    same_bits(v, oracle(emu, A[0, 0, 0][None], B[1])[0])
    same_bits(w, oracle(emu, A[0, 0], B[0, :, :1])[:, 0])
    same_bits(folded.reshape(6, 5), oracle(emu, data(2, 3, 16).reshape(6, 16), B[0]))


def test_fp32_tf32_switch_and_fp64_native():
    A, B = data(4, 20, dtype=torch.float32), data(20, 3, dtype=torch.float32, seed=1)
    A[0, 0] = float("nan")
    emu = bf.torch.emulate("H100")
    with matmul_switches(torch, tf32=True), emu:
        t = A @ B
        assert emu.route(torch.float32).round_inputs == "device"
        same_bits(t, oracle(emu, A, B))
    with matmul_switches(torch, tf32=False), emu:
        s = A @ B
        assert "not modelled" in emu.route(torch.float32).note
        same_bits(s, oracle(emu, A, B))
    assert not torch.equal(bits(t[1:]), bits(s[1:]))  # TF32 reads 10 fraction bits: other results
    with bf.torch.emulate("MI300X") as mi:
        same_bits(A @ B, oracle(mi, A, B))
        assert mi.route(torch.float32).model == bf.device("MI300X").model("fp32", "fp32")
        d = A.double() @ B.double()
    same_bits(d, A.double() @ B.double())
    assert mi.log[-1].route.model is None and mi.log[-1].dtype == "float64"


def test_mode_restores_and_nests():
    A, B = data(3, 70), data(70, 2, seed=1)
    native = A @ B
    with bf.torch.emulate("V100") as v:
        inside = A @ B
    after = A @ B
    assert torch.equal(bits(after), bits(native)) and len(v.log) == 1
    same_bits(inside, oracle(v, A, B))
    own = bf.device("A100").model("fp16", "fp32")
    with bf.torch.emulate("V100") as outer:
        with bf.torch.emulate("H100", overrides={torch.float16: own}) as inner:
            x = A @ B
        y = A @ B
    assert len(inner.log) == 1 and len(outer.log) == 1
    assert inner.log[0].route.model.block_width == 8 and outer.log[0].route.model.block_width == 4
    same_bits(x, oracle(inner, A, B))
    same_bits(y, oracle(outer, A, B))
    by_name = bf.torch.emulate("H100", overrides={"fp16": "mma"})
    assert by_name.route(torch.float16).model.c_entry == "end"


def test_nan_inf_follow_the_device_rules():
    A, B = data(2, 8), data(8, 2, seed=1)
    A[0, 1], A[1, 2], B[2, 0] = float("inf"), float("nan"), float("-inf")
    for dev in ("H100", "MI300X"):
        with bf.torch.emulate(dev) as emu:
            same_bits(A @ B, oracle(emu, A, B))


def test_autograd_sgd_step_of_a_tiny_mlp():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3)).half()
    x, target = data(5, 12, seed=7), data(5, 3, seed=8)
    m = bf.torch.emulate("V100").route(torch.float16).model
    g = lambda a, b, c=None: torch.from_numpy(bf.gemm(a.detach().numpy(), b.detach().numpy(),  # noqa: E731
                                                       None if c is None else c.detach().numpy(), model=m))
    W1, b1, W2, b2 = (p.detach().clone() for p in net.parameters())
    # by hand: forward and backward GEMMs through bf.gemm, elementwise work as torch does it
    h_pre = g(x, W1.t(), b1.expand(5, 16))
    h = torch.relu(h_pre)
    y = g(h, W2.t(), b2.expand(5, 3))
    ref_y = y.detach().clone().requires_grad_()
    loss = ((ref_y - target) ** 2).mean()
    loss.backward()
    gy = ref_y.grad
    gW2, gb2 = g(gy.t(), h), gy.sum(0)
    gh = g(gy, W2)
    gh_pre = gh * (h_pre > 0)
    gW1, gb1 = g(gh_pre.t(), x), gh_pre.sum(0)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    with bf.torch.emulate("V100"):
        out = net(x)
        ((out - target) ** 2).mean().backward()
    same_bits(out.detach(), y)
    for p, want in zip(net.parameters(), (gW1, gb1, gW2, gb2)):
        same_bits(p.grad, want)
    opt.step()
    for p, w0, gw in zip(net.parameters(), (W1, b1, W2, b2), (gW1, gb1, gW2, gb2)):
        same_bits(p.detach(), w0.add(gw, alpha=-0.1))


def test_sdpa_math_path_is_decomposed_and_emulated():
    q, k, v = data(1, 2, 8, 16), data(1, 2, 8, 16, seed=1), data(1, 2, 8, 16, seed=2)
    with bf.torch.emulate("H100") as emu:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    ops = [o.op for o in emu.log]
    assert ops == ["sdpa q@k^T", "sdpa attn@v"]
    with bf.torch.emulate("H100"):
        scores = (q @ k.transpose(-2, -1)) * (1 / 4.0)
        mask = torch.ones(8, 8, dtype=torch.bool).tril().logical_not()
        w = torch.softmax(scores + torch.zeros(8, 8, dtype=q.dtype).masked_fill(mask, float("-inf")), dim=-1)
        same_bits(out, w @ v)
    assert (out - F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)).abs().max() < 1e-2


def test_scaled_fp8_design():
    fp8 = bf.device("H100").model("e4m3fn", "fp32", instruction="wgmma")
    emu = bf.torch.emulate(model=fp8, name="fp8")
    r = emu.route(torch.float16)
    assert r.scaled and r.stored
    A, B = data(4, 64), data(64, 3, seed=1)
    with emu:
        D = A @ B
    # oracle: inputs powers of two apart from e4m3 values already (scale 2**e picked exactly), by hand
    a, b = A.double().numpy(), B.double().numpy()
    ea = int(np.floor(np.log2(448 / np.abs(a).max())))
    eb = int(np.floor(np.log2(448 / np.abs(b).max())))
    qa = bf.formats.round("e4m3fn", np.ldexp(a, ea))
    qb = bf.formats.round("e4m3fn", np.ldexp(b, eb))
    want = np.ldexp(bf.gemm(qa, qb, model=fp8).astype(np.float64), -(ea + eb)).astype(np.float16)
    same_bits(D, torch.from_numpy(want))
    promoted = fp8.replace(c_entry="after", instruction_k=128)
    with bf.torch.emulate(model=promoted) as p:
        data(4, 512) @ data(512, 3, seed=1)
    assert p.route(torch.float16).model.instruction_k == 128


@pytest.mark.parametrize("make,match", [
    (lambda: bf.torch.emulate("NoSuchGPU"), "unknown device 'NoSuchGPU'"),
    (lambda: bf.torch.emulate(), "name a device preset"),
    (lambda: bf.torch.emulate("H100", model=bf.device("H100").model()), "not both"),
    (lambda: bf.torch.emulate("H100", overrides={torch.int8: "mma"}), "keys must be"),
    (lambda: bf.torch.emulate("H100", overrides={torch.float16: "nope"}), "has no instruction 'nope'"),
    (lambda: bf.torch.emulate("V100", overrides={torch.bfloat16: "mma"}), "takes no bf16 inputs"),
    (lambda: bf.torch.emulate("H100", overrides=[torch.float16]), "^overrides=.*: must be a dict"),
    (lambda: bf.torch.emulate("H100", backend=0), "backend must be one of"),
    (lambda: bf.torch.emulate("H100", backend="numpi"), "backend must be one of"),
    (lambda: bf.torch.emulate("H100", name=5), "^name=5: must be a string"),
])
def test_bad_arguments_one_line(make, match):
    with pytest.raises(ValueError, match=match) as e:
        make()
    assert "\n" not in str(e.value)


def test_dtype_the_device_lacks_and_other_errors():
    A = data(2, 4, dtype=torch.bfloat16)
    with bf.torch.emulate("V100"):
        with pytest.raises(ValueError, match="V100 has no bf16 matrix model .*fp16") as e:
            A @ A.t()
        assert "\n" not in str(e.value)
        with pytest.raises(ValueError, match="different dtypes"):
            torch.matmul(data(2, 4), data(4, 2, dtype=torch.float32))
        with pytest.raises(ValueError, match="alpha=2"):
            torch.addmm(data(2, 2), data(2, 4), data(4, 2), alpha=2)
        with pytest.raises(ValueError, match="cannot be multiplied"):
            data(2, 4) @ data(3, 2)


def test_divergence_table():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.Linear(8, 4)).half()
    x = data(3, 8)
    div = bf.torch.divergence(net, x, devices=["H100", "V100"])
    text = div.text()
    assert [r["layer"] for r in div.rows] == ["0", "1", "2", "(output)"]
    assert "H100 ulps" in text and "V100 rel" in text
    alone = bf.torch.divergence(net, x, devices="V100")  # one name stands for [name], not its letters
    assert [c for c in alone.rows[0] if c.endswith(" ulps")] == ["V100 ulps"]
    assert alone.rows[0]["V100 ulps"] == div.rows[0]["V100 ulps"]
    ref = div.outputs["fp64"]["0"]
    assert div.rows[0]["H100 ulps"] == bf.torch.ulps(div.outputs["H100"]["0"], ref,
                                                                                   torch.float16)
    # a hand-made value: one fp16 ulp at 1.0 is 2**-10
    one = torch.tensor([1.0], dtype=torch.float16)
    assert bf.torch.ulps(one + 2**-10, torch.tensor([1.0], dtype=torch.float64),
                                                   torch.float16) == 1.0


def test_divergence_runs_copies_in_eval_mode_and_leaves_the_module_alone():
    """Dropout and BatchNorm in train mode: the caller's module keeps its mode, parameters and buffers, and a
    device compared with itself is 0 ulps apart (train mode would drop different units in each run)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.Dropout(0.5),
                              torch.nn.Linear(16, 4)).half().train()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    div = bf.torch.divergence(net, data(6, 8), devices=["H100", bf.torch.emulate("H100", name="H100 again")])
    assert net.training and all(m.training for m in net.modules())
    after = net.state_dict()
    for k, v in before.items():  # running_mean, running_var, num_batches_tracked, weights: the same bits
        assert torch.equal(after[k].reshape(-1).view(torch.uint8), v.reshape(-1).view(torch.uint8)), k
    assert [r["devices apart (ulps)"] for r in div.rows] == [0.0] * 5
    assert all(p.grad is None for p in net.parameters())


def test_second_order_gradients_are_emulated():
    """create_graph=True: the gradient of sum(H * grad_A) w.r.t. B is (G^T @ H)^T by the device's model."""
    A, B = data(4, 24).requires_grad_(), data(24, 3, seed=1).requires_grad_()
    G, H = data(4, 3, seed=2), data(4, 24, seed=3)
    with bf.torch.emulate("MI300X") as emu:
        ga, = torch.autograd.grad(((A @ B) * G).sum(), A, create_graph=True)
        (ga * H).sum().backward()
    same_bits(ga.detach(), oracle(emu, G, B.detach().t()))
    same_bits(B.grad, oracle(emu, G.t(), H).t())
    assert [o.op for o in emu.log] == ["matmul", "backward grad_A", "backward grad_B", "backward grad_B"]


def test_example_runs_and_prints_the_table():
    out = subprocess.run([sys.executable, str(REPO / "examples" / "emulate_transformer.py"), "--batch", "2"],
                         capture_output=True, text=True, timeout=300, env={"PYTHONPATH": str(REPO / "src"), "PATH": ""})
    assert out.returncode == 0, out.stderr[-2000:]
    assert re.search(r"^layer +dtype +shape +H100 ulps +H100 rel +MI300X ulps", out.stdout, re.M)
    assert re.search(r"^layer +dtype +shape +fp8 ulps +fp8 rel +fp8 promote/128 ulps", out.stdout, re.M)
    assert "\nhead " in out.stdout and re.search(r"^parameter .* GPUs apart +fp8 designs apart$", out.stdout, re.M)
    first = out.stdout.split("GPUs apart  fp8 designs apart\n")[1].splitlines()[1].split()
    assert float(first[-2]) > 0  # the GPUs' gradients differ somewhere, even at batch 2
    assert "One SGD step: loss fp64" in out.stdout


def test_backward_after_the_block_is_still_emulated_and_figure_draws(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    A = data(4, 24).requires_grad_()
    B = data(24, 3, seed=1).requires_grad_()
    with bf.torch.emulate("MI300X") as emu:
        D = A @ B
    D.float().sum().backward()  # outside the block: the graph recorded under emulation keeps its routes
    assert [o.op for o in emu.log] == ["matmul", "backward grad_A", "backward grad_B"]
    ones = torch.ones(4, 3, dtype=torch.float16)
    same_bits(A.grad, oracle(emu, ones, B.detach().t()))
    same_bits(B.grad, oracle(emu, A.detach().t(), ones))
    net = torch.nn.Sequential(torch.nn.Linear(4, 4)).half()
    div = bf.torch.divergence(net, data(2, 4), devices=["H100"])
    div.figure(tmp_path / "div.png")
    assert (tmp_path / "div.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="is a folder; results are written to regular files only"):
        div.figure(tmp_path)  # the safe writer's refusal, not matplotlib's traceback


needs_h100 = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                                reason="needs an H100 (the cublas preset is the H100's) visible to torch")


@pytest.mark.gpu
@needs_h100
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_emulated_h100_gives_cublas_bits_on_an_h100(dtype):
    """fp16/bf16 GEMMs with K = 64 (not split over K) on the card against emulate("H100") of the same
    tensors on the card: same bits, and the result comes back on the card."""
    A, B, C = (data(*s, dtype=dtype, seed=i).cuda() for i, s in enumerate([(256, 64), (64, 128), (256, 128)]))
    native = torch.addmm(C, A, B)
    with bf.torch.emulate("H100"):
        emulated = torch.addmm(C, A, B)
    assert emulated.device == native.device
    same_bits(emulated.cpu(), native.cpu())
