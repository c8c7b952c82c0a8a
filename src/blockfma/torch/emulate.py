"""``emulate``: torch's matmuls computed by ``bf.gemm`` with a device's models, inside a TorchFunctionMode.

docs/torch.md says which model runs for each dtype and op (the :class:`Route`, chosen once per dtype by
:mod:`.routes`; :meth:`Emulation.report` lists them per call).  A model whose input format does not hold the
dtype gets each operand scaled by a power of two (its largest magnitude to at most the format's largest
value) and rounded to nearest even into the format (an infinity becomes NaN in a format without infinities);
its result, and that of a model whose output is wider than the dtype without a ``c_entry="end"`` form, is
scaled back exactly and rounded once to nearest even into the dtype, then C added.  :meth:`Emulation.scaled_mm`
and :meth:`Emulation.block_scaled_mm` say what is rounded where in ``torch._scaled_mm`` / ``F.scaled_mm``.
Autograd and the handler table are the torch front's (:mod:`blockfma.torch_front`); :mod:`.compute` computes
a routed GEMM where :meth:`Emulation.gemm` says, :mod:`.scaled` reads the scaled GEMMs' operands.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from .. import torch_front as front
from ..arguments import ArgumentError, Shown, flag
from ..devices import Device, device as _device
from ..engine.api import check_backend
from ..evidence import Evidence, require_backed, weakest
from ..model import Model
from ..report import table
from ..torch_switches import tf32_enabled
from . import compute, mx, orders, routes, scaled
from .routes import BLOCK_KINDS, FORMATS, PROMOTE_K, Route

__all__ = ["emulate", "Emulation", "Route", "Op", "BLOCK_KINDS", "PROMOTE_K"]


@dataclass(frozen=True)
class Op:
    """One call seen under emulation: the op's name, the operands' shapes, the dtype, the route, the
    number of ``bf.gemm`` calls it took, the evidence its answer rests on (the route's and the plans'), the
    library plan of each GEMM it ran (:class:`.orders.Decision`)."""

    op: str
    shapes: str
    dtype: str
    route: Route
    gemms: int = 0
    evidence: tuple[Evidence, ...] = ()
    plans: tuple[orders.Decision, ...] = ()


def _check_arguments(device: Any, model: Any, overrides: Any, backend: Any, name: Any, split_k: Any) -> str:
    """The arguments of :func:`emulate` checked (one line each where wrong); the backend's name."""
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
                            fix="e.g. split_k={torch.float8_e4m3fn: {(16, 256, 16384): 6}}")
    return backend


