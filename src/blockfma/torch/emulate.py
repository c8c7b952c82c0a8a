"""``emulate``: torch's matmuls computed by ``bf.gemm`` with a device's models, inside a TorchFunctionMode.

What runs for each dtype (a :class:`Route`, chosen once per dtype and listed in :meth:`Emulation.report`):

* fp16 / bf16: the device's GEMM library.  Where the preset has a probed library model (the NVIDIA
  ``cublas`` instruction: fp32 accumulation of blocks over all of K, the sum rounded once into the output
  dtype, then C added) that model; else the device's instruction model for (dtype -> fp32) chained over
  all of K, its fp32 sum rounded once to nearest even into the dtype, then C added by one IEEE addition
  (``c_entry="end"``, ``accumulator_format="fp32"``), with a note saying that no library model is known.
* fp32: TF32 (the device's tf32 model, operands read from their binary32 registers as the unit reads
  them) when torch's fp32 matmul precision allows TF32; else the device's own fp32 -> fp32 model where it
  has one (AMD MFMA); else an IEEE fp32 chain in k order (the ``ieee-sequential`` preset: a CUDA-core SGEMM,
  split over K only at the shapes recorded, see below), with a note.
* fp64, integers, complex: native torch, logged as such.

A model whose input format does not hold the dtype (an fp8 design run on fp16 tensors) gets its inputs
scaled per tensor by a power of two (the largest magnitude to at most the format's largest value) and
rounded to nearest even into the format (an infinity becomes NaN in a format without infinities, e4m3fn);
the GEMM's result is scaled back exactly and rounded once to nearest even into the dtype, then C is added
(the per-tensor scaling of an fp8 recipe).  A model whose output is wider than the dtype without a
``c_entry="end"`` form (a promotion design with ``instruction_k``, or an output cut to fewer bits) also
ends that way.

``torch._scaled_mm`` (fp8 operands with scales; :meth:`Emulation.scaled_mm` says what is rounded where):
the fp8 products by the device's fp8 -> fp32 model (the H100's ``wgmma``: 32-blocks, 13-bit accumulator),
promoted to an fp32 sum every 128 products unless ``use_fast_accum`` (cuBLAS's practice on Hopper; the
interval 128 is assumed), then the scales, the bias and one conversion to ``out_dtype`` in a binary32
epilogue.  A device without fp8 units refuses it, naming the fix.  ``F.scaled_mm`` (``torch._scaled_mm_v2``)
with tensor- or row-wise recipes runs the same way.

Block-scaled ``torch._scaled_mm`` / ``F.scaled_mm`` (MX and NVFP4; :meth:`Emulation.block_scaled_mm`):
one-byte scales per block of K pick the device's block-scaled instruction (:data:`BLOCK_KINDS`): fp8
operands with e8m0 scales per 32 (MXFP8) ``tcgen05.mxf8f6f4.block32``, packed fp4 with e8m0 per 32 (MXFP4)
``tcgen05.mxf4.block32``, packed fp4 with e4m3 (ue4m3) per 16 (NVFP4) ``tcgen05.mxf4nvf4.block16.ue4m3``
(``mma.*`` on the RTX 5090); its model runs chained over all of K, each instruction's fp32 result the next
one's C (assumed: the tensor-memory accumulator, no promotion), then NVFP4's global scales, the bias and
``out_dtype`` in the binary32 epilogue.  ``torch._scaled_mm`` reads the scales in cuBLAS's swizzled 128x4
layout (what torch hands cuBLAS); ``F.scaled_mm`` as each operand's swizzle says (NO_SWIZZLE: plain
(rows, K // block)); :mod:`.mx` holds the layouts and the MXFP8 / MXFP4 / NVFP4 quantisers.  Other recipes
(1x128 and 128x128 fp32 blocks) run natively, logged.  This needs no native kernel (torch's CPU build has
none for block scales).

Split-K: a route may carry a plan ``{(m, n, k): parts}`` (:mod:`.orders`): a GEMM of that shape cuts K
into ``parts`` contiguous ranges, each a GEMM by the route's model from +0, the partial sums added one
after the other in binary32, then C.  The H100's fp32 routes carry the splits the order probes recorded
for cuBLAS (only those shapes); ``emulate(..., split_k={dtype: plan})`` sets one for any fp32-output route.

Where it runs: tensors on a CUDA GPU whose route's model the Triton kernel runs
(``bf.engine.triton.supports``; no input rounding, no flushing, no scaling) are computed there by
``bf.engine.triton.gemm_tensors`` with ``backend="auto"`` or ``"triton"`` (no host round trip of the
operands; NaN codes and zero signs finished by ``bf.engine.api.finish`` as ``bf.gemm`` finishes them, only
NaN and -0 entries visiting the host for that); so are CPU tensors with ``backend="triton"`` under Triton's
interpreter (``TRITON_INTERPRET=1``, tests).  Else the tensors go to the host, are computed by ``bf.gemm``
with ``backend`` and come back on their device in their dtype: on a GPU that is slow but right.  Autograd
works: each emulated matmul is an autograd Function whose backward (grad_A = grad @ B^T, grad_B = A^T @
grad) is emulated with the same routes, also when ``backward()`` runs after the block.  Elementwise work
(softmax, bias of a broadcast, batch sums of gradients) stays native.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from .. import formats as _formats
from ..arguments import ArgumentError, Shown
from ..devices import Device, device as _device
from ..engine import dot, gemm
from ..engine.api import check_backend, finish
from ..formats import RoundingMode
from ..model import Family, Model
from ..report import table
from ..torch_switches import tf32_enabled
from . import mx, orders

__all__ = ["emulate", "Emulation", "Route", "Op"]

_FORMAT = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
_FP8 = {torch.float8_e4m3fn: "e4m3fn", torch.float8_e5m2: "e5m2", torch.float8_e4m3fnuz: "e4m3fnuz",
        torch.float8_e5m2fnuz: "e5m2fnuz"}
#: (operands "fp8" or "fp4", scale format, block) -> the block-scaled instruction's kind (its name after the
#: first dot: tcgen05.mxf4.block32 on the B200, mma.mxf4.block32 on the RTX 5090)
BLOCK_KINDS = {("fp8", "e8m0fnu", 32): "mxf8f6f4.block32", ("fp4", "e8m0fnu", 32): "mxf4.block32",
               ("fp4", "ue4m3", 16): "mxf4nvf4.block16.ue4m3", ("fp4", "e8m0fnu", 16): "mxf4nvf4.block16.ue8m0"}
PROMOTE_K = 128  # cuBLAS's fp8 promotion interval without use_fast_accum (assumed: DeepSeek-V3's, not probed)
_DTYPE_NAMES = {"fp16": torch.float16, "float16": torch.float16, "half": torch.float16,
                "bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp32": torch.float32,
                "float32": torch.float32, "float": torch.float32}


@dataclass(frozen=True)
class Route:
    """How matmuls of one dtype run: ``model`` through ``bf.gemm`` (None: native torch), ``round_inputs``
    as passed to it (``"device"`` for TF32 register reads), ``scaled``: inputs scaled per tensor and rounded
    into the model's input format, ``stored``: the model's result rounded once to nearest even into the
    dtype and C added after (else the model's output is the dtype's format and C enters the model);
    ``split_k``: the split-K plan, ((m, n, k), parts) pairs (:meth:`parts`; :mod:`.orders`)."""

    dtype: str
    model: Model | None
    note: str = ""
    round_inputs: str | None = None
    scaled: bool = False
    stored: bool = False
    split_k: tuple[tuple[tuple[int, int, int], int], ...] = ()

    @property
    def summary(self) -> str:
        return "native torch" if self.model is None else (self.model.name or self.model.summary())

    def parts(self, m: int, n: int, k: int) -> int:
        """How many contiguous ranges of K a GEMM of this shape is split into (1: not split)."""
        return dict(self.split_k).get((m, n, k), 1)


@dataclass(frozen=True)
class Op:
    """One call seen under emulation: the op's name, the operands' shapes, the dtype, the route, the
    number of ``bf.gemm`` calls it took."""

    op: str
    shapes: str
    dtype: str
    route: Route
    gemms: int = 0


def _dtype_key(key: Any) -> torch.dtype:
    if isinstance(key, torch.dtype) and key in _FORMAT:
        return key
    if isinstance(key, str) and key.strip().lower() in _DTYPE_NAMES:
        return _DTYPE_NAMES[key.strip().lower()]
    raise ArgumentError("overrides", Shown(f"{{{key!r}: ...}}"), "keys must be torch.float16, torch.bfloat16 or "
                        "torch.float32 (or 'fp16', 'bf16', 'fp32')")


def _pow2_scale(x: np.ndarray, fmt: _formats.Format) -> int:
    """e such that the largest finite magnitude of x times 2**e is at most fmt's largest value (0 when x has
    no nonzero finite value)."""
    finite = np.abs(x[np.isfinite(x)])
    amax = float(finite.max()) if finite.size else 0.0
    if amax == 0.0:
        return 0
    e = math.floor(math.log2(fmt.max / amax))
    while math.ldexp(amax, e) > fmt.max:
        e -= 1
    while math.ldexp(amax, e + 1) <= fmt.max:
        e += 1
    return e


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    """A tensor's values on the host in a numpy dtype of the same width, bits unchanged (bf16 as ml_dtypes)."""
    t = t.detach().to("cpu").contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(_formats.get("bf16").dtype)
    if t.dtype in _FP8:
        return t.view(torch.uint8).numpy().view(_formats.get(_FP8[t.dtype]).dtype)
    return t.numpy()


