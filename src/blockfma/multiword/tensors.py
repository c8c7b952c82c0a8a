"""``multiword.matmul`` on torch tensors: tensors in, a tensor out, every step on the tensors' device.

:func:`blockfma.multiword.matmul` sends torch tensors here (``backend`` None or "hardware"; "hardware:cpu"
or "hardware:cuda[:N]" must name the tensors' device).  The steps are the numpy path's own code run with
``xp = torch`` (:mod:`.arrays`), the unit calls :class:`.hardware.TorchUnit` and :class:`.hardware.Int8Unit`;
nothing goes through the host but Python scalars, except the entries of an overflow, settled on the host
(:func:`.steps.settle`).  So the bits are the numpy path's on the same device, but for Ozaki II's shifts,
which come from a float64 norm summed in torch's order (they can differ only where a row's norm lies within
an ulp of a power of two); where Triton runs the device (:func:`fused_here`), Ozaki I's and II's elementwise
steps are fused into kernels (:mod:`.ozaki_fused`), with the same bits.  The operands and the result:
:func:`check_tensors`, :func:`_differentiable`, docs/multiword.md.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable
from typing import Any

from .. import formats as _formats
from ..arguments import ArgumentError, Shown, available_memory, choice, integer
from . import arrays, hardware, ozaki
from .bounds import ozaki_slices
from ..formats import RoundingMode
from .registry import REGISTRY
from .split import check_rounding
from .steps import WordPlan, check_backend, combine, settle, split_operands

__all__ = ["given", "matmul", "check_tensors", "working_set", "TensorRun", "fused_here"]


def given(A: Any, B: Any) -> bool:
    """Whether A or B is a torch tensor (torch is not imported to find out)."""
    torch = sys.modules.get("torch")
    return torch is not None and (isinstance(A, torch.Tensor) or isinstance(B, torch.Tensor))


def _shown(X: Any) -> Shown:
    return Shown(f"<{X.dtype} tensor of shape {tuple(X.shape)} on {X.device}>")


def check_tensors(A: Any, B: Any, before: Callable[[int, int, int, Any], None] | None = None,
                  finite_values: bool = True) -> tuple[Any, Any]:
    """A and B as contiguous float64 tensors on their (common) device, or an ArgumentError naming the
    argument and the fix: both tensors, one device, one dtype, a real dtype, 2-D, inner dimensions equal,
    finite values (``finite_values=False``: left to the caller, :func:`refuse_nonfinite`, where the product
    is not empty).  ``before(m, k, q, device)`` runs once the shapes are checked, before any conversion
    (the checks of the backend and the memory)."""
    torch = hardware.import_torch(hardware.NEEDS)
    for name, X in (("A", A), ("B", B)):
        if not isinstance(X, torch.Tensor):
            raise ArgumentError(name, Shown(f"<{type(X).__name__}>"), f"is not a torch tensor, and "
                                f"{'B' if name == 'A' else 'A'} is one: pass both as tensors on one device "
                                f"(torch.as_tensor({name}, device={'B' if name == 'A' else 'A'}.device)) or both "
                                "as numpy arrays")
    if A.device != B.device:
        raise ArgumentError("B", _shown(B), f"is on {B.device} and A on {A.device}: the product runs on one "
                            "device", fix=f"move them to one device (B.to({str(A.device)!r}))")
    if A.dtype != B.dtype:
        raise ArgumentError("B", _shown(B), f"has dtype {B.dtype} and A {A.dtype}: pass one dtype (as "
                            "torch.matmul needs)", fix=f"B.to({A.dtype}) (exact where B's values fit it) or "
                            "A.to(B.dtype)")
    for name, X in (("A", A), ("B", B)):
        if X.dtype == torch.bool or X.is_complex():
            what = "a mask, not a matrix of numbers (pass X.double() for 0/1 values)" if X.dtype == torch.bool \
                else "multiword products take real matrices (pass X.real if that is meant)"
            raise ArgumentError(name, _shown(X), f"has dtype {X.dtype}: {what}")
        if X.dim() != 2:
            raise ArgumentError(name, _shown(X), f"must be a 2-D matrix; got shape {tuple(X.shape)}",
                                fix=f"{name}.reshape(1, -1) for a row or {name}.reshape(-1, 1) for a column")
    if A.shape[1] != B.shape[0]:
        raise ArgumentError("B", _shown(B), f"inner dimensions differ: A is {tuple(A.shape)}, B is "
                            f"{tuple(B.shape)} (A's columns must equal B's rows)")
    if before is not None:
        before(int(A.shape[0]), int(A.shape[1]), int(B.shape[1]), A.device)
    out = []
    for name, X in (("A", A), ("B", B)):
        X = X.detach()
        if not X.is_floating_point():
            if X.dtype == torch.int64 and X.numel():
                big = X.abs() > 2**53
                if bool(big.any()):
                    i, j = arrays.first(torch, big)
                    raise ArgumentError(name, _shown(X), f"{name}[{i}, {j}] = {int(X[i, j])} has more significant "
                                        "bits than binary64 holds, so it cannot be taken exactly",
                                        fix=f"round it first ({name}.double() rounds to nearest)")
        out.append(X.to(torch.float64).contiguous())  # exact: every float dtype and int below 2**53 fits binary64
    if finite_values or not (A.numel() and B.numel()):
        refuse_nonfinite(torch, *out)
    return out[0], out[1]


def refuse_nonfinite(torch: Any, A: Any, B: Any) -> None:
    """An ArgumentError naming the first non-finite entry of A or B (float64 tensors); where every entry is
    finite, one reduction over each and one synchronisation (:func:`finite`)."""
    if finite(torch, *(X for X in (A, B) if X.numel())):
        return
    for name, X in (("A", A), ("B", B)):
        bad = ~torch.isfinite(X)
        if bool(bad.any()):
            i, j = arrays.first(torch, bad)
            raise ArgumentError(name, _shown(X), f"{name}[{i}, {j}] = {float(X[i, j])!r} is not finite "
                                f"({arrays.count(torch, bad)} non-finite entries): multiword products take finite "
                                "matrices (the words and the Ozaki scaling are not defined for NaN and Inf)",
                                fix=f"replace them first (torch.nan_to_num({name})) or use torch.matmul")


def finite(torch: Any, *Xs: Any) -> bool:
    """Whether every entry of the (non-empty) tensors is finite: one reduction over each (NaN propagates
    through ``aminmax``), one synchronisation for all."""
    return not Xs or all(map(math.isfinite, torch.cat([torch.stack(torch.aminmax(X)).double() for X in Xs]).tolist()))


def _device_backend(backend: str | None, backend_name: str, on_hw: bool, device: Any) -> str:
    """The hardware backend naming ``device`` (the tensors'), or an ArgumentError for a simulator backend
    or a hardware backend naming another device."""
    here = f"hardware:{device}"
    if backend is None:
        return here
    if not on_hw:
        raise ArgumentError("backend", backend, "is the simulator's engine, which takes numpy arrays; torch "
                            "tensors run on the real units of their device", use={"backend": "hardware"},
                            fix="or pass numpy arrays (A.cpu().numpy()) to simulate a unit")
    if hardware.hardware_spec(backend_name) and hardware.hardware_device(backend_name) != device:
        raise ArgumentError("backend", backend, f"names {hardware.hardware_device(backend_name)}, and the tensors "
                            f"are on {device}", use={"backend": "hardware"},
                            fix=f"or move the tensors there (A.to({str(hardware.hardware_device(backend_name))!r}))")
    return here


def _check_memory(device: Any, need: float, what: str) -> None:
    """An ArgumentError, before any work, where ``need`` bytes exceed the free memory of ``device``."""
    if device.type == "cuda":
        torch = hardware.import_torch(hardware.NEEDS)
        have = torch.cuda.mem_get_info(device)[0]
    else:
        have = available_memory()
    if have is not None and need > have:
        gib = 2.0**30
        raise ArgumentError("A", Shown(f"<{what}>"), f"needs about {need / gib:.3g} GiB on {device}, and "
                            f"{have / gib:.1f} GiB are free", fix="split the product into blocks of rows of A "
                            "(matmul(A[i:i+r], B, ...)) or of columns of B")


def working_set(name: str, kind: str, m: int, k: int, q: int, words: int) -> float:
    """Bytes the device path holds at its peak, about (A is m x k, B k x q; ``words``: the method's words,
    slices or moduli): the float64 operands, their words (and the unit's copies) or slices, the result and
    its partial sums; for Ozaki II the truncated operands, one modulus' product, the residues and the CRT
    (:class:`.ozaki.CRT`: 24-bit limbs of P times a margin) an eighth of the rows at a time."""
    ab, mq = float(m) * k + float(k) * q, float(m) * q
    if kind == "baseline":
        return 16 * ab + 24 * mq
    if kind == "multiword":
        return (12 * words + 16) * ab + 40 * mq
    if name == "ozaki1":
        return (words + 24) * ab + 48 * mq
    limbs = -(-(8 * words + 8 + 8 + 2 + 5) // 24) + 1  # CRT.n for moduli below 2**8
    # the operands' int64 copies and int8 residues (fused: one int8 slice per modulus); one modulus' product
    # and its residue (int64), the uint8 residues, the result (fused: every modulus' int32 product, at most
    # ozaki_fused.PRODUCT_BYTES); an eighth of the rows at a time: the residues in float64, the limbs' sums and
    # ~30 int64 arrays of the rounding
    return (16 + max(18, words)) * ab + (16 + words + 8 + (8 * words + 16 * limbs + 240) / 8) * mq


class TensorRun:
    """The tensor side of :func:`.steps.combine`: the unit's products on the device (words already in
    the unit's dtype, C chained in as fp32), the outside additions rounded on the device, and with ``keep``
    the overflow count of each step kept on the device, for the warning (read only when something
    overflowed; without it no pass is spent on it: an entry that overflows anywhere stays inf or NaN to the
    end, so the result tells)."""

    def __init__(self, hw: Any, fp32: bool = False, keep: bool = True) -> None:
        self.hw = hw
        self.fp32 = fp32  # the unit's outputs and the fp32 sums stay fp32 tensors (no conversions between calls)
        self.keep = keep
        self.torch = hardware.import_torch(hardware.NEEDS)
        self.calls = 0
        self.counts: list[tuple[str, Any]] = []

    @property
    def name(self) -> str:
        return self.hw.name

    def extra(self) -> dict[str, Any]:
        return {"hardware": self.hw.info(), "unit_seconds": self.hw.seconds}

    def limit(self) -> float:
        """The unit output format's largest value (fp32's; the GPU units do not saturate)."""
        return _formats.get("fp32").max

    def fl(self, fmt: str, x: Any) -> Any:
        """x (float64) rounded to ``fmt`` to nearest even, as float64: fp32 by torch's conversion (IEEE,
        to nearest even, overflow to inf), others by :func:`.arrays.round_to`; a float32 x (a sum of two
        float32 tensors: IEEE, once rounded, the same as the float64 sum rounded to fp32, since 53 >= 2 * 24 +
        2 makes that double rounding innocuous) as it is."""
        if x.dtype == self.torch.float32:
            return x
        if fmt == "fp32":
            return x.to(self.torch.float32).to(self.torch.float64)
        return arrays.round_to(self.torch, fmt, x)

    def zeros(self, shape: tuple[int, int]) -> Any:
        return self.torch.zeros(shape, dtype=self.torch.float64, device=self.hw.device)

    def gemm(self, a: Any, b: Any, c: Any, label: str = "") -> Any:
        """One product on the unit, C (values of fp32, or None) chained in; float64 out, or with ``fp32`` the
        unit's fp32 tensor itself."""
        self.calls += 1
        f32 = self.torch.float32
        out = self.hw.product(a, b, None if c is None else c if c.dtype == f32 else c.to(f32))
        if not self.fp32:
            out = out.to(self.torch.float64)
        self.note(out, label)
        return out

    def note(self, X: Any, label: str, unit: bool = True) -> None:
        if not self.keep:
            return
        self.counts.append((label, self.torch.count_nonzero(~self.torch.isfinite(X))))

    def where(self) -> dict[str, int]:
        """Entries each step overflowed (the labels in order; read from the device)."""
        out: dict[str, int] = {}
        for label, n in self.counts:
            if int(n.item()):
                out[label] = out.get(label, 0) + int(n.item())
        return out