class Emulation:
    """``emulate(...)``: a context manager under which torch's matmuls run with ``device``'s arithmetic (or
    ``model``'s); reusable and nestable (the innermost block wins).

    ``device``: a preset name (``"MI300X"``) or Device; ``model``: one Model for every fp16/bf16/fp32 matmul
    (and fp8 ``torch._scaled_mm``) instead; ``overrides``: ``{dtype: Model or instruction name}`` for some
    dtypes; ``backend``: the engine ``bf.gemm`` uses (``"auto"``: also the Triton kernel for tensors on a
    GPU); ``name``: the label in reports; ``split_k``: ``{dtype: {(m, n, k): parts}}``, split-K plans that
    win over the library's recorded ones (:mod:`.orders`; keys: fp16, bf16, fp32, an fp8 dtype or a pair (A's,
    B's) of them: :func:`.routes.split_key`); ``strict``: refuse (:class:`blockfma.evidence.Unbacked`)
    an op whose answer rests on anything but hardware records (an unrecorded shape's plan included).
    docs/torch.md says what runs per dtype.

    ``log``: every op seen, in order; :meth:`report` the table of them; :meth:`route` the route of a dtype.
    It is a rule of the torch front (:class:`blockfma.torch_front.Rule`) for the ops of its table, and
    brings the handlers of ``_scaled_mm``, ``F.scaled_mm`` and ``scaled_dot_product_attention``."""

    layer = "emulate"  # how error messages name it
    adds_c = True  # C enters the model (alpha and beta are not modelled)

    def __init__(self, device: Any = None, *, model: Model | None = None,
                 overrides: Mapping[Any, Any] | None = None, backend: str = "auto", name: str | None = None,
                 split_k: Mapping[Any, Any] | None = None, strict: bool = False) -> None:
        self.backend = _check_arguments(device, model, overrides, backend, name, split_k)
        self.strict = flag("strict", strict)
        self.device: Device | None = None if device is None else _device(device)
        self.model = model
        self.name = name or (self.device.name if self.device is not None else (model.name or model.summary()))
        given = device.strip() if isinstance(device, str) else getattr(self.device, "name", None)
        # the library whose plans apply: the device as named ("H200" is not the recorded H100), None under model=
        self.library = given if self.device is None or given.lower() != self.device.name.lower() else self.device.name
        self.log: list[Op] = []
        self._routes: dict[tuple, Route] = {}  # (kind, ...) -> the route, chosen once
        self._modes: list[front.Mode] = []
        self._lock = threading.Lock()
        self._overrides = routes.overrides(self.device, overrides)
        self._split: dict[str, tuple] = {}
        for key, plan in (split_k or {}).items():
            self._split[routes.split_key(key)] = orders.check_plan(plan, "split_k")
            if routes.split_key(key) != "fp32":  # its route does not depend on switches: a bad plan fails here
                self._route_of_key(routes.split_key(key), False, "split_k", Shown(f"{{{key}: ...}}"))

    def __repr__(self) -> str:
        return f"emulate({self.name!r})"

    def __enter__(self) -> Emulation:
        self._modes.append(front.Mode(self, _HANDLERS).__enter__())  # entered first: a failed entry pushes nothing
        return self

    def __exit__(self, *exc: Any) -> None:
        self._modes.pop().__exit__(*exc)

    # --- routes (chosen by :mod:`.routes`, cached here) ---------------------------------------------------------
    def route(self, dtype: torch.dtype) -> Route:
        """How matmuls of ``dtype`` run under this emulation (ValueError where the device lacks the dtype)."""
        if dtype not in FORMATS:
            return Route(str(dtype).removeprefix("torch."), None, "not emulated: native torch")
        tf32 = dtype == torch.float32 and tf32_enabled(torch)  # the TF32 switch may change between calls

        def choose() -> Route:
            route = self._overrides.get(dtype) or routes.library(self.device, self.model, dtype, tf32)
            return routes.with_split(route, self.library, self._split.get(FORMATS[dtype], ()))

        return self._cached(("dtype", dtype, tf32), choose)

    def _cached(self, key: tuple, choose: Callable[[], Route]) -> Route:
        if key not in self._routes:
            self._routes[key] = choose()
        return self._routes[key]

    def fp8_route(self, a_dtype: torch.dtype, b_dtype: torch.dtype, fast_accum: bool) -> Route:
        """The route of ``torch._scaled_mm``'s product for fp8 operands of these dtypes: the device's (fp8 ->
        fp32) model (the H100's ``wgmma``) or ``model=``; without ``fast_accum`` a model chaining its blocks in
        its own accumulator is promoted: a fresh chain every ``PROMOTE_K`` products, added to an fp32 sum."""
        def choose() -> Route:
            route = routes.fp8(self.device, self.model, a_dtype, b_dtype, fast_accum)
            return routes.with_split(route, self.library, self._split.get(route.dtype, ()))

        return self._cached(("fp8", a_dtype, b_dtype, fast_accum), choose)

    def block_route(self, a_format: str, b_format: str, scale_format: str, block: int) -> Route:
        """The route of a block-scaled ``torch._scaled_mm``: the device's block-scaled instruction
        (:data:`BLOCK_KINDS`) for operands of these formats (``"e4m3fn"``, ``"e5m2"``, ``"e2m1fn"``) and
        scales of ``scale_format`` (``"e8m0fnu"``, ``"ue4m3"``) per ``block`` elements along K, or ``model=``."""
        key = (a_format, b_format, scale_format, block)
        return self._cached(("block", *key),
                            lambda: routes.with_split(routes.block(self.device, self.model, *key), self.library))

    def _route_of_key(self, key: str, fast_accum: bool, argument: str, shown: Any) -> Route:
        """The route of a :func:`.routes.split_key` key (fp16/bf16/fp32 matmuls, or fp8 ``_scaled_mm``); one the
        device lacks is refused naming ``argument`` (shown as ``shown``), the argument that asked for it."""
        dtypes = {name: dtype for dtype, name in routes.FP8.items()}
        fa, _, fb = key.partition("*")
        try:
            return self.route(routes.DTYPES[key]) if key in routes.DTYPES else \
                self.fp8_route(dtypes[fa], dtypes[fb or fa], fast_accum)
        except ArgumentError as exc:
            raise ArgumentError(argument, shown, exc.problem, fix=exc.fix) from None

    # --- the scaled GEMMs ----------------------------------------------------------------------------------------
    def scaled_mm(self, a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                  bias: torch.Tensor | None = None, scale_result: torch.Tensor | None = None,
                  out_dtype: torch.dtype | None = None, use_fast_accum: bool = False) -> torch.Tensor:
        """``torch._scaled_mm`` emulated: D = round_out(scale_a * scale_b * (A @ B) + bias).

        What is rounded where (the fp32 epilogue of cuBLASLt's fp8 GEMM, as assumed here): the fp8 products
        summed by :meth:`fp8_route`'s model into an fp32 result P; then :func:`.scaled.epilogue` with s =
        scale_a * scale_b in binary32 (per tensor: one value each; row-wise: scale_a (m, 1), scale_b (1, n)).
        An fp8 output (``out_dtype`` None or fp8, the only use of ``scale_result``) is not modelled: refused."""
        m, _, n = scaled.fp8_operands(a, b)
        scaled.check_out_dtype(out_dtype, "an fp8 (or other) output")
        scaled.check_scale_result(scale_result)
        sa = scaled.scale("scale_a", scale_a, (m, 1), a.device)
        sb = scaled.scale("scale_b", scale_b, (1, n), a.device)
        scaled.check_bias(bias, n)
        route = self.fp8_route(a.dtype, b.dtype, bool(use_fast_accum))
        ran: list = []
        product = self.gemm(a, b, None, route, ran)  # fp32, on a's device
        assert product.dtype == torch.float32
        out = scaled.epilogue(route, product, sa * sb, bias, out_dtype)
        self.record("_scaled_mm", (a, b), route, 1, ran)
        return out

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

        What is rounded where: the products and scales by :meth:`block_route`'s instruction model, its steps
        chained over all of K, each step's fp32 result entering the next as C (the tensor-memory accumulator,
        assumed: no promotion, ``use_fast_accum`` changes nothing); a NaN scale makes its products' sums NaN.
        Then :func:`.scaled.epilogue` with g = ga * gb (binary32; 1 without global scales).  K must be a
        multiple of ``block`` (pad A and B with zeros); a last instruction step short of its k is padded with
        zero products."""
        fa, fb, m, k, n = scaled.block_operands(a, b)
        scaled.check_out_dtype(out_dtype, "an fp8 or fp4 output")
        fs = scaled.block_scale_format(scale_a, scale_b)
        route = self.block_route(fa, fb, fs, block)
        if k % block:
            raise ArgumentError("self", Shown(f"<K = {k}>"), f"K = {k} must be a multiple of the scale block "
                                f"{block}", fix=f"pad A and B with zeros to a multiple of {block} along K")
        sw_a, sw_b = (swizzled, swizzled) if isinstance(swizzled, bool) else tuple(swizzled)
        sa = scaled.block_scales("scale_a", scale_a, m, k // block, sw_a, fs)
        sb = scaled.block_scales("scale_b", scale_b, n, k // block, sw_b, fs)
        g = scaled.global_scale(global_a, global_b, a.device)
        scaled.check_bias(bias, n)
        self.evidence(route, (m, n, k))  # unsplit: no record of a block-scaled split
        B = mx.values(b.t()).T  # mat2.t() is (n, K) packed along K as A is
        product = compute.block_scaled(mx.values(a), B, sa, sb.T, route, self.backend, a.device)
        out = scaled.epilogue(route, product, g.to(a.device), bias, out_dtype)
        self.record(op, (a, b), route, 1, [route.split_k.decide(m, n, k)])
        return out

    # --- the log ---------------------------------------------------------------------------------------------------
    def evidence(self, route: Route, shape: tuple[int, int, int] | None = None) -> tuple[Evidence, ...]:
        """What a GEMM of ``shape`` (m, n, k) by ``route`` rests on: the route's evidence and its library plan's
        for the shape; under ``strict`` an unbacked claim (the route's first, then the plan's) raises
        :class:`blockfma.evidence.Unbacked` before any work."""
        plan = () if shape is None else (route.split_k.decide(*shape).evidence,)
        if self.strict:
            what = f"a {route.dtype} GEMM" + ("" if shape is None else f" of (m, n, k) = {shape}")
            for claims in (route.evidence, plan) if plan else (route.evidence,):
                require_backed(claims, f"{what} in emulate({self.name!r})")
        return route.evidence + plan

    def record(self, op: str, tensors: Sequence[Any], route: Route, gemms: int = 0, ran: Sequence[Any] = ()) -> None:
        """Log a call: its operands' shapes, the route, the number of ``bf.gemm`` calls, the evidence (the route's
        and the plans' of the GEMMs that ran: ``ran``, as :meth:`gemm` fills it)."""
        plans = tuple(dict.fromkeys(d for d in ran if isinstance(d, orders.Decision)))
        found = tuple(dict.fromkeys(route.evidence + tuple(d.evidence for d in plans)))
        with self._lock:
            self.log.append(Op(op, front.shapes(tensors), route.dtype, route, gemms,
                               found if route.model is not None else (), plans))

    def report(self, evidence: bool = False) -> str:
        """The ops seen so far, one row per (op, dtype, shapes, route) with its count, the weakest basis of its
        evidence and its note; ``evidence=True``: one row per source of each claim the op rests on instead."""
        evidence = flag("evidence", evidence)
        groups: dict[tuple, list[Op]] = {}
        for o in self.log:
            groups.setdefault((o.op, o.dtype, o.shapes, o.route), []).append(o)
        rows = []
        for (op, dt, sh, r), ops in groups.items():
            if evidence:
                rows += [{"op": op, "dtype": dt, "shapes": sh, "claim": e.claim, "evidence": e.label}
                         for e in ops[-1].evidence]
            else:
                basis = "-" if r.model is None else weakest(ops[-1].evidence).value
                plans = "".join(f"; {d.text} ({d.evidence.basis.value})" for d in dict.fromkeys(ops[-1].plans))
                rows.append({"op": op, "dtype": dt, "shapes": sh, "calls": len(ops), "gemms": sum(o.gemms for o in ops),
                             "model": r.summary, "evidence": basis, "note": r.note + plans})
        key = ["op", "dtype", "shapes"]
        columns = key + (["claim", "evidence"] if evidence else ["calls", "gemms", "model", "evidence", "note"])
        head = f"emulate({self.name!r}): {len(self.log)} ops"
        return head + "\n" + table(rows, columns, group=key if evidence else ())

    def explain(self, op_or_shape: Any, dtype: Any = None, *, fast_accum: bool = False) -> str:
        """What runs, as text: for an Op of :attr:`log`, or an (m, n, k) shape with the ``dtype`` of its GEMM (a
        ``split_k=`` key: fp16, bf16, fp32, an fp8 dtype or pair of ``_scaled_mm``, with ``fast_accum``), the
        route, its model, the library plan (parts, how they are combined) and the evidence of each decision."""
        fast_accum = flag("fast_accum", fast_accum)
        if isinstance(op_or_shape, Op):
            route, plans, head = op_or_shape.route, op_or_shape.plans, f"{op_or_shape.op} of {op_or_shape.shapes}"
        else:
            shape = op_or_shape
            if not (isinstance(shape, tuple) and len(shape) == 3 and all(
                    isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in shape)):
                raise ArgumentError("op_or_shape", Shown(repr(shape)), "must be an (m, n, k) tuple of ints >= 0 "
                                    "with its dtype, or an Op of emulate(...).log",
                                    fix="e.g. explain((16, 256, 16384), torch.float8_e4m3fn)")
            if dtype is None:
                raise ArgumentError("dtype", None, "an (m, n, k) shape needs the dtype of its GEMM",
                                    fix="e.g. explain((64, 4096, 64), torch.float16)")
            route = self._route_of_key(routes.split_key(dtype, "dtype"), fast_accum, "dtype", Shown(repr(dtype)))
            plans, head = (route.split_k.decide(*shape),) if route.model is not None else (), f"a GEMM of {shape}"
        lines = [f"emulate({self.name!r}): {head}, {route.dtype}: {route.summary}", f"  route: {route.note}"]
        lines += [f"  model: {e.claim} [{e.label}]" for e in route.evidence] or (
            ["  model: no evidence recorded [assumed]"] if route.model is not None else [])
        lines += [f"  plan of {d.shape}: {d.text} [{d.evidence.label}]" for d in plans]
        return "\n".join(lines)

    # --- the rule of the torch front ---------------------------------------------------------------------------
    def native(self, op: str, tensors: Sequence[Any], keywords: Collection[str], dims: int | None) -> bool:
        """Whether a call runs natively (logged): keywords not modelled, a dtype not emulated, 0-d operands;
        operands of the wrong rank, not tensors or of mixed dtypes are refused."""
        *cs, a, b = tensors
        if keywords:
            self.record(op, tensors, Route("-", None, f"not emulated (keywords {', '.join(sorted(keywords))}): "
                                                      "native torch"))
            return True
        if dims is not None and (a.dim() != dims or b.dim() != dims or (op == "bmm" and a.shape[0] != b.shape[0])):
            rule = _RANKS.get(op, f"batch operands must be {dims}-D")
            raise ValueError(f"{op} under emulate: {rule}; got {tuple(a.shape)} and {tuple(b.shape)}")
        for name, t in (("input", a), ("other", b)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{op} under emulate: {name} must be a tensor, not {type(t).__name__}")
        if any(t is not None and t.dtype != a.dtype for t in (b, *cs)):
            got = ", ".join(str(t.dtype) for t in (a, b, *cs) if t is not None)
            raise ValueError(f"{op} under emulate({self.name!r}): operands have different dtypes ({got}); cast them "
                             "to one dtype first (torch refuses this too)")
        route = self.route(a.dtype)
        if route.model is None or a.dim() == 0 or b.dim() == 0:
            self.record(op, tensors, route)
            return True
        return False

    def route_of(self, a: torch.Tensor) -> Route:
        return self.route(a.dtype)

    def gemm(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | None, route: Route,
             ran: list | None = None) -> torch.Tensor:
        """D = A @ B + C by ``route`` for A (..., m, k), B (..., k, n), C None or of D's shape, batch axes
        equal, on the tensors' device in A's dtype (an fp8 route: the model's output format), no autograd:
        split over K (:func:`.compute.split_k`) where the route's plan says, else where the tensors lie
        (:meth:`_on_tensors`) or on the host (:func:`.compute.host`)."""
        assert route.model is not None
        shape = (a.shape[-2], b.shape[-1], a.shape[-1])
        self.evidence(route, shape)
        plan = route.split_k.decide(*shape)
        if ran is not None:
            ran.append(plan)
        if plan.parts > 1:
            return compute.split_k(self._whole, a, b, c, route, plan.parts, plan.tile)
        return self._whole(a, b, c, route)

    def _whole(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | None, route: Route) -> torch.Tensor:
        if self._on_tensors(a, b, route):
            return compute.on_device(a, b, c, route)
        return compute.host(a, b, c, route, self.backend)

    def _on_tensors(self, a: torch.Tensor, b: torch.Tensor, route: Route) -> bool:
        """Whether this GEMM runs where its tensors are, by ``bf.engine.triton.gemm_tensors``: operands the
        kernel takes as they are (no scaling, register reads or flushing; K > 0) and the Triton engine the one
        the engine registry chooses for them with this backend (:func:`blockfma.engine.registry.choose`)."""
        model = route.model  # not None: gemm's caller routes
        if route.scaled or route.stored or route.round_inputs is not None or a.shape[-1] == 0 or not model.subnormals:
            return False
        from ..engine import registry
        from ..plan import plan

        batch, m, k, n = math.prod(a.shape[:-2]), a.shape[-2], a.shape[-1], b.shape[-1]
        z = a.new_empty(())  # choose reads the shapes and device only: views of one element, no copies
        ops = registry.Operands(z.expand(batch, m, k), z.expand(batch, k, n), z.expand(1, m, n), gemm=True)
        chosen = registry.choose(plan(model, k), ops, self.backend)
        return chosen is not None and chosen.name == "triton"


_RANKS = {"mm": "both operands must be 2-D", "bmm": "operands must be 3-D with one batch size"}


# --- the handlers emulate brings to the torch front ------------------------------------------------------------
def _h_scaled_mm(emu: Emulation, func: Any, a: Any, b: Any, scale_a: Any, scale_b: Any, bias: Any = None,
                 scale_result: Any = None, out_dtype: Any = None, use_fast_accum: bool = False, *,
                 out: Any = None) -> Any:
    """``torch._scaled_mm``: fp32 scales run as :meth:`Emulation.scaled_mm`; one-byte scales (float8_e8m0fnu:
    MX, one per 32; float8_e4m3fn: NVFP4, one per 16) as :meth:`Emulation.block_scaled_mm`, read in cuBLAS's
    swizzled layout as torch passes them (a plain matrix of that size is read swizzled too, as cuBLAS would)."""
    if isinstance(scale_a, torch.Tensor) and scale_a.dtype in mx.SCALE_FORMATS:
        scaled.check_scale_result(scale_result)
        block = 16 if scale_a.dtype == torch.float8_e4m3fn else 32
        return front.with_out(emu.block_scaled_mm(a, b, scale_a, scale_b, block=block, swizzled=True, bias=bias,
                                                  out_dtype=out_dtype), out)
    return front.with_out(emu.scaled_mm(a, b, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum), out)


def _h_scaled_mm_v2(emu: Emulation, func: Any, a: Any, b: Any, scale_a: Any, recipe_a: Any, swizzle_a: Any,
                    scale_b: Any, recipe_b: Any, swizzle_b: Any, bias: Any = None, out_dtype: Any = None,
                    contraction_dim: Any = (), use_fast_accum: bool = False, *, out: Any = None) -> Any:
    """``torch._scaled_mm_v2`` (``F.scaled_mm``): one tensor-wise or row-wise scale per operand, unswizzled,
    runs as :meth:`Emulation.scaled_mm`; BlockWise1x32 (MX) and BlockWise1x16 (NVFP4, optionally with a
    TensorWise global scale second) as :meth:`Emulation.block_scaled_mm`, scales read as each operand's
    swizzle says (:func:`.scaled.v2_swizzled`); other recipes or a ``contraction_dim`` natively, logged."""
    blocks = scaled.v2_block_recipe(list(recipe_a), list(recipe_b))
    if blocks is not None and not list(contraction_dim):
        block, two_level = blocks
        layouts = (scaled.v2_swizzled("swizzle_a", swizzle_a), scaled.v2_swizzled("swizzle_b", swizzle_b))
        return front.with_out(emu.block_scaled_mm(
            a, b, scale_a[0], scale_b[0], block=block, swizzled=layouts,
            global_a=scale_a[1] if two_level else None, global_b=scale_b[1] if two_level else None, bias=bias,
            out_dtype=out_dtype), out)
    plain = (len(scale_a) == 1 and len(scale_b) == 1 and len(recipe_a) == 1 and len(recipe_b) == 1
             and recipe_a[0] in scaled.PLAIN_RECIPES and recipe_b[0] in scaled.PLAIN_RECIPES and not any(swizzle_a)
             and not any(swizzle_b) and not list(contraction_dim))
    if not plain:
        emu.record("_scaled_mm_v2", (a, b), Route("-", None, "scaling recipe not modelled (block scales, "
                                                             "swizzles or contraction_dim): native torch"))
        return func(a, b, scale_a, recipe_a, swizzle_a, scale_b, recipe_b, swizzle_b, bias, out_dtype,
                    contraction_dim, use_fast_accum, **({} if out is None else {"out": out}))
    return front.with_out(emu.scaled_mm(a, b, scale_a[0], scale_b[0], bias, None, out_dtype, use_fast_accum), out)


def _h_sdpa(emu: Emulation, func: Any, q: Any, k: Any, v: Any, attn_mask: Any = None, dropout_p: float = 0.0,
            is_causal: bool = False, scale: float | None = None, enable_gqa: bool = False) -> Any:
    """torch's documented reference of scaled_dot_product_attention, its two matmuls emulated."""
    if emu.route(q.dtype).model is None:
        emu.record("scaled_dot_product_attention", (q, k, v), emu.route(q.dtype))
        return func(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                    enable_gqa=enable_gqa)
    L, S = q.size(-2), k.size(-2)
    factor = 1 / math.sqrt(q.size(-1)) if scale is None else scale
    bias = torch.zeros(L, S, dtype=q.dtype, device=q.device)
    if is_causal:
        if attn_mask is not None:
            raise ValueError("scaled_dot_product_attention: pass attn_mask or is_causal=True, not both")
        attn_mask = torch.ones(L, S, dtype=torch.bool, device=q.device).tril(diagonal=0)
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            bias = bias.masked_fill(attn_mask.logical_not(), float("-inf"))
        else:
            bias = attn_mask + bias
    if enable_gqa:
        k = k.repeat_interleave(q.size(-3) // k.size(-3), -3)
        v = v.repeat_interleave(q.size(-3) // v.size(-3), -3)
    scores = front.matmul(emu, "sdpa q@k^T", q, k.transpose(-2, -1)) * factor
    weights = torch.softmax(scores + bias, dim=-1)
    if dropout_p > 0.0:
        weights = torch.dropout(weights, dropout_p, train=True)
    return front.matmul(emu, "sdpa attn@v", weights, v)


def _h_not_routed(emu: Emulation, func: Any, *args: Any, **kwargs: Any) -> Any:
    """A matmul-like op blockfma does not route: native torch, logged."""
    emu.record(getattr(func, "__name__", str(func)), args,
               Route("-", None, "a matmul-like op blockfma does not route: native torch"))
    return func(*args, **kwargs)


_NOT_EMULATED = {torch.einsum, torch.mv, torch.Tensor.mv, torch.dot, torch.Tensor.dot, torch.addmv, torch.addbmm,
                 torch.tensordot, torch.inner, torch.outer, torch.chain_matmul, F.conv1d, F.conv2d, F.conv3d,
                 F.bilinear} | {getattr(torch, n) for n in ("_scaled_grouped_mm", "_scaled_grouped_mm_v2")
                                if hasattr(torch, n)}
_HANDLERS: dict[Any, Any] = {
    **dict.fromkeys(_NOT_EMULATED, _h_not_routed),
    F.scaled_dot_product_attention: _h_sdpa, torch._scaled_mm: _h_scaled_mm,
    **({torch._scaled_mm_v2: _h_scaled_mm_v2} if hasattr(torch, "_scaled_mm_v2") else {}),  # F.scaled_mm
}


emulate = Emulation  # bf.torch.emulate(...): the class itself
