"""``divergence``: a module's layers run under several devices' arithmetic and against a float64 reference.

Every leaf module's output is caught by a forward hook: once in a float64 copy of the module run natively
(the reference), once per device under :func:`blockfma.torch.emulate`, each on a copy in eval mode (the
caller's module untouched).  Per layer and device the table gives the largest difference from the reference
(:func:`ulps`), the relative difference ||x - ref||_2 / ||ref||_2, and the largest difference between any two
devices, in ulps of the dtype at the first device's largest value.  Where the model returns logits (a tensor
(..., vocab) or an object with ``.logits``, as Hugging Face models do) ``summary`` compares next-token
distributions too: KL divergence and top-1 agreement (float64, from the logits), perplexity on the input ids,
the first layer apart and, with ``generate=N``, the first greedy-decoding step apart.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..arguments import ArgumentError, Shown, integer
from ..model import Model
from ..optional import require
from ..report import table
from .emulate import Emulation, emulate

__all__ = ["divergence", "Divergence", "ulps"]

# a row compares `device` with `against` (fp64, or a device listed before it); docs/torch.md says how
SUMMARY = ["device", "against", "KL", "top-1", "perplexity", "first layer apart", "first step apart"]


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
    final = _first_tensor(result) if _logits(result) is None else _logits(result)
    if final is not None:
        outs["(output)"] = final.detach().clone()
    return outs, result


def _logits(out: Any) -> torch.Tensor | None:
    """A model's logits: a floating tensor it returns, or the ``.logits`` of what it returns (a ModelOutput)."""
    t = getattr(out, "logits", out)
    return t if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dim() else None


def _kl(p: torch.Tensor, q: torch.Tensor) -> float:
    """KL(P || Q) = sum P (log P - log Q), P and Q the softmax of the last dimension in float64, averaged over
    the positions (0 where log P == log Q, infinities included)."""
    lp, lq = torch.log_softmax(p.double(), -1), torch.log_softmax(q.double(), -1)
    return float(torch.where(lp == lq, 0.0, lp.exp() * (lp - lq)).sum(-1).mean())


def _perplexity(logits: torch.Tensor, ids: torch.Tensor | None) -> tuple[float | None, str]:
    """exp of the mean next-token cross-entropy of ``ids`` (position t's logits scoring id t+1), or why not."""
    if ids is None:
        return None, "perplexity: not computed, the first input is not a tensor of integer token ids"
    if logits.shape[:-1] != ids.shape or ids.shape[-1] < 2:
        return None, (f"perplexity: not computed, the logits' shape {tuple(logits.shape)} is not the ids' "
                      f"{tuple(ids.shape)} + (vocab,) with 2 or more tokens")
    lp = torch.log_softmax(logits[..., :-1, :].double(), -1)
    return math.exp(-float(lp.gather(-1, ids[..., 1:, None].long()).mean())), ""


def _same_bits(x: torch.Tensor, y: torch.Tensor) -> bool:
    return x.dtype == y.dtype and x.shape == y.shape and torch.equal(
        x.contiguous().reshape(-1).view(torch.uint8), y.contiguous().reshape(-1).view(torch.uint8))


def _first_layer(outputs: dict[str, dict[str, torch.Tensor]], a: str, b: str) -> str | None:
    """The first layer (in execution order) where ``a``'s outputs differ from ``b``'s: in their bits between
    two devices, by more than half an ulp (the rounding of the exact output) against the fp64 reference."""
    for layer, x in outputs[a].items():
        y = outputs[b].get(layer)
        if y is None or (b == "fp64" and not x.is_floating_point()):
            continue
        if not (ulps(x, y, x.dtype) <= 0.5 if b == "fp64" else _same_bits(x, y)):  # a NaN that fp64 lacks too
            return layer
    return None


def _first_step(a: torch.Tensor, b: torch.Tensor) -> int | None:
    """The first greedy step (from 1) whose token differs in any sequence of the batch."""
    steps = (a != b).reshape(-1, a.shape[-1]).any(0).nonzero()
    return int(steps[0]) + 1 if steps.numel() else None