def _finish_tensor(model: Model, d: torch.Tensor, dtype: torch.dtype, *, computed: bool = True) -> torch.Tensor:
    """float32 results of ``model``'s output format (``d``, on any device) as a tensor of ``dtype`` there,
    the NaNs and -0s finished by :func:`blockfma.engine.api.finish` (the model's NaN codes, +0 for
    computed zeros under ``rounded_zero="positive"``; it leaves other values as they are): only those
    entries visit the host."""
    out = d.to(dtype)  # exact: the values are in the format already; NaNs and -0s are rewritten below
    special = torch.isnan(d) | ((d == 0) & torch.signbit(d))
    if bool(special.any()):
        idx = special.nonzero(as_tuple=True)
        done = finish(model, d[idx].double().cpu().numpy(), computed=computed)
        out = out.clone() if out.data_ptr() == d.data_ptr() else out
        out[idx] = _from_numpy(done, dtype, d.device)
    return out


def _torch_dtype(fmt: str) -> torch.dtype:
    """The torch dtype of a model's output format (fp16, bf16, fp32)."""
    return _DTYPE_NAMES[fmt]


def _from_numpy(x: np.ndarray, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """numpy values of the dtype's format (float16, float32, ml_dtypes bfloat16) as a tensor, bits unchanged."""
    x = np.ascontiguousarray(x)
    if dtype == torch.bfloat16:
        out = torch.from_numpy(x.view(np.int16).copy()).view(torch.bfloat16)
    else:
        out = torch.from_numpy(x.astype(np.dtype(str(dtype).removeprefix("torch.")), copy=True))
    return out.to(device)


class Emulation:
    """The context manager :func:`emulate` returns; reusable and nestable (the innermost block wins).
    ``log``: every op seen, in order; :meth:`report` the table of them; :meth:`route` the route of a dtype."""

    def __init__(self, device: Any = None, *, model: Model | None = None,
                 overrides: Mapping[Any, Any] | None = None, backend: str = "auto", name: str | None = None,
                 split_k: Mapping[Any, Any] | None = None) -> None:
        if device is not None and model is not None:
            raise ArgumentError("model", Shown(model.summary() if isinstance(model, Model) else repr(model)),
                                "pass either a device or model=, not both", fix=f"device={device!r} was given too")
        if device is None and model is None:
            raise ArgumentError("device", None, "name a device preset (emulate('H100')) or pass model=")
        if model is not None and not isinstance(model, Model):
            raise ArgumentError("model", Shown(type(model).__name__), "must be a blockfma.Model")
        if overrides is not None and not isinstance(overrides, Mapping):
            raise ArgumentError("overrides", overrides, "must be a dict {dtype: Model or instruction name}",
                                fix="e.g. overrides={torch.bfloat16: 'mma'}")
        if name is not None and not isinstance(name, str):
            raise ArgumentError("name", name, "must be a string (the label in reports) or None")
        backend = check_backend(backend)  # a bad engine name fails here, not at the first matmul
        if backend.startswith("cuda") and not torch.cuda.is_available():
            raise ArgumentError("backend", backend, f"needs a CUDA GPU, and torch {torch.__version__} sees none",
                                fix="use backend='auto' (the CPU engines for CPU tensors; the tensors' own GPU "
                                    "where they are on one)")
        if split_k is not None and not isinstance(split_k, Mapping):
            raise ArgumentError("split_k", Shown(repr(split_k)), "must be a dict {dtype: {(m, n, k): parts}}",
                                fix="e.g. split_k={torch.float32: {(16, 16, 256): 8}}")
        self.device: Device | None = None if device is None else _device(device)
        self.model = model
        self.backend = backend
        self.name = name or (self.device.name if self.device is not None else (model.name or model.summary()))
        self.log: list[Op] = []
        self._routes: dict[tuple[torch.dtype, bool], Route] = {}
        self._fp8: dict[tuple[torch.dtype, torch.dtype, bool], Route] = {}
        self._blocks: dict[tuple[str, str, str, int], Route] = {}
        self._overrides: dict[torch.dtype, Route] = {}
        self._modes: list[TorchFunctionMode] = []
        self._lock = threading.Lock()
        for key, value in (overrides or {}).items():
            dtype = _dtype_key(key)
            self._overrides[dtype] = self._override(dtype, value)
        self._split: dict[torch.dtype, tuple] = {_dtype_key(key): orders.check_plan(plan, "split_k")
                                                 for key, plan in (split_k or {}).items()}
        for dtype in self._split:
            if dtype != torch.float32:  # its route does not depend on switches: a bad plan fails here
                self.route(dtype)

    def __repr__(self) -> str:
        return f"emulate({self.name!r})"

    # --- routes ---------------------------------------------------------------------------------------------
    def _override(self, dtype: torch.dtype, value: Any) -> Route:
        fmt = _FORMAT[dtype]
        if isinstance(value, Model):
            return _wrap(value, fmt, "override")
        ins = value[0] if isinstance(value, tuple) and len(value) == 1 else value
        if not isinstance(ins, str):
            raise ArgumentError("overrides", Shown(f"{{{dtype}: {value!r}}}"), "a value must be a blockfma.Model "
                                "or the name of one of the device's instructions")
        if self.device is None:
            raise ArgumentError("overrides", Shown(f"{{{dtype}: {ins!r}}}"), "an instruction name needs a device",
                                fix="pass emulate(device, overrides=...) or a Model as the value")
        dev = self.device
        names = [i.name for i in dev.instructions]
        if ins not in names:
            raise ArgumentError("overrides", Shown(f"{{{dtype}: {ins!r}}}"), f"{dev.name} has no instruction "
                                f"{ins!r}", fix=f"it has {', '.join(names)}")
        for out in ("fp32", fmt):  # a library accumulates in fp32 where the instruction can
            if (fmt, out) in dev.instruction(ins).models:
                return _wrap(dev.instruction(ins).models[(fmt, out)], fmt, f"{dev.name} {ins}")
        have = ", ".join(f"{i}->{o}" for i, o in dev.instruction(ins).pairs())
        raise ArgumentError("overrides", Shown(f"{{{dtype}: {ins!r}}}"), f"{dev.name}'s {ins} takes no {fmt} "
                            f"inputs (it takes {have})")

    def route(self, dtype: torch.dtype) -> Route:
        """How matmuls of ``dtype`` run under this emulation (ValueError where the device lacks the dtype)."""
        if dtype not in _FORMAT:
            return Route(str(dtype).removeprefix("torch."), None, "not emulated: native torch")
        key = (dtype, dtype == torch.float32 and tf32_enabled(torch))  # the TF32 switch may change between calls
        if key not in self._routes:
            route = self._overrides[dtype] if dtype in self._overrides else self._route(dtype)
            if dtype in self._split:
                route = self._with_split(route, self._split[dtype])
            self._routes[key] = route
        return self._routes[key]

    def _with_split(self, route: Route, plan: tuple) -> Route:
        """``route`` with the user's split-K plan: its model must sum into fp32 and store nothing."""
        assert route.model is not None
        if route.scaled or route.stored or route.model.output_format.name != "fp32":
            raise ArgumentError("split_k", Shown(f"{{{route.dtype}: ...}}"),
                                f"a split-K plan needs a route whose model outputs fp32 partial sums; "
                                f"{route.summary} outputs {route.model.output_format.name}",
                                fix="give split_k for torch.float32, or an fp32-output model in overrides")
        return dataclasses.replace(route, split_k=plan, note=route.note + "; split-K plan given")

    def _route(self, dtype: torch.dtype) -> Route:
        fmt = _FORMAT[dtype]
        if self.model is not None:
            return _wrap(self.model, fmt, "model=")
        dev = self.device
        assert dev is not None
        pairs = dev.pairs()
        if fmt in ("fp16", "bf16"):
            for ins in dev.instructions:
                if ins.name == "cublas" and (fmt, fmt) in ins.models:
                    return Route(fmt, ins.models[(fmt, fmt)], f"{dev.name}'s probed library model (cublas)"
                                 f"{_split_note(())}")
            if (fmt, "fp32") not in pairs:
                takes = sorted({i for i, _ in pairs if "*" not in i})
                raise ArgumentError("dtype", Shown(f"torch.{dtype}".replace("torch.torch.", "torch.")),
                                    f"{dev.name} has no {fmt} matrix model (its models take {', '.join(takes)})",
                                    fix="cast the tensors, or pass overrides={dtype: Model} to emulate")
            ins = dev.instruction_for(fmt, "fp32")
            base = ins.models[(fmt, "fp32")]
            note = (f"no library model known for {dev.name}: the {ins.name} instruction model chained over K, "
                    f"the fp32 sum rounded once to {fmt}, then C{_split_note(())}")
            return _wrap(base, fmt, note)
        if tf32_enabled(torch) and ("tf32", "fp32") in pairs:
            split = orders.recorded(dev.name, "tf32")
            return Route(fmt, dev.model("tf32", "fp32"), f"TF32 (torch allows it): {dev.name}'s tf32 model, "
                         f"operands read from their fp32 registers{_split_note(split)}", round_inputs="device",
                         split_k=split)
        if ("fp32", "fp32") in pairs:
            return Route(fmt, dev.model("fp32", "fp32"), f"{dev.name}'s fp32 matrix model")
        seq = _device("ieee-sequential").model("fp32", "fp32")
        why = "TF32 is off" if ("tf32", "fp32") in pairs else f"{dev.name} has no TF32"
        split = orders.recorded(dev.name, "fp32")
        return Route(fmt, seq, f"{why}; {dev.name}'s fp32 GEMM (CUDA cores) is not modelled: an IEEE fp32 FMA "
                     f"chain in k order{_split_note(split)}", split_k=split)

    def fp8_route(self, a_dtype: torch.dtype, b_dtype: torch.dtype, fast_accum: bool) -> Route:
        """The route of ``torch._scaled_mm``'s product for fp8 operands of these dtypes: the device's
        (fp8 -> fp32) model, of the instruction ``Device.instruction_for`` names (the H100's ``wgmma``), or
        ``model=`` where its input formats hold the operands'; without ``fast_accum`` a model that chains its
        blocks in its own accumulator (``c_entry="fused"``) is promoted: a fresh chain every ``PROMOTE_K``
        products, each chain's result added to an fp32 sum (``c_entry="after"``, ``instruction_k``)."""
        cache = (a_dtype, b_dtype, fast_accum)
        if cache not in self._fp8:
            self._fp8[cache] = self._fp8_route(a_dtype, b_dtype, fast_accum)
        return self._fp8[cache]

    def _fp8_route(self, a_dtype: torch.dtype, b_dtype: torch.dtype, fast_accum: bool) -> Route:
        fa, fb = _FP8[a_dtype], _FP8[b_dtype]
        key = fa if fa == fb else f"{fa}*{fb}"
        if self.model is not None:
            base, where = self.model, "model="
            if not (_formats.holds(base.input_format, fa) and _formats.holds(base.b_format, fb)) or \
                    base.output_format.name != "fp32":
                raise ArgumentError("model", Shown(base.summary()), f"torch._scaled_mm of {key} operands needs a "
                                    f"model whose inputs hold {key} and whose output is fp32",
                                    fix="pass an fp8 -> fp32 model, e.g. bf.device('H100').model('e4m3fn', 'fp32')")
        else:
            dev = self.device
            assert dev is not None
            if (key, "fp32") not in dev.pairs():
                fp8 = sorted({i for i, o in dev.pairs() if o == "fp32" and i.startswith("e")})
                have = f"its fp8 models take {', '.join(fp8)}" if fp8 else "it has no fp8 matrix unit"
                raise ArgumentError("self", Shown(f"torch.{str(a_dtype).removeprefix('torch.')} x "
                                                  f"torch.{str(b_dtype).removeprefix('torch.')}"),
                                    f"{dev.name} has no {key} -> fp32 matrix model ({have})",
                                    fix="emulate a device with fp8 units (H100, B200, MI300X) for these dtypes, "
                                        "or pass emulate(model=an fp8 Model)")
            ins = dev.instruction_for(key, "fp32")
            base, where = ins.models[(key, "fp32")], f"{dev.name}'s {ins.name} {key}->fp32 model"
        if fast_accum:
            model, note = base, where + "; use_fast_accum: one chain over all of K"
        elif base.c_entry != "fused" or base.instruction_k is not None:
            model, note = base, where + "; each instruction's result is added in fp32 already (no promotion)"
        else:
            model = base.replace(c_entry="after", instruction_k=PROMOTE_K,
                                 name=f"{base.name or base.summary()}, promoted every {PROMOTE_K}")
            note = where + f"; promoted to an fp32 sum every {PROMOTE_K} products (no use_fast_accum; interval assumed)"
        return Route(key, model, note + "; scales, bias and out_dtype in a binary32 epilogue")

    def scaled_mm(self, a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                  bias: torch.Tensor | None = None, scale_result: torch.Tensor | None = None,
                  out_dtype: torch.dtype | None = None, use_fast_accum: bool = False) -> torch.Tensor:
        """``torch._scaled_mm`` emulated: D = round_out(scale_a * scale_b * (A @ B) + bias).

        What is rounded where (the fp32 epilogue of cuBLASLt's fp8 GEMM, as assumed here): the fp8 products
        summed by :meth:`fp8_route`'s model into an fp32 result P (its own roundings; promotion without
        ``use_fast_accum``); then in binary32, nearest even, on the tensors' device: s = scale_a * scale_b
        (per tensor: one value each; row-wise: scale_a (m, 1), scale_b (1, n)), P * s, + bias (converted
        to fp32 exactly); then one conversion, nearest even, to ``out_dtype`` (fp32, fp16 or bf16).  NaNs
        of the epilogue take the model's NaN codes.  Powers of two as scales multiply exactly (no
        rounding unless the result leaves fp32's range).  An fp8 output (``out_dtype`` None or fp8, the only
        use of ``scale_result``) is not modelled and refused."""
        for name, t in (("self", a), ("mat2", b)):
            if not isinstance(t, torch.Tensor) or t.dtype not in _FP8 or t.dim() != 2:
                what = type(t).__name__ if not isinstance(t, torch.Tensor) else f"{t.dim()}-D {t.dtype}"
                raise ArgumentError(name, Shown(what), "torch._scaled_mm under emulate takes 2-D fp8 tensors "
                                    "(torch.float8_e4m3fn, float8_e5m2 or their fnuz forms)")
        m, k, n = a.shape[0], a.shape[1], b.shape[1]
        if b.shape[0] != k:
            raise ValueError(f"_scaled_mm under emulate: shapes {tuple(a.shape)} and {tuple(b.shape)} cannot be "
                             f"multiplied ({k} != {b.shape[0]})")
        if out_dtype is None or out_dtype not in _FORMAT:
            raise ArgumentError("out_dtype", out_dtype, "an fp8 (or other) output of torch._scaled_mm is not "
                                "modelled", fix="pass out_dtype=torch.bfloat16, torch.float16 or torch.float32")
        if scale_result is not None:
            raise ArgumentError("scale_result", Shown("a tensor"), "scales an fp8 output only, which is not "
                                "modelled", fix="pass scale_result=None with a bf16, fp16 or fp32 out_dtype")
        sa = _scale("scale_a", scale_a, (m, 1), a.device)
        sb = _scale("scale_b", scale_b, (1, n), a.device)
        _check_bias(bias, n)
        route = self.fp8_route(a.dtype, b.dtype, bool(use_fast_accum))
        product = self.compute(a, b, None, route)  # fp32, on a's device
        assert product.dtype == torch.float32
        out = _epilogue(route, product, sa * sb, bias, out_dtype)
        self._record("_scaled_mm", (a, b), route, 1)
        return out

    # --- block-scaled (MX, NVFP4) ---------------------------------------------------------------------------
    def block_route(self, a_format: str, b_format: str, scale_format: str, block: int) -> Route:
        """The route of a block-scaled ``torch._scaled_mm``: the device's block-scaled instruction for
        operands of these formats (``"e4m3fn"``, ``"e5m2"``, ``"e2m1fn"``) and scales of ``scale_format``
        (``"e8m0fnu"``, ``"ue4m3"``) per ``block`` elements along K (:data:`BLOCK_KINDS`: MXFP8 ->
        ``mxf8f6f4.block32``, MXFP4 -> ``mxf4.block32``, NVFP4 -> ``mxf4nvf4.block16.ue4m3``), or ``model=``
        where it is such a model; its (a.b + C) -> fp32 model chained over all of K (see
        :meth:`block_scaled_mm`)."""
        key = (a_format, b_format, scale_format, block)
        if key not in self._blocks:
            self._blocks[key] = self._block_route(*key)
        return self._blocks[key]

    def _block_route(self, fa: str, fb: str, fs: str, block: int) -> Route:
        fp4 = "fp4" if fa == "e2m1fn" else "fp8"
        pair = fa if fa == fb else f"{fa}*{fb}"
        kind = BLOCK_KINDS.get((fp4, fs, block))
        what = f"{pair} operands with {fs} scales per {block}"
        epilogue = f"{'global scales, ' if fs == 'ue4m3' else ''}bias and out_dtype in a binary32 epilogue"
        if kind is None:
            raise ArgumentError("scale_a", Shown(f"{fs} scales per {block} for {pair} operands"),
                                "no block-scaled instruction takes this recipe (MXFP8: fp8 with e8m0 scales per "
                                "32; MXFP4: fp4 with e8m0 per 32; NVFP4: fp4 with e4m3 (ue4m3) per 16)",
                                fix="quantise with blockfma.torch.mx.to_mx or to_nvfp4")
        if self.model is not None:
            mdl = self.model
            ok = (mdl.block_scaled and mdl.output_format.name == "fp32"
                  and mdl.option("scale_block") == block and mdl.scale_format.name == fs
                  and _formats.holds(mdl.input_format, fa) and _formats.holds(mdl.b_format, fb))
            if not ok:
                raise ArgumentError("model", Shown(mdl.summary()), f"torch._scaled_mm of {what} needs a "
                                    f"block-scaled (scaled-fused) model of that recipe with fp32 output",
                                    fix=f"e.g. bf.device('B200').instruction('tcgen05.{kind}').models")
            return Route(pair, mdl, f"model=, chained over K in its fp32 accumulator; {epilogue}")
        dev = self.device
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
                     f"the next one's C (the accumulator, assumed); {epilogue}")

    def block_scaled_mm(self, a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, *,
                        block: int, swizzled: bool | tuple[bool, bool] = True, global_a: torch.Tensor | None = None,
                        global_b: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                        out_dtype: torch.dtype | None = torch.bfloat16, op: str = "_scaled_mm") -> torch.Tensor:
        """A block-scaled ``torch._scaled_mm`` (MXFP8, MXFP4, NVFP4) emulated:
        D = round_out(ga * gb * (A @ B with block scales) + bias).

        ``a`` (m, K) fp8 or (m, K // 2) float4_e2m1fn_x2, ``b`` (K, n) or (K // 2, n) (fp4 packed along K);
        ``scale_a`` / ``scale_b``: float8_e8m0fnu (MX) or float8_e4m3fn holding ue4m3 (NVFP4), one per
        ``block`` elements of K for each row of A and each column of B, in cuBLAS's swizzled layout
        (``swizzled``, what torch passes cuBLAS; a pair for A and B apart) or plain (m, K // block) and
        (n, K // block) (:mod:`blockfma.torch.mx`); ``global_a`` / ``global_b``: NVFP4's per-tensor float32 scales.

        What is rounded where: the products and scales by :meth:`block_route`'s instruction model (the
        B200's tcgen05 block_scale: k = 32 or 64 a step), the steps chained over all of K, each step's fp32
        result (rounded toward zero) entering the next step as C: the tensor-memory accumulator of a
        Blackwell GEMM (an assumption: no promotion, ``use_fast_accum`` changes nothing); a NaN scale makes
        its products' sums NaN.  Then in binary32, nearest even: g = ga * gb (1 without global scales),
        P * g, + bias; one conversion to ``out_dtype`` (fp32, fp16, bf16).  K must be a multiple of
        ``block`` (a short last block is refused: pad A and B with zeros); a K that is not a multiple of
        the instruction's k runs its last step padded with zero products (they add nothing)."""
        fp4 = mx.FP4
        fmts = []
        for name, t in (("self", a), ("mat2", b)):
            ok = isinstance(t, torch.Tensor) and t.dim() == 2 and (t.dtype in mx.FP8_FORMATS or (fp4 is not None
                                                                                         and t.dtype == fp4))
            if not ok:
                what = type(t).__name__ if not isinstance(t, torch.Tensor) else f"{t.dim()}-D {t.dtype}"
                raise ArgumentError(name, Shown(what), "a block-scaled torch._scaled_mm takes 2-D "
                                    "torch.float8_e4m3fn / float8_e5m2 (MXFP8) or torch.float4_e2m1fn_x2 "
                                    "(MXFP4, NVFP4) tensors")
            fmts.append("e2m1fn" if t.dtype == fp4 else mx.FP8_FORMATS[t.dtype])
        if (fmts[0] == "e2m1fn") != (fmts[1] == "e2m1fn"):
            raise ArgumentError("mat2", Shown(str(b.dtype)), f"self is {a.dtype}: packed fp4 operands go with "
                                "packed fp4 (K counts differ otherwise)", fix="quantise both to one recipe")
        if b.shape[0] != a.shape[1]:
            raise ValueError(f"_scaled_mm under emulate: shapes {tuple(a.shape)} and {tuple(b.shape)} cannot be "
                             f"multiplied ({a.shape[1]} != {b.shape[0]}" + (", fp4 bytes along K)" if fmts[0] ==
                                                                            "e2m1fn" else ")"))
        pack = 2 if fmts[0] == "e2m1fn" else 1
        m, k, n = a.shape[0], a.shape[1] * pack, b.shape[1]
        if out_dtype is None or out_dtype not in _FORMAT:
            raise ArgumentError("out_dtype", out_dtype, "an fp8 or fp4 output of torch._scaled_mm is not "
                                "modelled", fix="pass out_dtype=torch.bfloat16, torch.float16 or torch.float32")
        dtypes = []
        for name, s in (("scale_a", scale_a), ("scale_b", scale_b)):
            if not isinstance(s, torch.Tensor) or s.dtype not in mx.SCALE_FORMATS:
                what = type(s).__name__ if not isinstance(s, torch.Tensor) else str(s.dtype)
                raise ArgumentError(name, Shown(what), "block scales are torch.float8_e8m0fnu (MX) or "
                                    "torch.float8_e4m3fn (NVFP4's ue4m3)")
            dtypes.append(s.dtype)
        if dtypes[0] != dtypes[1]:
            raise ArgumentError("scale_b", Shown(str(dtypes[1])), f"scale_a is {dtypes[0]}: both operands' scales "
                                "must have one format")
        fs = "ue4m3" if dtypes[0] == torch.float8_e4m3fn else "e8m0fnu"
        route = self.block_route(fmts[0], fmts[1], fs, block)
        if k % block:
            raise ArgumentError("self", Shown(f"<K = {k}>"), f"K = {k} must be a multiple of the scale block "
                                f"{block}", fix=f"pad A and B with zeros to a multiple of {block} along K")
        kb = k // block
        layouts = (swizzled, swizzled) if isinstance(swizzled, bool) else tuple(swizzled)
        plain = [self._plain_scales(name, s, rows, kb, sw, fs) for name, s, rows, sw in
                 (("scale_a", scale_a, m, layouts[0]), ("scale_b", scale_b, n, layouts[1]))]
        g = torch.ones((), dtype=torch.float32)
        if (global_a is None) != (global_b is None):
            raise ArgumentError("scale_b" if global_b is None else "scale_a", None, "NVFP4's global scales come "
                                "in pairs: one float32 value for each operand", fix="pass both or neither")
        if global_a is not None:
            ga = _scale("scale_a", global_a, (1, 1), a.device)
            gb = _scale("scale_b", global_b, (1, 1), a.device)
            g = (ga * gb).reshape(())  # binary32, nearest even
        _check_bias(bias, n)
        A = mx.values(a)
        B = mx.values(b.t()).T  # mat2.t() is (n, K) packed along K as A is
        product = gemm(A, B, model=route.model, scale_a=plain[0], scale_b=plain[1].T, backend=self.backend)
        out = _epilogue(route, torch.from_numpy(np.asarray(product, dtype=np.float32)).to(a.device),
                        g.to(a.device), bias, out_dtype)
        self._record(op, (a, b), route, 1)
        return out

    @staticmethod
    def _plain_scales(name: str, s: torch.Tensor, rows: int, kb: int, swizzled: bool, fs: str) -> np.ndarray:
        """One operand's scales as a float64 (rows, kb) array, read from their layout and checked: a
        negative ue4m3 (its sign bit set) is refused; NaN codes pass (they make results NaN)."""
        if swizzled:
            t = mx.unswizzle(s, rows, kb, name)
        else:
            if tuple(s.shape) != (rows, kb):
                hint = " (that is the transposed layout: pass its .t())" if tuple(s.shape) == (kb, rows) else ""
                per = "row of self" if name == "scale_a" else "column of mat2"
                raise ArgumentError(name, Shown(f"shape {tuple(s.shape)}"), f"plain (unswizzled) block scales "
                                    f"must have shape ({rows}, {kb}): one row per {per}, one scale per block of "
                                    f"K{hint}", fix="or pass them swizzled (blockfma.torch.mx.swizzle) with "
                                    "SwizzleType.SWIZZLE_32_4_4")
            t = s
        v = mx.values(t, "e4m3fn" if fs == "ue4m3" else "e8m0fnu")
        neg = np.signbit(v) & ~np.isnan(v)
        if neg.any():
            r, j = (int(x) for x in np.argwhere(neg)[0])
            raise ArgumentError(name, Shown(f"<{rows}x{kb} ue4m3 scales>"), f"the scale of row {r}, block {j} is "
                                f"{float(v[r, j])!r}: ue4m3 scales are unsigned (sign bit 0)",
                                fix="quantise with blockfma.torch.mx.to_nvfp4, or clear the sign bits")
        return v

    # --- the mode --------------------------------------------------------------------------------------------
    def __enter__(self) -> Emulation:
        mode = _Mode(self)
        mode.__enter__()
        self._modes.append(mode)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._modes.pop().__exit__(*exc)

    def report(self) -> str:
        """The ops seen so far, one row per (op, dtype, shapes, route) with its count and note."""
        counts = Counter((o.op, o.dtype, o.shapes, o.route) for o in self.log)
        gemms = Counter()
        for o in self.log:
            gemms[(o.op, o.dtype, o.shapes, o.route)] += o.gemms
        rows = [{"op": op, "dtype": dt, "shapes": sh, "calls": n, "gemms": gemms[(op, dt, sh, r)],
                 "model": r.summary, "note": r.note} for (op, dt, sh, r), n in counts.items()]
        head = f"emulate({self.name!r}): {len(self.log)} ops"
        return head + "\n" + table(rows, ["op", "dtype", "shapes", "calls", "gemms", "model", "note"])

    # --- computing ---------------------------------------------------------------------------------------------
    def _record(self, op: str, tensors: Sequence[Any], route: Route, gemms: int = 0) -> None:
        shapes = " x ".join("x".join(map(str, t.shape)) or "()" for t in tensors if isinstance(t, torch.Tensor))
        with self._lock:
            self.log.append(Op(op, shapes, route.dtype, route, gemms))

    def compute(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | None, route: Route) -> torch.Tensor:
        """D = A @ B + C by ``route`` for A (..., m, k), B (..., k, n), C None or of D's shape, batch axes
        equal, on the tensors' device; D's dtype is A's, or the model's output format for a route of fp8
        operands.  A shape the route splits over K runs as :meth:`_split_k` says; tensors the Triton kernel
        can take where they are (module docstring) run there; else on the host: a 2-D call is one
        ``bf.gemm``, a batched one one ``bf.dot`` over every (batch, i, j) (the same arithmetic per element)
        up to ``DOT_LIMIT`` products, else a ``bf.gemm`` per slice.  Scaled routes scale each operand as a
        whole.  No autograd here (:class:`_Gemm` wraps it)."""
        assert route.model is not None
        m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
        parts = route.parts(m, n, k)
        if parts > 1:
            return self._split_k(a, b, c, route, parts)
        if self._on_tensors(a, route):
            return self._compute_tensors(a, b, c, route)
        out_dtype = a.dtype if route.dtype in _DTYPE_NAMES else _torch_dtype(route.model.output_format.name)
        A, B = _to_numpy(a), _to_numpy(b)
        Cn = None if c is None else _to_numpy(c)
        ea = eb = 0
        if route.scaled:
            mdl = route.model
            A64, B64 = _formats.from_numpy(A), _formats.from_numpy(B)
            ea, eb = _pow2_scale(A64, mdl.input_format), _pow2_scale(B64, mdl.b_format)
            A = _formats.round(mdl.input_format, np.ldexp(A64, ea), RoundingMode.TiesToEven)
            B = _formats.round(mdl.b_format, np.ldexp(B64, eb), RoundingMode.TiesToEven)
        D = self._product(A, B, None if route.stored else Cn, route)
        if route.stored:
            fmt = _formats.get(route.dtype)
            with np.errstate(invalid="ignore", over="ignore"):
                D64 = _formats.round(fmt, np.ldexp(_formats.from_numpy(D), -(ea + eb)), RoundingMode.TiesToEven)
                if Cn is not None:  # one IEEE addition in the dtype (float64 holds the sum or rounds innocuously)
                    D64 = _formats.round(fmt, D64 + _formats.from_numpy(Cn), RoundingMode.TiesToEven)
            D = _formats.to_numpy(fmt, D64, check=False)
        return _from_numpy(D, out_dtype, a.device)

    def _split_k(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | None, route: Route,
                 parts: int) -> torch.Tensor:
        """K cut into ``parts`` contiguous ranges of ceil(k / parts) products, each range's GEMM by the
        route's model from +0 (fp32 partial sums), the partials added one after the other in binary32
        (nearest even), then C added in binary32; NaN codes by the model (:func:`_finish_tensor`)."""
        whole = dataclasses.replace(route, split_k=())
        k = a.shape[-1]
        size = -(-k // parts)
        total: torch.Tensor | None = None
        for s in range(0, k, size):
            part = self.compute(a[..., s:s + size], b[..., s:s + size, :], None, whole)
            total = part if total is None else total + part
        assert total is not None and total.dtype == torch.float32
        if c is not None:
            total = total + c.to(torch.float32)
        return _finish_tensor(route.model, total, torch.float32, computed=False)

    def _on_tensors(self, a: torch.Tensor, route: Route) -> bool:
        """Whether this GEMM runs where its tensors are, by ``bf.engine.triton.gemm_tensors``: CUDA tensors
        (backend "auto" or "triton") or CPU tensors under Triton's interpreter (backend "triton"), a model
        the kernel runs, operands taken as they are (no scaling, register reads or flushing), K > 0."""
        if route.scaled or route.stored or route.round_inputs is not None or a.shape[-1] == 0:
            return False
        if self.backend not in ("auto", "triton"):
            return False
        from ..engine import triton as tr

        here = a.device.type == "cuda" or (a.device.type == "cpu" and self.backend == "triton" and tr.interpreting())
        model = route.model
        assert model is not None
        return here and model.subnormals and tr.supports(model) and tr.available()

    def _compute_tensors(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | None,
                         route: Route) -> torch.Tensor:
        """The GEMM on the tensors' device by the Triton kernel, slice by slice over batch axes; the float32
        results finished as ``bf.gemm`` finishes them (:func:`_finish_tensor`).  A GEMM that cannot fit the
        device's free memory is refused first (``bf.engine.triton.check_fits``)."""
        from ..engine import triton as tr

        assert route.model is not None
        model = route.model.arithmetic_model()
        m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
        lead = tuple(a.shape[:-2])
        tr.check_fits(m * max(1, int(np.prod(lead))), k, n, a.device)
        A, B = a.detach().to(torch.float32), b.detach().to(torch.float32)  # exact: values of <= 24 bits
        C = torch.zeros(lead + (m, n), dtype=torch.float32, device=a.device) if c is None else \
            c.detach().to(torch.float32)
        D = torch.empty(lead + (m, n), dtype=torch.float32, device=a.device)
        for idx in np.ndindex(*lead):
            D[idx] = tr.gemm_tensors(model, A[idx], B[idx], C[idx])
        out = a.dtype if route.dtype in _DTYPE_NAMES else _torch_dtype(model.output_format.name)
        return _finish_tensor(model, D, out)

    def _product(self, A: np.ndarray, B: np.ndarray, C: np.ndarray | None, route: Route) -> np.ndarray:
        """The model's D = A @ B + C in its output format, batch axes equal."""
        model, rnd = route.model, route.round_inputs
        if A.ndim == 2:
            return gemm(A, B, C, model=model, round_inputs=rnd, backend=self.backend)
        m, k, n = A.shape[-2], A.shape[-1], B.shape[-1]
        if int(np.prod(A.shape[:-2])) * m * n * k <= DOT_LIMIT:
            return dot(A[..., :, None, :], np.swapaxes(B, -1, -2)[..., None, :, :], C, model=model, round_inputs=rnd,
                       backend=self.backend)
        out = np.empty(A.shape[:-2] + (m, n), dtype=model.output_format.dtype)
        for idx in np.ndindex(*A.shape[:-2]):
            out[idx] = gemm(A[idx], B[idx], None if C is None else C[idx], model=model, round_inputs=rnd,
                            backend=self.backend)
        return out


def _split_note(split: tuple) -> str:
    if not split:
        return " (no split-K order known)"
    return f" (split-K as cuBLAS's recorded order at {len(split)} shapes, else unsplit)"


DOT_LIMIT = 1 << 22  # products of a batched matmul run as one bf.dot call (it copies its broadcast operands)


def _wrap(model: Model, fmt: str, where: str) -> Route:
    """The route of a dtype whose format is ``fmt`` through ``model`` (a model for another pair is adapted:
    see the module's docstring)."""
    note = where
    if model.input_format.name == "tf32" and fmt == "fp32":
        if model.output_format.name != "fp32":
            raise ArgumentError("model", Shown(model.summary()), "a tf32 model for fp32 tensors must output fp32")
        return Route(fmt, model, note, round_inputs="device")
    scaled = not (_formats.holds(model.input_format, fmt) and _formats.holds(model.b_format, fmt))
    if scaled:
        note += f"; inputs scaled per tensor (power of 2) and rounded to {model.input_name}"
    out = model.output_format.name
    if out == fmt and not scaled:
        return Route(fmt, model, note)
    if not _formats.holds(model.output_format, fmt):
        raise ArgumentError("model", Shown(model.summary()), f"its output {out} is narrower than the {fmt} tensors "
                            "it would compute", fix=f"pass a model with {fmt} or fp32 output")
    if not scaled and model.c_entry == "fused" and model.instruction_k is None and model.accumulator_format is None:
        try:
            lib = model.replace(output_format=fmt, accumulator_format=out, c_entry="end",
                                name=f"{model.name or model.summary()}, chained, {out} sum stored as {fmt}")
            return Route(fmt, lib, note)
        except ValueError:
            pass
    return Route(fmt, model, note + f"; result rounded once to {fmt} (nearest even), then C added",
                 scaled=scaled, stored=True)


# --- the torch side ------------------------------------------------------------------------------------------
class _Gemm(torch.autograd.Function):
    """D = A @ B + C emulated, with the backward GEMMs emulated by the same routes."""

    @staticmethod
    def forward(ctx: Any, emu: Emulation, route: Route, a: torch.Tensor, b: torch.Tensor,
                c: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(a, b)
        ctx.emu, ctx.route = emu, route
        return emu.compute(a, b, c, route)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        a, b = ctx.saved_tensors
        emu, route = ctx.emu, ctx.route
        ga = gb = gc = None
        grad = grad.to(a.dtype)
        if ctx.needs_input_grad[2]:
            ga = emu.compute(grad, b.transpose(-1, -2), None, route)
            emu._record("backward grad_A", (grad, b), route, max(1, int(np.prod(a.shape[:-2]))))
        if ctx.needs_input_grad[3]:
            gb = emu.compute(a.transpose(-1, -2), grad, None, route)
            emu._record("backward grad_B", (a, grad), route, max(1, int(np.prod(b.shape[:-2]))))
        if ctx.needs_input_grad[4]:
            gc = grad
        return None, None, ga, gb, gc


def _matmul(emu: Emulation, op: str, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | None = None,
            native: Callable[[], torch.Tensor] | None = None) -> torch.Tensor:
    """torch.matmul's semantics (1-D operands, broadcast batch axes; a batched A with a 2-D B is folded
    into one GEMM, as torch folds it) plus C, emulated; ``native`` runs a dtype the emulation leaves alone."""
    for name, t in (("input", a), ("other", b)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op} under emulate: {name} must be a tensor, not {type(t).__name__}")
    if a.dtype != b.dtype or (c is not None and c.dtype != a.dtype):
        got = ", ".join(str(t.dtype) for t in (a, b, c) if t is not None)
        raise ValueError(f"{op} under emulate({emu.name!r}): operands have different dtypes ({got}); cast them to "
                         "one dtype first (torch refuses this too)")
    route = emu.route(a.dtype)
    if route.model is None or a.dim() == 0 or b.dim() == 0:
        emu._record(op, (a, b), route)
        assert native is not None
        return native()
    squeeze = []
    if a.dim() == 1:
        a, squeeze = a.unsqueeze(0), squeeze + [-2]
    if b.dim() == 1:
        b, squeeze = b.unsqueeze(-1), squeeze + [-1]
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"{op} under emulate: shapes {tuple(a.shape)} and {tuple(b.shape)} cannot be multiplied "
                         f"({a.shape[-1]} != {b.shape[-2]})")
    m, n = a.shape[-2], b.shape[-1]
    if b.dim() == 2 and a.dim() > 2:  # fold A's batch into its rows: one GEMM, as torch runs it
        lead = a.shape[:-2]
        a2 = a.reshape(-1, a.shape[-1])
        c2 = None if c is None else c.expand(*lead, m, n).reshape(-1, n)
        out = _Gemm.apply(emu, route, a2, b, c2).reshape(*lead, m, n)
        gemms = 1
    else:
        lead = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        a3 = a.expand(*lead, *a.shape[-2:])
        b3 = b.expand(*lead, *b.shape[-2:])
        c3 = None if c is None else c.expand(*lead, m, n)
        out = _Gemm.apply(emu, route, a3, b3, c3)
        gemms = max(1, int(np.prod(lead)))
    emu._record(op, (a, b) if c is None else (c, a, b), route, gemms)
    for axis in squeeze:
        out = out.squeeze(axis) if axis == -1 else out.squeeze(-2 if out.dim() >= 2 else -1)
    return out


def _unit(op: str, name: str, value: Any, fix: str) -> None:
    if value != 1:
        raise ArgumentError(name, value, f"{op} under emulate takes {name}=1 only (no scaling is modelled)", fix=fix)


def _scale(name: str, s: Any, shape: tuple[int, int], device: torch.device) -> torch.Tensor:
    """A ``_scaled_mm`` scale as a float32 tensor that broadcasts to (m, n): one value, or ``shape``."""
    if not isinstance(s, torch.Tensor) or s.dtype != torch.float32:
        what = type(s).__name__ if not isinstance(s, torch.Tensor) else str(s.dtype)
        raise ArgumentError(name, Shown(what), "must be a float32 tensor", fix="e.g. torch.tensor(1.0)")
    if s.numel() == 1:
        return s.reshape(1, 1).to(device)
    if tuple(s.shape) != shape:
        raise ArgumentError(name, Shown(f"shape {tuple(s.shape)}"), f"must hold one value (per tensor) or have "
                            f"shape {shape} (row-wise scaling)")
    return s.to(device)


def _check_bias(bias: Any, n: int) -> None:
    if bias is not None and (not isinstance(bias, torch.Tensor) or bias.dtype not in _FORMAT
                             or tuple(bias.shape) != (n,)):
        what = type(bias).__name__ if not isinstance(bias, torch.Tensor) else f"{tuple(bias.shape)} {bias.dtype}"
        raise ArgumentError("bias", Shown(what), f"must be a 1-D fp32, fp16 or bf16 tensor of {n} values "
                            "(one per output column)")


def _epilogue(route: Route, product: torch.Tensor, s: torch.Tensor, bias: torch.Tensor | None,
              out_dtype: torch.dtype) -> torch.Tensor:
    """The binary32 epilogue of a scaled GEMM: ``product`` (fp32) times ``s`` (fp32, broadcasting), plus
    ``bias`` converted exactly to fp32, each step rounded to nearest even in binary32, then one conversion
    (nearest even) to ``out_dtype``; NaNs take the route's model's NaN codes."""
    d = product * s
    if bias is not None:
        d = d + bias.to(device=product.device, dtype=torch.float32)
    out = d.to(out_dtype)  # nearest even
    assert route.model is not None
    if bool(torch.isnan(out).any()):
        nan_model = Model(Family.EXACT_FUSED, _FORMAT[out_dtype], _FORMAT[out_dtype], block_width=1,
                          nan=route.model.nan, name="the epilogue's NaN codes")
        out = _finish_tensor(nan_model, out.to(torch.float32), out_dtype, computed=False)
    return out


def _with_out(result: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    if out is None:
        return result
    out.resize_(result.shape)
    return out.copy_(result)


class _Mode(TorchFunctionMode):
    """The TorchFunctionMode of one ``with emulate(...)`` block."""

    def __init__(self, emu: Emulation) -> None:
        super().__init__()
        self.emu = emu

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: Any = None) -> Any:
        kwargs = dict(kwargs or {})
        handler = _HANDLERS.get(func)
        if handler is None:
            if func in _NOT_EMULATED:
                self.emu._record(getattr(func, "__name__", str(func)), args,
                                 Route("-", None, "a matmul-like op blockfma does not route: native torch"))
            return func(*args, **kwargs)
        return handler(self.emu, func, *args, **kwargs)


def _h_matmul(emu: Emulation, func: Any, a: Any, b: Any, *, out: Any = None) -> Any:
    return _with_out(_matmul(emu, "matmul", a, b, native=lambda: func(a, b)), out)


def _h_rmatmul(emu: Emulation, func: Any, b: Any, a: Any) -> Any:
    return _matmul(emu, "matmul", a, b, native=lambda: func(b, a))


def _unrouted(emu: Emulation, op: str, func: Any, args: tuple, kw: dict) -> Any:
    """A call with keywords the emulation does not model (``out_dtype``, ...): native torch, logged."""
    emu._record(op, args, Route("-", None, f"not emulated (keywords {', '.join(sorted(kw))}): native torch"))
    return func(*args, **kw)


def _h_mm(emu: Emulation, func: Any, a: Any, b: Any, *, out: Any = None, **kw: Any) -> Any:
    if kw:
        return _unrouted(emu, "mm", func, (a, b), {"out": out, **kw})
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"mm under emulate: both operands must be 2-D; got {tuple(a.shape)} and {tuple(b.shape)}")
    return _with_out(_matmul(emu, "mm", a, b, native=lambda: func(a, b)), out)


