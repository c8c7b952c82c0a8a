"""``divergence``: a module's layers run under several devices' arithmetic and against a float64 reference.

Every leaf module's output is caught by a forward hook: once in a float64 copy of the module run natively
(the reference), once per device under :func:`blockfma.torch.emulate`, each on a copy in eval mode (the
caller's module untouched).  Per layer and device the table gives the largest difference from the reference
(:func:`ulps`), the relative difference ||x - ref||_2 / ||ref||_2, and the largest difference between any two
devices, in ulps of the dtype at the first device's largest value.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..model import Model
from ..optional import require
from ..report import table
from .emulate import Emulation, emulate

__all__ = ["divergence", "Divergence", "ulps"]


def ulps(x: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> float:
    """max |x - ref| in units of the last place of ``dtype`` at the largest finite |ref| (normwise: a
    difference near a zero of the layer counts as much as one at its largest value).  NaN where x has a NaN
    that ref lacks or the other way round; both NaN counts as equal."""
    fi = torch.finfo(dtype)
    x64, r64 = x.detach().double().cpu().reshape(-1), ref.detach().double().cpu().reshape(-1)
    if x64.numel() == 0:
        return 0.0
    nan_x, nan_r = torch.isnan(x64), torch.isnan(r64)
    if bool((nan_x != nan_r).any()):
        return float("nan")
    keep = ~nan_x
    x64, r64 = x64[keep], r64[keep]
    same = x64 == r64  # equal infinities too
    finite = r64[torch.isfinite(r64)].abs()
    top = max(float(finite.max()) if finite.numel() else 0.0, fi.smallest_normal)
    ulp = 2.0 ** math.floor(math.log2(min(top, fi.max))) * fi.eps
    diff = torch.where(same, torch.zeros_like(x64), (x64 - r64).abs())
    return float(diff.max()) / ulp if diff.numel() else 0.0


def _relative(x: torch.Tensor, ref: torch.Tensor) -> float:
    """||x - ref||_2 / ||ref||_2 over the elements finite in both (0 where ref is all zero and x equals it)."""
    x64, r64 = x.detach().double().cpu().reshape(-1), ref.detach().double().cpu().reshape(-1)
    ok = torch.isfinite(r64) & torch.isfinite(x64)
    num, den = float(torch.linalg.vector_norm(x64[ok] - r64[ok])), float(torch.linalg.vector_norm(r64[ok]))
    return num / den if den else (0.0 if num == 0 else float("inf"))


def _first_tensor(out: Any) -> torch.Tensor | None:
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)):
        return next((t for t in map(_first_tensor, out) if t is not None), None)
    return None


def _capture(module: torch.nn.Module, inputs: Sequence[Any]) -> tuple[dict[str, torch.Tensor], Any]:
    """Each leaf module's (last) output by a forward hook, named ``name`` or ``name#2`` for later calls."""
    outs: dict[str, torch.Tensor] = {}
    hooks = []
    for name, mod in module.named_modules():
        if name and not any(True for _ in mod.children()):
            def hook(_m: Any, _i: Any, out: Any, name: str = name) -> None:
                t = _first_tensor(out)
                if t is not None:
                    key, n = name, 1
                    while key in outs:
                        n += 1
                        key = f"{name}#{n}"
                    outs[key] = t.detach().clone()
            hooks.append(mod.register_forward_hook(hook))
    try:
        with torch.no_grad():
            result = module(*inputs)
    finally:
        for h in hooks:
            h.remove()
    final = _first_tensor(result)
    if final is not None:
        outs["(output)"] = final.detach().clone()
    return outs, result