def _settled(C: Any, A: Any, B: Any, high: str, method: str, where: Callable[[], dict[str, int]], unit: str,
             limit: float) -> Any:
    """C, or where some entry overflowed (rare: |A||B| near the unit's range), :func:`.steps.settle` on the
    host (its entries +-inf or NaN and its OverflowWarning, at the user's call), back on C's device."""
    torch = hardware.import_torch(hardware.NEEDS)
    if finite(torch, C):  # an entry that overflowed anywhere is inf or NaN here
        return C
    host = settle(C.cpu().numpy(), None, A.cpu().numpy(), B.cpu().numpy(), high, method, where(), unit, limit,
                  stacklevel=7)
    return torch.from_numpy(host).to(C.device)


def _parameters(name: str, plan: WordPlan | None, options: dict[str, Any], simulated: dict[str, Any]
                ) -> tuple[str, int, dict[str, Any]]:
    """(the kind of run for :func:`working_set`, its words, slices or moduli, the Ozaki parameters checked),
    refusing what tensors cannot take: a simulated unit, the TF64 unit, an int8 ``unit=``."""
    for key, value in simulated.items():  # matmul refuses these for hardware backends, not for None
        raise ArgumentError(key, value, "picks a simulated unit, and torch tensors run on the real units of "
                            "their device", fix="leave it out (or pass numpy arrays to simulate a unit)")
    if plan is not None and plan.method.high == "fp64":
        method = plan.method
        raise ArgumentError("method", method.name, f"{method.name} needs a unit with exact fp32 x fp32 products "
                            "accumulated in fp64, which no GPU has: it runs on the simulator, with numpy arrays",
                            fix="pass A.cpu().numpy(), B.cpu().numpy()")
    kind = REGISTRY[name].kind
    if kind in ("ozaki1", "ozaki2") and options.get("unit") is not None:
        raise ArgumentError("unit", options["unit"], "picks an int8 unit for numpy arrays; torch tensors run on "
                            "torch._int_mm on their device", fix="leave it out")
    if kind == "ozaki1":
        options.setdefault("slices", ozaki_slices(53))  # fp64 accuracy by the slice-count rule, as for arrays
        slices = integer("slices", options["slices"], least=1, most=ozaki.MAX_SLICES)
        width = integer("width", options["width"], least=1, most=7, none=True) if "width" in options else None
        return "ozaki", slices, {"slices": slices, "width": width}
    if kind == "ozaki2":
        mods = ozaki.pick_moduli(options.get("moduli"), options.get("n_moduli"))
        scaling = choice("scaling", options.get("scaling", "fast"), ("fast", "accurate"))
        return "ozaki", len(mods), {"moduli": mods, "scaling": scaling}
    return ("baseline", 1, {}) if kind == "native" else ("multiword", plan.method.p, {})


