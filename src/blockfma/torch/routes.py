"""Which model computes a torch matmul under ``bf.torch.emulate`` (its module docstring says the rules):
:class:`Route`, and the pure functions that choose one from a device (or ``model=``) for a dtype
(:func:`library`, :func:`override`), an fp8 ``_scaled_mm`` (:func:`fp8`) or a block-scaled one (:func:`block`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from .. import formats as _formats
from ..arguments import ArgumentError, Shown
from ..devices import Device, device as _device, rule_evidence
from ..evidence import Basis, Evidence
from ..model import Model
from . import orders

__all__ = ["Route", "BLOCK_KINDS", "PROMOTE_K", "FORMATS", "FP8", "DTYPES", "dtype_key", "wrap", "override",
           "library", "with_split", "split_key", "fp8", "block", "overrides"]

FORMATS = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}  #: the emulated dtypes
FP8 = {torch.float8_e4m3fn: "e4m3fn", torch.float8_e5m2: "e5m2", torch.float8_e4m3fnuz: "e4m3fnuz",
       torch.float8_e5m2fnuz: "e5m2fnuz"}
#: (operands "fp8" or "fp4", scale format, block) -> the block-scaled instruction's kind (its name after the
#: first dot: tcgen05.mxf4.block32 on the B200, mma.mxf4.block32 on the RTX 5090)
BLOCK_KINDS = {("fp8", "e8m0fnu", 32): "mxf8f6f4.block32", ("fp4", "e8m0fnu", 32): "mxf4.block32",
               ("fp4", "ue4m3", 16): "mxf4nvf4.block16.ue4m3", ("fp4", "e8m0fnu", 16): "mxf4nvf4.block16.ue8m0"}
PROMOTE_K = 128  # cuBLAS's fp8 promotion interval without use_fast_accum (DeepSeek-V3's; mmaemu's H100 agrees)
DTYPES = {"fp16": torch.float16, "float16": torch.float16, "half": torch.float16, "bf16": torch.bfloat16,
          "bfloat16": torch.bfloat16, "fp32": torch.float32, "float32": torch.float32, "float": torch.float32}


@dataclass(frozen=True)
class Route:
    """How matmuls of one dtype run: ``model`` through ``bf.gemm`` (None: native torch), ``round_inputs``
    as passed to it (``"device"`` for TF32 register reads), ``scaled``: inputs scaled per tensor and rounded
    into the model's input format, ``stored``: the model's result rounded once to nearest even into the
    dtype and C added after (else the model's output is the dtype's format and C enters the model);
    ``split_k``: the library's split-K decisions (:class:`.orders.Plans`; :meth:`parts`); ``evidence``: what
    backs the model and the route's rules (:mod:`blockfma.evidence`)."""

    dtype: str
    model: Model | None
    note: str = ""
    round_inputs: str | None = None
    scaled: bool = False
    stored: bool = False
    split_k: orders.Plans = orders.Plans()
    evidence: tuple[Evidence, ...] = ()

    @property
    def summary(self) -> str:
        return "native torch" if self.model is None else (self.model.name or self.model.summary())

    def parts(self, m: int, n: int, k: int) -> int:
        """How many contiguous ranges of K a GEMM of this shape is split into (1: not split)."""
        return self.split_k.decide(m, n, k).parts


def dtype_key(key: Any, argument: str = "overrides") -> torch.dtype:
    """A key of ``overrides=`` (``argument``) as a torch dtype (fp16, bf16, fp32, or their names)."""
    if isinstance(key, torch.dtype) and key in FORMATS:
        return key
    if isinstance(key, str) and key.strip().lower() in DTYPES:
        return DTYPES[key.strip().lower()]
    raise ArgumentError(argument, Shown(f"{{{key!r}: ...}}"), "keys must be torch.float16, torch.bfloat16 or "
                        "torch.float32 (or 'fp16', 'bf16', 'fp32')")


def split_key(key: Any, argument: str = "split_k") -> str:
    """A key of ``split_k=`` as the route's dtype: fp16, bf16, fp32 (or their torch dtypes and names), an fp8
    dtype of ``_scaled_mm`` (both operands) or a pair (A's, B's) of them, or that pair's name "e4m3fn*e5m2"."""
    names = key.strip().split("*") if isinstance(key, str) else [FP8.get(k, k) for k in
                                                                   (key if isinstance(key, tuple) else (key,))]
    if 0 < len(names) <= 2 and all(isinstance(f, str) and f in FP8.values() for f in names):
        return "*".join(dict.fromkeys(names))
    if (isinstance(key, torch.dtype) and key in FORMATS) or (isinstance(key, str) and key.strip().lower() in DTYPES):
        return FORMATS[dtype_key(key)]
    raise ArgumentError(argument, Shown(f"{{{key!r}: ...}}" if argument == "split_k" else repr(key)),
                        f"{'keys ' if argument == 'split_k' else ''}must be torch.float16, torch.bfloat16, "
                        "torch.float32, an fp8 dtype of torch._scaled_mm (torch.float8_e4m3fn, torch.float8_e5m2) "
                        "or a pair (A's, B's) of them (or 'fp16', 'bf16', 'fp32', 'e4m3fn', 'e5m2', 'e4m3fn*e5m2')")