def _greedy(module: torch.nn.Module, ids: torch.Tensor, steps: int) -> torch.Tensor:
    """``steps`` greedy tokens after ``ids``: the forward on the whole sequence each step (no cache, so any
    module mapping ids to logits works), argmax of the last position's logits."""
    seq = ids
    with torch.no_grad():
        for _ in range(steps):
            logits = _logits(module(seq))
            seq = torch.cat([seq, logits[..., -1, :].argmax(-1, keepdim=True).to(seq.dtype)], -1)
    return seq[..., ids.shape[-1]:]


@dataclass
class Divergence:
    """The per-layer table: ``rows`` (layer, dtype, shape, then ``<device> ulps`` and ``<device> rel`` per
    device and ``devices apart (ulps)``), ``devices`` (the labels), ``outputs`` (captured tensors per label,
    ``"fp64"`` the reference); the model-level table: ``summary`` (one row per device against fp64 and per
    pair of devices, :data:`SUMMARY`), ``tokens`` (the greedy tokens per label) and ``notes`` (metrics
    not computed, and why)."""

    rows: list[dict[str, Any]]
    devices: list[str]
    outputs: dict[str, dict[str, torch.Tensor]] = field(repr=False)
    summary: list[dict[str, Any]] = field(default_factory=list)
    tokens: dict[str, torch.Tensor] = field(default_factory=dict, repr=False)
    notes: list[str] = field(default_factory=list)

    @property
    def columns(self) -> list[str]:
        return ["layer", "dtype", "shape"] + [f"{d} {w}" for d in self.devices for w in ("ulps", "rel")] + \
            ["devices apart (ulps)"]

    def text(self) -> str:
        """The model-level table and its notes, then the per-layer table (ulps vs the fp64 reference, relative
        normwise differences), as plain text."""
        def short(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
            return [{k: (float(f"{v:.3g}") if isinstance(v, float) else v) for k, v in r.items()} for r in rows]
        cols = [c for c in SUMMARY if self.tokens or c != "first step apart"]
        parts = [table(short(self.summary), cols)] if self.summary else []
        return "\n\n".join(parts + ["\n".join(self.notes)] * bool(self.notes) + [table(short(self.rows), self.columns)])

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


def _token_ids(model: torch.nn.Module, args: tuple[Any, ...], generate: int) -> torch.Tensor | None:
    """The first input if it is a tensor of integer token ids, checked against the vocabulary of the model's
    input embedding (its ``get_input_embeddings()``, else its first ``nn.Embedding``) and for ``generate``."""
    first = args[0] if args else None
    ids = first if isinstance(first, torch.Tensor) and first.dim() and not (
        first.is_floating_point() or first.is_complex() or first.dtype == torch.bool) else None
    try:
        emb = model.get_input_embeddings()  # type: ignore[operator]
    except (AttributeError, NotImplementedError, TypeError):
        emb = next((m for m in model.modules() if isinstance(m, torch.nn.Embedding)), None)
    if ids is not None:
        vocab = getattr(emb, "num_embeddings", None)
        _check_vocab(ids, vocab, f"{type(model).__name__}'s embedding has {vocab} rows")
    if not generate:
        return ids
    if ids is None or len(args) > 1:
        raise ArgumentError("generate", generate, "decodes from token ids alone, and inputs is not one tensor of "
                            "integer ids", fix="pass inputs=ids (the other arguments would not grow with it)")
    head = getattr(model, "get_output_embeddings", None)
    if callable(head) and head() is None:
        raise ArgumentError("generate", generate, f"needs a generation head, and {type(model).__name__} has "
                            "none", fix="load a model with one (AutoModelForCausalLM, GPT2LMHeadModel, ...)")
    limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if isinstance(limit, int) and ids.shape[-1] + generate > limit:
        raise ArgumentError("generate", generate, f"with {ids.shape[-1]} input tokens exceeds the model's "
                            f"{limit} positions", use={"generate": max(limit - ids.shape[-1], 0)})
    return ids


def _check_vocab(ids: torch.Tensor, vocab: int | None, what: str) -> None:
    bad = ids[(ids < 0) | (ids >= vocab)] if vocab is not None else ids[ids < 0]
    if bad.numel():
        raise ArgumentError("inputs", Shown(f"<token id {int(bad[0])}>"), "is outside the vocabulary" +
                            (f" ({what})" if vocab is not None else ""),
                            fix=f"pass ids from 0 to {vocab - 1}" if vocab is not None else "pass ids of 0 or more")


def _summary(div: Divergence, ids: torch.Tensor | None, finals: dict[str, Any]) -> None:
    """Fill ``div.summary`` and ``div.notes`` from the final outputs (logits) and the greedy tokens."""
    logits = {k: _logits(v) for k, v in finals.items()}
    if any(t is None for t in logits.values()):
        div.notes.append("KL, top-1, perplexity: not computed, the model's output is not logits (a floating "
                         "tensor (..., vocab) or .logits)")
    ppl, why = _perplexity(logits["fp64"], ids) if logits["fp64"] is not None else (None, "")
    div.notes += [why] * bool(why)
    div.summary.append({"device": "fp64", "against": "-", "perplexity": ppl})
    labels = div.devices
    for a, b in [(d, "fp64") for d in labels] + [(b, a) for i, a in enumerate(labels) for b in labels[i + 1:]]:
        p, q = logits[b], logits[a]
        ok = p is not None and q is not None and p.shape == q.shape
        row = {"device": a, "against": b, "KL": _kl(p, q) if ok else None,
               "top-1": float((p.argmax(-1) == q.argmax(-1)).double().mean()) if ok else None,
               "perplexity": _perplexity(q, ids)[0] if b == "fp64" and q is not None else None,
               "first layer apart": _first_layer(div.outputs, a, b)}
        if div.tokens:
            row["first step apart"] = _first_step(div.tokens[a], div.tokens[b])
        div.summary.append(row)


def divergence(model: torch.nn.Module, inputs: Any, devices: Sequence[Any] = ("H100", "MI300X"), *,
               generate: int = 0) -> Divergence:
    """Run ``model`` on ``inputs`` (a tensor or a tuple of arguments) under each of ``devices`` (preset
    names, Models, or ``emulate(...)`` objects; one of them alone stands for a list of one) and in float64
    natively, each on a copy of ``model`` in eval mode (``model``'s mode and buffers unchanged); the tables.
    ``generate=N`` (from token ids alone, the model returning logits): N greedy decoding steps per run."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"divergence: model must be a torch.nn.Module, not {type(model).__name__}")
    generate = integer("generate", generate, least=0, most=4096)
    args = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    ids = _token_ids(model, args, generate)
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
    outputs, finals, tokens = {}, {}, {}
    outputs["fp64"], finals["fp64"] = _capture(ref_model, ref_args)
    ref_logits = _logits(finals["fp64"])
    if ids is not None and ref_logits is not None and ref_logits.shape[:-1] == ids.shape:
        _check_vocab(ids, ref_logits.shape[-1], f"the model's logits have {ref_logits.shape[-1]} entries")
    elif generate:
        got = type(finals["fp64"]).__name__ + (f" {tuple(ref_logits.shape)}" if ref_logits is not None else "")
        raise ArgumentError("generate", generate, f"needs logits of shape {tuple(ids.shape)} + (vocab,), and the "
                            f"model returns {got}", fix="pass a model that maps ids to logits (a tensor or .logits)")
    if generate:
        tokens["fp64"] = _greedy(ref_model, ids, generate)
    native: dict[str, int] = {}
    for label, emu in zip(labels, emus):
        start = len(emu.log)
        with emu:
            module = copy.deepcopy(model).eval()
            outputs[label], finals[label] = _capture(module, args)
            if generate:
                tokens[label] = _greedy(module, ids, generate)
        for o in emu.log[start:]:  # ops the emulation does not cover ran natively: the same in every run
            native[o.op] = native.get(o.op, 0) + (o.route.model is None)
    div = Divergence(_rows(outputs, labels), labels, outputs, tokens=tokens)
    _summary(div, ids, finals)
    ran = ", ".join(f"{op} x{n}" for op, n in native.items() if n)
    div.notes += [f"not emulated (native torch in every run, so not part of the differences): {ran}"] * bool(ran)
    return div


def _rows(outputs: dict[str, dict[str, torch.Tensor]], labels: list[str]) -> list[dict[str, Any]]:
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
    return rows