def _h_bmm(emu: Emulation, func: Any, a: Any, b: Any, *, out: Any = None, **kw: Any) -> Any:
    if kw:
        return _unrouted(emu, "bmm", func, (a, b), {"out": out, **kw})
    if a.dim() != 3 or b.dim() != 3 or a.shape[0] != b.shape[0]:
        raise ValueError(f"bmm under emulate: operands must be 3-D with one batch size; got {tuple(a.shape)} and "
                         f"{tuple(b.shape)}")
    return _with_out(_matmul(emu, "bmm", a, b, native=lambda: func(a, b)), out)


def _addmm_like(op: str, dims: int) -> Callable[..., Any]:
    def handler(emu: Emulation, func: Any, c: Any, a: Any, b: Any, *, beta: Any = 1, alpha: Any = 1,
                out: Any = None, **kw: Any) -> Any:
        if kw:
            return _unrouted(emu, op, func, (c, a, b), {"beta": beta, "alpha": alpha, "out": out, **kw})
        if a.dim() != dims or b.dim() != dims:
            raise ValueError(f"{op} under emulate: batch operands must be {dims}-D; got {tuple(a.shape)} and "
                             f"{tuple(b.shape)}")
        if emu.route(a.dtype).model is None:
            emu._record(op, (c, a, b), emu.route(a.dtype))
            return func(c, a, b, beta=beta, alpha=alpha, out=out)
        _unit(op, "alpha", alpha, "scale the product outside the call")
        if beta not in (0, 1):
            _unit(op, "beta", beta, "pass beta=0 or 1, or scale C first")
        result = _matmul(emu, op, a, b, None if beta == 0 else c)
        if beta == 0:
            result = result.expand(torch.broadcast_shapes(result.shape, c.shape))
        if func in (torch.Tensor.addmm_, torch.Tensor.baddbmm_):
            return c.copy_(result)
        return _with_out(result, out)

    return handler