def _native(torch: Any, A: Any, B: Any, name: str, spec: str, plan: Any, params: dict[str, Any], say: Any
            ) -> tuple[Any, dict[str, Any]]:
    hw = hardware.TorchUnit(name, spec)
    dt = torch.float32 if name == "fp32" else torch.float64
    C = hw.product(A.to(dt), B.to(dt)).to(torch.float64)  # float32: rounded to nearest, as for arrays
    info = {"method": name, "unit": hw.name, "calls": 1, "hardware": hw.info(), "unit_seconds": hw.seconds}
    return _settled(C, A, B, name, name, dict, hw.name, _formats.get(name).max), info


def fused_here(device: Any) -> bool:
    """Whether the fused kernels (Ozaki I and II's :mod:`.ozaki_fused`, the words' :mod:`.words_fused`: the same
    bits) run on ``device``: where Triton compiles for a CUDA GPU, or on the CPU under its interpreter
    (``TRITON_INTERPRET=1``: tests), in the mode that the kernels and the engine's helpers they call were
    defined in, if they were (one mode per process)."""
    from ..engine import triton as tr

    kernels = (("blockfma.multiword.ozaki_fused", "crt_kernel"), ("blockfma.engine.triton_kernel", "lead"),
               ("blockfma.multiword.words_fused", "words_kernel"))
    modes = {type(getattr(sys.modules[m], f)).__name__ == "InterpretedFunction" for m, f in kernels if m in sys.modules}
    return device.type == ("cpu" if tr.interpreting() else "cuda") and tr.available() and modes <= {tr.interpreting()}