@dataclass
class Divergence:
    """The per-layer table: ``rows`` (layer, dtype, shape, then ``<device> ulps`` and ``<device> rel`` per
    device and ``devices apart (ulps)``), ``devices`` (the labels), ``outputs`` (captured tensors per label,
    ``"fp64"`` the reference)."""

    rows: list[dict[str, Any]]
    devices: list[str]
    outputs: dict[str, dict[str, torch.Tensor]] = field(repr=False)

    @property
    def columns(self) -> list[str]:
        return ["layer", "dtype", "shape"] + [f"{d} {w}" for d in self.devices for w in ("ulps", "rel")] + \
            ["devices apart (ulps)"]

    def text(self) -> str:
        """The table as plain text (ulps vs the fp64 reference, relative normwise differences)."""
        rows = [{k: (float(f"{v:.3g}") if isinstance(v, float) else v) for k, v in r.items()} for r in self.rows]
        return table(rows, self.columns)

    __str__ = text

    def figure(self, path: Any = None) -> Any:
        """A matplotlib figure: per layer, the largest ulps difference from fp64 per device (log scale);
        saved as PNG to ``path`` if given (:func:`blockfma.plot.save`)."""
        plt = require("matplotlib.pyplot", extra="plot", needed_by="Divergence.figure", what="matplotlib")
        fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(self.rows)), 4))
        x = np.arange(len(self.rows))
        width = 0.8 / max(1, len(self.devices))
        for i, d in enumerate(self.devices):
            vals = [max(r[f"{d} ulps"], 0.1) for r in self.rows]
            ax.bar(x + i * width, vals, width, label=d)
        ax.set_yscale("log")
        ax.set_xticks(x + 0.4 - width / 2, [r["layer"] for r in self.rows], rotation=60, ha="right")
        ax.set_ylabel("largest difference from fp64 (ulps)")
        ax.legend()
        fig.tight_layout()
        if path is not None:
            from ..plot import save

            save(fig, path)
        return fig


def divergence(model: torch.nn.Module, inputs: Any, devices: Sequence[Any] = ("H100", "MI300X")) -> Divergence:
    """Run ``model`` on ``inputs`` (a tensor or a tuple of arguments) under each of ``devices`` (preset
    names, Models, or ``emulate(...)`` objects; one of them alone stands for a list of one) and in float64
    natively, each on a copy of ``model`` in eval mode (``model``'s mode and buffers unchanged); the table."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"divergence: model must be a torch.nn.Module, not {type(model).__name__}")
    args = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    if isinstance(devices, (str, Model, Emulation)):  # one device, not a sequence of its characters
        devices = [devices]
    emus = [d if isinstance(d, Emulation) else emulate(model=d) if isinstance(d, Model) else emulate(d)
            for d in devices]
    if not emus:
        raise ValueError("divergence: devices=[] names nothing; pass e.g. devices=['H100', 'MI300X']")
    labels = [e.name for e in emus]
    if len(set(labels)) != len(labels):
        raise ValueError(f"divergence: devices repeat a label ({labels}); pass emulate(..., name=...) to tell "
                         "them apart")
    ref_model = copy.deepcopy(model).eval().to(torch.float64)
    ref_args = tuple(a.to(torch.float64) if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                     for a in args)
    outputs = {"fp64": _capture(ref_model, ref_args)[0]}
    for label, emu in zip(labels, emus):
        with emu:
            outputs[label] = _capture(copy.deepcopy(model).eval(), args)[0]
    rows = []
    for layer, ref in outputs["fp64"].items():
        first = outputs[labels[0]].get(layer)
        if first is None or not first.is_floating_point():
            continue
        row: dict[str, Any] = {"layer": layer, "dtype": str(first.dtype).removeprefix("torch."),
                               "shape": "x".join(map(str, first.shape))}
        for label in labels:
            x = outputs[label][layer]
            row[f"{label} ulps"] = ulps(x, ref, x.dtype)
            row[f"{label} rel"] = _relative(x, ref)
        row["devices apart (ulps)"] = max((ulps(outputs[a][layer], outputs[b][layer], first.dtype)
                                           for i, a in enumerate(labels) for b in labels[i + 1:]), default=0.0)
        rows.append(row)
    return Divergence(rows, labels, outputs)