def _h_scaled_mm(emu: Emulation, func: Any, a: Any, b: Any, scale_a: Any, scale_b: Any, bias: Any = None,
                 scale_result: Any = None, out_dtype: Any = None, use_fast_accum: bool = False, *,
                 out: Any = None) -> Any:
    """``torch._scaled_mm``: fp32 scales (per tensor, row-wise) run as :meth:`Emulation.scaled_mm`; one-byte
    scales (float8_e8m0fnu: MX, one per 32; float8_e4m3fn: NVFP4, one per 16) as
    :meth:`Emulation.block_scaled_mm`, read in cuBLAS's swizzled layout, the one torch passes cuBLAS (a
    plain matrix of that size, 128k rows and 4j blocks, is read swizzled too, as cuBLAS would read it; plain
    scales go through ``F.scaled_mm`` with ``SwizzleType.NO_SWIZZLE``)."""
    if isinstance(scale_a, torch.Tensor) and scale_a.dtype in mx.SCALE_FORMATS:
        if scale_result is not None:
            raise ArgumentError("scale_result", Shown("a tensor"), "scales an fp8 output only, which is not "
                                "modelled", fix="pass scale_result=None with a bf16, fp16 or fp32 out_dtype")
        block = 16 if scale_a.dtype == torch.float8_e4m3fn else 32
        return _with_out(emu.block_scaled_mm(a, b, scale_a, scale_b, block=block, swizzled=True, bias=bias,
                                             out_dtype=out_dtype), out)
    return _with_out(emu.scaled_mm(a, b, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum), out)