def wrap(model: Model, fmt: str, where: str, dev: Device | None = None, evidence: tuple[Evidence, ...] = ()) -> Route:
    """The route of a dtype whose format is ``fmt`` through ``model`` (a model for another pair is adapted:
    see the ``bf.torch.emulate`` module docstring); ``evidence``: the model's (none: the user's model, assumed),
    to which the adaptation's rules are added (``dev``'s evidence of them)."""
    note, given = where, "model" if where == "model=" else "overrides"
    evidence = evidence or (Evidence("the model", Basis.ASSUMED, f"given by {given}="),)
    if model.block_scaled:  # its scales come only with torch._scaled_mm's block-scaled operands
        raise ArgumentError(given, Shown(model.summary()), f"is block-scaled: it runs block-scaled torch._scaled_mm "
                            f"(blockfma.torch.mx), not {fmt} matmuls; for those emulate a device or give a plain model")
    if model.input_format.name == "tf32" and fmt == "fp32":
        if model.output_format.name != "fp32":
            raise ArgumentError(given, Shown(model.summary()), "a tf32 model for fp32 tensors must output fp32")
        return Route(fmt, model, note, round_inputs="device", evidence=evidence + rule_evidence(dev, "tf32-read"))
    scaled = not (_formats.holds(model.input_format, fmt) and _formats.holds(model.b_format, fmt))
    if scaled:
        note += f"; inputs scaled per tensor (power of 2) and rounded to {model.input_name}"
    out = model.output_format.name
    if out == fmt and not scaled:
        return Route(fmt, model, note, evidence=evidence)
    if not _formats.holds(model.output_format, fmt):
        raise ArgumentError(given, Shown(model.summary()), f"its output {out} is narrower than the {fmt} tensors "
                            "it would compute", fix=f"pass a model with {fmt} or fp32 output")
    if not scaled and model.c_entry == "fused" and model.instruction_k is None and model.accumulator_format is None:
        try:
            lib = model.replace(output_format=fmt, accumulator_format=out, c_entry="end",
                                name=f"{model.name or model.summary()}, chained, {out} sum stored as {fmt}")
            return Route(fmt, lib, note, evidence=evidence + rule_evidence(dev, "library-chain"))
        except ValueError:
            pass
    return Route(fmt, model, note + f"; result rounded once to {fmt} (nearest even), then C added",
                 scaled=scaled, stored=True, evidence=evidence + rule_evidence(dev, "adapted"))


def override(dev: Device | None, dtype: torch.dtype, value: Any) -> Route:
    """The route ``overrides={dtype: value}`` gives: a Model, or the name of one of ``dev``'s instructions
    (its (dtype -> fp32) model where it has one, else its (dtype -> dtype) one)."""
    fmt = FORMATS[dtype]
    if isinstance(value, Model):
        return wrap(value, fmt, "override")
    ins = value[0] if isinstance(value, tuple) and len(value) == 1 else value
    if not isinstance(ins, str):
        raise ArgumentError("overrides", Shown(f"{{{dtype}: {value!r}}}"), "a value must be a blockfma.Model "
                            "or the name of one of the device's instructions")
    if dev is None:
        raise ArgumentError("overrides", Shown(f"{{{dtype}: {ins!r}}}"), "an instruction name needs a device",
                            fix="pass emulate(device, overrides=...) or a Model as the value")
    names = [i.name for i in dev.instructions]
    if ins not in names:
        raise ArgumentError("overrides", Shown(f"{{{dtype}: {ins!r}}}"), f"{dev.name} has no instruction "
                            f"{ins!r}", fix=f"it has {', '.join(names)}")
    for out in ("fp32", fmt):  # a library accumulates in fp32 where the instruction can
        if (fmt, out) in dev.instruction(ins).models:
            return wrap(dev.instruction(ins).models[(fmt, out)], fmt, f"{dev.name} {ins}", dev,
                        dev.evidence(fmt, out, ins))
    have = ", ".join(f"{i}->{o}" for i, o in dev.instruction(ins).pairs())
    raise ArgumentError("overrides", Shown(f"{{{dtype}: {ins!r}}}"), f"{dev.name}'s {ins} takes no {fmt} "
                        f"inputs (it takes {have})")