def _ozaki(torch: Any, A: Any, B: Any, name: str, spec: str, plan: Any, params: dict[str, Any], say: Any
           ) -> tuple[Any, dict[str, Any]]:
    unit = hardware.Int8Unit(spec)
    fused = fused_here(A.device) and (name == "ozaki1" or len(params["moduli"]) <= ozaki.FUSED_MODULI)
    if fused:
        from . import ozaki_fused
    if name == "ozaki1":
        w = ozaki.slice_width(A.shape[1]) if params["width"] is None else params["width"]
        C = (ozaki_fused.ozaki1(torch, A, B, params["slices"], w, unit) if fused else
             ozaki.ozaki1_steps(torch, A, B, params["slices"], w, unit.product))
        detail = f"{params['slices']} slices" + ", fused (Triton)" * fused
    elif fused:
        C = ozaki_fused.ozaki2(torch, A, B, params["moduli"], params["scaling"], unit)
        detail = f"{len(params['moduli'])} moduli, fused (Triton)"
    else:
        C = ozaki.ozaki2_steps(torch, A, B, params["moduli"], params["scaling"], unit.product,
                               block=max(1, A.shape[0] // 8))
        detail = f"{len(params['moduli'])} moduli"
    info = {"method": name, "unit": f"{unit.name}, {detail}", "calls": unit.calls, "hardware": unit.info(),
            "unit_seconds": unit.seconds}
    return _settled(C, A, B, "fp64", name, dict, info["unit"], _formats.get("fp64").max), info


def _words(torch: Any, A: Any, B: Any, name: str, spec: str, plan: WordPlan, params: dict[str, Any], say: Any
           ) -> tuple[Any, dict[str, Any]]:
    method, mode = plan.method, check_rounding("split_rounding", plan.rounding)
    dtype, words = hardware.TorchUnit(method.low, spec).dtype, None
    if method.low in ("tf32", "bf16") and (method.low, mode) in arrays.BINARY32_ROUNDINGS and not method.scale \
            and fused_here(A.device):
        from . import words_fused

        words = words_fused.split(torch, A, B, method.low, method.p, mode == RoundingMode.TiesToEven, dtype)
    if words is None:  # (the kernel serves finite values only: it took the place of this check)
        refuse_nonfinite(torch, A, B)
    Aw, Bw = words or split_operands(A, B, method, mode, xp=torch, stacklevel=6)
    Aw, Bw = [w.to(dtype) for w in Aw], [w.to(dtype) for w in Bw]  # exact: values of the words' format
    (m, k), q = A.shape, B.shape[1]
    for keep in (False, True):  # the overflow bookkeeping only where the result says something overflowed
        run = TensorRun(hardware.TorchUnit(method.low, spec), fp32=not method.scale, keep=keep)  # (scaled: in fp64)
        run.hw.each, start = False, run.hw.mark()  # the calls timed together: two synchronisations, not two a call
        C, info = combine(run, Aw, Bw, method, plan.products, plan.accumulate, plan.summation, plan.block, say,
                          shape=f"{m}x{k} @ {k}x{q}")
        info["unit_seconds"] = run.hw.mark() - start
        info["split"] = "fused (Triton)" if words else "torch"
        if not keep and finite(torch, C):
            return C.to(torch.float64), info
    return _settled(C.to(torch.float64), A, B, method.high, method.name, run.where, run.name, run.limit()), info


_RUNNERS = {"baseline": _native, "ozaki": _ozaki, "multiword": _words}


def matmul(A: Any, B: Any, name: str, backend: str | None, options: dict[str, Any], *, say: Any = None,
           plan: WordPlan | None = None, simulated: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
    """:func:`.methods.matmul` for torch tensors (its arguments already checked there; ``plan``: a word
    method's run; ``simulated``: the device=/model= given): (C, info), C a float64 tensor on A's device."""
    backend_name, on_hw = check_backend(backend)
    kind, words, params = _parameters(name, plan, options, simulated or {})
    where: list[str] = []

    def before(m: int, k: int, q: int, device: Any) -> None:  # the shapes and device known, nothing converted
        where.append(_device_backend(backend, backend_name, on_hw, device))
        _check_memory(device, working_set(name, kind, m, k, q, words), f"{name} on a {m}x{k} @ {k}x{q} product")

    A_, B_ = check_tensors(A, B, before, finite_values=kind != "multiword")  # the word methods' split checks them
    torch = hardware.import_torch(hardware.NEEDS)
    (m, k), q = A_.shape, B_.shape[1]
    if say:
        say(f"{name}: {m}x{k} @ {k}x{q} on {A_.device} ...")
    if m == 0 or q == 0 or k == 0:
        C = torch.zeros((m, q), dtype=torch.float64, device=A_.device)
        info = {"method": name, "unit": f"none ({m}x{k} @ {k}x{q} is empty)", "calls": 0}
    else:
        C, info = _RUNNERS[kind](torch, A_, B_, name, where[0], plan, params, say)
    info["device"] = str(A_.device)
    if torch.is_grad_enabled() and (A.requires_grad or B.requires_grad):
        C = _differentiable(torch).apply(A, B, C)
    return C, info


@functools.cache
def _differentiable(torch: Any) -> Any:
    """An autograd Function: C = A @ B as computed (given), its backward the product's formula by torch in
    float64 (grad_A = G @ B^T, grad_B = A^T @ G, in A's and B's dtypes)."""

    class Product(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, A: Any, B: Any, C: Any) -> Any:
            ctx.save_for_backward(A, B)
            return C.clone()

        @staticmethod
        def backward(ctx: Any, G: Any) -> tuple[Any, Any, None]:
            A, B = ctx.saved_tensors
            ga = (G @ B.double().T).to(A.dtype) if ctx.needs_input_grad[0] else None
            gb = (A.double().T @ G).to(B.dtype) if ctx.needs_input_grad[1] else None
            return ga, gb, None

    return Product