_PLAIN_RECIPES = (0, 1)  # F.ScalingType.TensorWise, RowWise: the scales _scaled_mm takes
_BLOCK_RECIPES = {2: 16, 3: 32}  # F.ScalingType.BlockWise1x16, BlockWise1x32: elements per scale


def _v2_block_recipe(recipe_a: list, recipe_b: list) -> tuple[int, bool] | None:
    """(block, two-level) of a block-scale recipe pair of ``F.scaled_mm``: both ``[BlockWise1x32]`` or both
    ``[BlockWise1x16]``, or both ``[BlockWise1x16, TensorWise]`` (NVFP4 with a global scale); else None."""
    ra, rb = [int(x) for x in recipe_a], [int(x) for x in recipe_b]
    if ra != rb:
        return None
    if len(ra) == 1 and ra[0] in _BLOCK_RECIPES:
        return _BLOCK_RECIPES[ra[0]], False
    if ra == [2, 0]:
        return 16, True
    return None


def _v2_swizzled(name: str, swizzle: Any) -> bool:
    """Whether ``F.scaled_mm``'s swizzle list says cuBLAS's layout (SWIZZLE_32_4_4 first; none: plain)."""
    kinds = [int(x) for x in (swizzle or [])]
    if kinds and kinds[0] not in (0, 1):
        raise ArgumentError(name, kinds, "swizzles are SwizzleType.NO_SWIZZLE (0) or SWIZZLE_32_4_4 (1)")
    return bool(kinds) and kinds[0] == 1