def library(dev: Device | None, model: Model | None, dtype: torch.dtype, tf32: bool) -> Route:
    """The route of an fp16, bf16 or fp32 matmul on ``dev`` (or through ``model``), ``tf32``: whether torch
    allows TF32 for fp32 matmuls now."""
    fmt = FORMATS[dtype]
    if model is not None:
        return wrap(model, fmt, "model=")
    assert dev is not None
    pairs = dev.pairs()
    if fmt in ("fp16", "bf16"):
        for ins in dev.instructions:
            if ins.name == "cublas" and (fmt, fmt) in ins.models:
                return Route(fmt, ins.models[(fmt, fmt)], f"{dev.name}'s probed library model (cublas)",
                             evidence=dev.evidence(fmt, fmt, "cublas"))
        if (fmt, "fp32") not in pairs:
            takes = sorted({i for i, _ in pairs if "*" not in i})
            raise ArgumentError("dtype", Shown(f"torch.{dtype}".replace("torch.torch.", "torch.")),
                                f"{dev.name} has no {fmt} matrix model (its models take {', '.join(takes)})",
                                fix="cast the tensors, or pass overrides={dtype: Model} to emulate")
        ins = dev.instruction_for(fmt, "fp32")
        note = (f"no library model known for {dev.name}: the {ins.name} instruction model chained over K, "
                f"the fp32 sum rounded once to {fmt}, then C")
        return wrap(ins.models[(fmt, "fp32")], fmt, note, dev, dev.evidence(fmt, "fp32", ins.name))
    if tf32 and ("tf32", "fp32") in pairs:
        return Route(fmt, dev.model("tf32", "fp32"), f"TF32 (torch allows it): {dev.name}'s tf32 model, "
                     "operands read from their fp32 registers", round_inputs="device",
                     evidence=dev.evidence("tf32", "fp32") + rule_evidence(dev, "tf32-read"))
    if ("fp32", "fp32") in pairs:
        return Route(fmt, dev.model("fp32", "fp32"), f"{dev.name}'s fp32 matrix model",
                     evidence=dev.evidence("fp32", "fp32"))
    seq = _device("ieee-sequential").model("fp32", "fp32")
    why = "TF32 is off" if ("tf32", "fp32") in pairs else f"{dev.name} has no TF32"
    return Route(fmt, seq, f"{why}; {dev.name}'s fp32 GEMM (CUDA cores) is not modelled: an IEEE fp32 FMA "
                 "chain in k order", evidence=rule_evidence(dev, "fp32-fma-chain"))


def with_split(route: Route, library: str | None, given: tuple = ()) -> Route:
    """``route`` with ``library``'s split-K decisions (:class:`.orders.Plans`; None: no library) and the user's
    plan ``given``: the model must sum into fp32 (its output, or its accumulator with C at the end) without scaling
    the operands (else no plan applies: the library's recorded splits are of its own fp32 sums)."""
    if route.model is None:
        return route
    kind = "tf32" if route.dtype == "fp32" and route.round_inputs == "device" else route.dtype
    model = route.model
    sums = model.accumulator_format if model.accumulator_format is not None else model.output_format
    bad = route.scaled or sums.name != "fp32" or (model.accumulator_format is not None and model.c_entry != "end")
    if given and bad:
        raise ArgumentError("split_k", Shown(f"{{{route.dtype}: ...}}"),
                            f"a split-K plan needs a route whose model sums into fp32 (its output, or an fp32 "
                            f"accumulator with C at the end) on the operands as given; {route.summary} sums into "
                            f"{sums.name}{' on scaled operands' if route.scaled else ''}",
                            fix="pass a model of fp32 output in overrides")
    library = None if bad else library  # a scaled route or one without fp32 sums runs unsplit, said so
    return dataclasses.replace(route, split_k=orders.Plans(library, kind, given, orders.TILE.get((library, kind), 1)))


