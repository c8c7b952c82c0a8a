"""A tiny transformer's logits and one training step under several devices' arithmetic (bf.torch.emulate).

Two layers, d_model 32, 2 heads, sequence 8, fp16 weights on the CPU, built here (no downloads).  Each
device runs the same weights and batch: H100 (its probed cuBLAS model), MI300X and V100 (their instruction
models chained over K, the fp32 sum rounded once to fp16: no library model is known for them), and an fp8
design (the H100's e4m3 wgmma block, 13 fraction bits kept, inputs scaled per tensor into e4m3) with and
without promotion to an IEEE fp32 sum every 128 products.  The three GPUs accumulate in fp32 in different
ways (blocks of 16 products, 25 bits, truncated; 8, 24 bits, rounded to nearest; 4, 23 bits, truncated), so
their fp16 results part where an fp32 sum lies near an fp16 rounding boundary or where the sum cancels: up
to 2.5 ulps apart in the logits' layers and 5 in the gradients (whose sums over the batch cancel) at the
default batch, against hundreds for the fp8 design.  The forward GEMMs have K <= 64, so promotion shows only
in the training step, whose weight gradients sum over the batch: K = 32 x 8 = 256 (an ulp in a few of them).

    PYTHONPATH=src python examples/emulate_transformer.py [--batch 32]
"""

from __future__ import annotations

import argparse
import copy
import math

import torch
import torch.nn.functional as F
from torch import nn

import blockfma as bf
from blockfma.report import table

D_MODEL, HEADS, SEQ, VOCAB, BATCH = 32, 2, 8, 40, 32


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v, self.out = (nn.Linear(D_MODEL, D_MODEL) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        split = lambda t: t.view(b, s, HEADS, D_MODEL // HEADS).transpose(1, 2)  # noqa: E731
        y = F.scaled_dot_product_attention(split(self.q(x)), split(self.k(x)), split(self.v(x)), is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, s, D_MODEL))


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.attn, self.norm2 = nn.LayerNorm(D_MODEL), Attention(), nn.LayerNorm(D_MODEL)
        self.up, self.act, self.down = nn.Linear(D_MODEL, 2 * D_MODEL), nn.GELU(), nn.Linear(2 * D_MODEL, D_MODEL)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.down(self.act(self.up(self.norm2(x))))


class TinyTransformer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed, self.pos = nn.Embedding(VOCAB, D_MODEL), nn.Parameter(0.1 * torch.randn(SEQ, D_MODEL))
        self.layers = nn.ModuleList([Block(), Block()])
        self.norm, self.head = nn.LayerNorm(D_MODEL), nn.Linear(D_MODEL, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.pos
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))


GPUS = ["H100", "MI300X", "V100"]


def fp8_designs() -> list:
    fp8 = bf.device("H100").model("e4m3fn", "fp32", instruction="wgmma")
    return [bf.torch.emulate(model=fp8, name="fp8"),
            bf.torch.emulate(model=fp8.replace(c_entry="after", instruction_k=128), name="fp8 promote/128")]


def apart(tensors: dict[str, torch.Tensor]) -> float:
    """The largest difference between any two of ``tensors`` (ulps of fp16 at the first one's largest value)."""
    names = list(tensors)
    return max(bf.torch.ulps(tensors[a], tensors[b], torch.float16) for i, a in enumerate(names) for b in names[i + 1:])


def grads(net: nn.Module, tokens: torch.Tensor, emu=None) -> tuple[float, dict[str, torch.Tensor]]:
    """The loss and every parameter's gradient of one next-token step (under ``emu`` if given)."""
    net.zero_grad()
    if emu is None:
        logits = net(tokens)
    else:
        with emu:
            logits = net(tokens)
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB).float(), tokens[:, 1:].reshape(-1))
    if emu is None:
        loss.backward()
    else:
        with emu:
            loss.backward()
    return float(loss.detach()), {n: p.grad.detach().clone() for n, p in net.named_parameters()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=BATCH, help=f"sequences per batch (default {BATCH}; the "
                        "weight gradients sum batch x 8 products, so promotion every 128 shows above 16)")
    batch = parser.parse_args().batch
    if batch < 1:
        parser.error(f"--batch {batch}: must be at least 1")
    torch.manual_seed(0)
    net = TinyTransformer().half()
    tokens = torch.randint(0, VOCAB, (batch, SEQ))

    print("Logits, layer by layer: largest difference from the fp64 run (ulps of fp16 at the layer's largest value;\n"
          "rel: ||x - ref|| / ||ref|| in the 2-norm) and between the devices")
    for devices in (GPUS, fp8_designs()):
        print(bf.torch.divergence(net, tokens, devices=devices).text(), end="\n\n")

    ref_net = copy.deepcopy(net).double()
    ref_loss, ref_grads = grads(ref_net, tokens)
    rows: dict[str, dict] = {n: {"parameter": n} for n in ref_grads}
    losses = {"fp64": ref_loss}
    got: dict[str, dict[str, torch.Tensor]] = {}
    for emu in [bf.torch.emulate(d) for d in GPUS] + fp8_designs():
        trained = copy.deepcopy(net)
        losses[emu.name], got[emu.name] = grads(trained, tokens, emu)
        torch.optim.SGD(trained.parameters(), lr=0.1).step()
        for n, t in got[emu.name].items():
            rows[n][f"{emu.name} ulps"] = float(f"{bf.torch.ulps(t, ref_grads[n], torch.float16):.3g}")
    fp8 = [d.name for d in fp8_designs()]
    for n, row in rows.items():
        row["GPUs apart"] = float(f"{apart({d: got[d][n] for d in GPUS}):.3g}")
        row["fp8 designs apart"] = float(f"{apart({d: got[d][n] for d in fp8}):.3g}")
    print("One SGD step: loss " + ", ".join(f"{k} {v:.6f}" for k, v in losses.items()))
    print("Gradients: largest difference from the fp64 gradients and between the GPUs and the fp8 designs (ulps of\n"
          "fp16 at the largest), the 8 on which the GPUs differ most")
    keep = sorted(rows.values(), key=lambda r: -r["GPUs apart"])[:8]
    print(table(keep, list(keep[0])))
    assert all(math.isfinite(v) for v in losses.values())


if __name__ == "__main__":
    main()