def _h_scaled_mm_v2(emu: Emulation, func: Any, a: Any, b: Any, scale_a: Any, recipe_a: Any, swizzle_a: Any,
                    scale_b: Any, recipe_b: Any, swizzle_b: Any, bias: Any = None, out_dtype: Any = None,
                    contraction_dim: Any = (), use_fast_accum: bool = False, *, out: Any = None) -> Any:
    """``torch._scaled_mm_v2`` (``F.scaled_mm``): one tensor-wise or row-wise scale per operand, unswizzled,
    K the usual axis, runs as :meth:`Emulation.scaled_mm`; the block-scale recipes BlockWise1x32 (MX),
    BlockWise1x16 (NVFP4, with or without a TensorWise global scale second) as
    :meth:`Emulation.block_scaled_mm`, each operand's scales read as its swizzle says (NO_SWIZZLE, or none
    given: plain (rows, K // block); SWIZZLE_32_4_4: cuBLAS's layout); other recipes (1x128, 128x128 fp32
    blocks) or a ``contraction_dim`` run natively, logged as not emulated."""
    blocks = _v2_block_recipe(list(recipe_a), list(recipe_b))
    if blocks is not None and not list(contraction_dim):
        block, two_level = blocks
        layouts = (_v2_swizzled("swizzle_a", swizzle_a), _v2_swizzled("swizzle_b", swizzle_b))
        return _with_out(emu.block_scaled_mm(
            a, b, scale_a[0], scale_b[0], block=block, swizzled=layouts,
            global_a=scale_a[1] if two_level else None, global_b=scale_b[1] if two_level else None, bias=bias,
            out_dtype=out_dtype), out)
    plain = (len(scale_a) == 1 and len(scale_b) == 1 and len(recipe_a) == 1 and len(recipe_b) == 1
             and recipe_a[0] in _PLAIN_RECIPES and recipe_b[0] in _PLAIN_RECIPES and not any(swizzle_a)
             and not any(swizzle_b) and not list(contraction_dim))
    if not plain:
        emu._record("_scaled_mm_v2", (a, b), Route("-", None, "scaling recipe not modelled (block scales, "
                                                              "swizzles or contraction_dim): native torch"))
        return func(a, b, scale_a, recipe_a, swizzle_a, scale_b, recipe_b, swizzle_b, bias, out_dtype,
                    contraction_dim, use_fast_accum, **({} if out is None else {"out": out}))
    return _with_out(emu.scaled_mm(a, b, scale_a[0], scale_b[0], bias, None, out_dtype, use_fast_accum), out)