def fp8(dev: Device | None, model: Model | None, a_dtype: torch.dtype, b_dtype: torch.dtype,
        fast_accum: bool) -> Route:
    """The route of ``torch._scaled_mm``'s product for fp8 operands of these dtypes (see
    ``Emulation.fp8_route``)."""
    fa, fb = FP8[a_dtype], FP8[b_dtype]
    key = fa if fa == fb else f"{fa}*{fb}"
    if model is not None:
        base, where, evidence = model, "model=", (Evidence("the model", Basis.ASSUMED, "given by model="),)
        if not (_formats.holds(base.input_format, fa) and _formats.holds(base.b_format, fb)) or \
                base.output_format.name != "fp32" or base.block_scaled:
            raise ArgumentError("model", Shown(base.summary()), f"torch._scaled_mm of {key} operands with fp32 "
                                f"scales needs a model whose inputs hold {key}, without block scales, output fp32",
                                fix="pass an fp8 -> fp32 model, e.g. bf.device('H100').model('e4m3fn', 'fp32')")
    else:
        assert dev is not None
        if (key, "fp32") not in dev.pairs():
            have = sorted({i for i, o in dev.pairs() if o == "fp32" and i.startswith("e")})
            has = f"its fp8 models take {', '.join(have)}" if have else "it has no fp8 matrix unit"
            raise ArgumentError("self", Shown(f"torch.{str(a_dtype).removeprefix('torch.')} x "
                                              f"torch.{str(b_dtype).removeprefix('torch.')}"),
                                f"{dev.name} has no {key} -> fp32 matrix model ({has})",
                                fix="emulate a device with fp8 units (H100, B200, MI300X) for these dtypes, "
                                    "or pass emulate(model=an fp8 Model)")
        ins = dev.instruction_for(key, "fp32")
        base, where = ins.models[(key, "fp32")], f"{dev.name}'s {ins.name} {key}->fp32 model"
        evidence = dev.evidence(key, "fp32", ins.name)
    if fast_accum:
        chosen, note = base, where + "; use_fast_accum: one chain over all of K"
        evidence += rule_evidence(dev, "fp8-fast-accum")
    elif base.c_entry != "fused" or base.instruction_k is not None:
        chosen, note = base, where + "; each instruction's result is added in fp32 already (no promotion)"
    else:
        chosen = base.replace(c_entry="after", instruction_k=PROMOTE_K,
                              name=f"{base.name or base.summary()}, promoted every {PROMOTE_K}")
        note = where + f"; promoted to an fp32 sum every {PROMOTE_K} products (no use_fast_accum; interval assumed)"
        evidence += rule_evidence(dev, "fp8-promotion")
    return Route(key, chosen, note + "; scales, bias and out_dtype in a binary32 epilogue",
                 evidence=evidence + rule_evidence(dev, "scaled-epilogue"))


def block(dev: Device | None, model: Model | None, fa: str, fb: str, fs: str, size: int) -> Route:
    """The route of a block-scaled ``torch._scaled_mm`` (see ``Emulation.block_route``)."""
    fp4 = "fp4" if fa == "e2m1fn" else "fp8"
    pair = fa if fa == fb else f"{fa}*{fb}"
    kind = BLOCK_KINDS.get((fp4, fs, size))
    what = f"{pair} operands with {fs} scales per {size}"
    epilogue = f"{'global scales, ' if fs == 'ue4m3' else ''}bias and out_dtype in a binary32 epilogue"
    if kind is None:
        raise ArgumentError("scale_a", Shown(f"{fs} scales per {size} for {pair} operands"),
                            "no block-scaled instruction takes this recipe (MXFP8: fp8 with e8m0 scales per "
                            "32; MXFP4: fp4 with e8m0 per 32; NVFP4: fp4 with e4m3 (ue4m3) per 16)",
                            fix="quantise with blockfma.torch.mx.to_mx or to_nvfp4")
    if model is not None:
        ok = (model.block_scaled and model.output_format.name == "fp32"
              and model.option("scale_block") == size and model.scale_format.name == fs
              and _formats.holds(model.input_format, fa) and _formats.holds(model.b_format, fb))
        if not ok:
            raise ArgumentError("model", Shown(model.summary()), f"torch._scaled_mm of {what} needs a "
                                f"block-scaled (scaled-fused) model of that recipe with fp32 output",
                                fix=f"e.g. bf.device('B200').instruction('tcgen05.{kind}').models")
        return Route(pair, model, f"model=, chained over K in its fp32 accumulator; {epilogue}",
                     evidence=(Evidence("the model", Basis.ASSUMED, "given by model="),
                               *rule_evidence(None, "block-accumulator", "scaled-epilogue")))
    assert dev is not None
    found = [i for i in dev.instructions if i.name.split(".", 1)[-1] == kind and (pair, "fp32") in i.models]
    if not found:
        have = sorted(i.name for i in dev.instructions if any(m.block_scaled for m in i.models.values()))
        raise ArgumentError("self", Shown(what), f"{dev.name} has no {kind} instruction for {pair} "
                            f"(its block-scaled instructions: {', '.join(have) or 'none'})",
                            fix="emulate a Blackwell device (B200, RTX 5090)")
    ins = found[0]
    return Route(pair, ins.models[(pair, "fp32")],
                 f"{dev.name}'s {ins.name} {pair}->fp32 model chained over K, each instruction's fp32 result "
                 f"the next one's C (the accumulator, assumed); {epilogue}",
                 evidence=dev.evidence(pair, "fp32", ins.name) + rule_evidence(dev, "block-accumulator",
                                                                               "scaled-epilogue"))


def overrides(dev: Device | None, given: Mapping[Any, Any] | None) -> dict[torch.dtype, Route]:
    """``overrides=`` as {dtype: Route}."""
    keyed = ((dtype_key(key), value) for key, value in (given or {}).items())
    return {dtype: override(dev, dtype, value) for dtype, value in keyed}