def _h_linear(emu: Emulation, func: Any, x: Any, w: Any, bias: Any = None) -> Any:
    return _matmul(emu, "linear", x, w.t() if w.dim() == 2 else w, bias, native=lambda: func(x, w, bias))


def _h_sdpa(emu: Emulation, func: Any, q: Any, k: Any, v: Any, attn_mask: Any = None, dropout_p: float = 0.0,
            is_causal: bool = False, scale: float | None = None, enable_gqa: bool = False) -> Any:
    """torch's documented reference of scaled_dot_product_attention, its two matmuls emulated."""
    if emu.route(q.dtype).model is None:
        emu._record("scaled_dot_product_attention", (q, k, v), emu.route(q.dtype))
        return func(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                    enable_gqa=enable_gqa)
    L, S = q.size(-2), k.size(-2)
    factor = 1 / math.sqrt(q.size(-1)) if scale is None else scale
    bias = torch.zeros(L, S, dtype=q.dtype, device=q.device)
    if is_causal:
        if attn_mask is not None:
            raise ValueError("scaled_dot_product_attention: pass attn_mask or is_causal=True, not both")
        keep = torch.ones(L, S, dtype=torch.bool, device=q.device).tril(diagonal=0)
        bias = bias.masked_fill(keep.logical_not(), float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            bias = bias.masked_fill(attn_mask.logical_not(), float("-inf"))
        else:
            bias = attn_mask + bias
    if enable_gqa:
        k = k.repeat_interleave(q.size(-3) // k.size(-3), -3)
        v = v.repeat_interleave(q.size(-3) // v.size(-3), -3)
    scores = _matmul(emu, "sdpa q@k^T", q, k.transpose(-2, -1)) * factor
    weights = torch.softmax(scores + bias, dim=-1)
    if dropout_p > 0.0:
        weights = torch.dropout(weights, dropout_p, train=True)
    return _matmul(emu, "sdpa attn@v", weights, v)


_HANDLERS: dict[Any, Callable[..., Any]] = {
    torch.matmul: _h_matmul, torch.Tensor.matmul: _h_matmul, torch.Tensor.__matmul__: _h_matmul,
    torch.Tensor.__rmatmul__: _h_rmatmul,
    torch.mm: _h_mm, torch.Tensor.mm: _h_mm, torch.bmm: _h_bmm, torch.Tensor.bmm: _h_bmm,
    torch.addmm: _addmm_like("addmm", 2), torch.Tensor.addmm: _addmm_like("addmm", 2),
    torch.Tensor.addmm_: _addmm_like("addmm", 2),
    torch.baddbmm: _addmm_like("baddbmm", 3), torch.Tensor.baddbmm: _addmm_like("baddbmm", 3),
    torch.Tensor.baddbmm_: _addmm_like("baddbmm", 3),
    F.linear: _h_linear, F.scaled_dot_product_attention: _h_sdpa, torch._scaled_mm: _h_scaled_mm,
}
_NOT_EMULATED = {torch.einsum, torch.mv, torch.Tensor.mv, torch.dot, torch.Tensor.dot, torch.addmv, torch.addbmm,
                 torch.tensordot, torch.inner, torch.outer, torch.chain_matmul, F.conv1d, F.conv2d, F.conv3d,
                 F.bilinear} | {getattr(torch, n) for n in ("_scaled_grouped_mm", "_scaled_grouped_mm_v2")
                                if hasattr(torch, n)}
if hasattr(torch, "_scaled_mm_v2"):  # F.scaled_mm in newer torch: its tensor- and row-wise recipes
    _HANDLERS[torch._scaled_mm_v2] = _h_scaled_mm_v2


def emulate(device: Any = None, *, model: Model | None = None, overrides: Mapping[Any, Any] | None = None,
            backend: str = "auto", name: str | None = None, split_k: Mapping[Any, Any] | None = None) -> Emulation:
    """A context manager under which torch's matmuls run with ``device``'s arithmetic (or ``model``'s).

    ``device``: a preset name (``"MI300X"``) or Device; ``model``: one Model for every fp16/bf16/fp32 matmul
    (and fp8 ``torch._scaled_mm``) instead; ``overrides``: ``{dtype: Model or instruction name}`` for some
    dtypes; ``backend``: the engine ``bf.gemm`` uses (``"auto"``: also the Triton kernel for tensors on a
    GPU); ``name``: the label in reports; ``split_k``: ``{dtype: {(m, n, k): parts}}``, split-K plans that
    replace the recorded ones (fp32-output routes).  See the module docstring for what runs per dtype.

        >>> with bf.torch.emulate("V100") as emu:  # doctest: +SKIP
        ...     y = x @ w
        >>> print(emu.report())  # doctest: +SKIP
    """
    return Emulation(device, model=model, overrides=overrides, backend=backend, name=name, split_k=split_k)
