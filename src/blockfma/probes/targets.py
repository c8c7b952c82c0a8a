"""Probe targets: one protocol, "compute d = a·b + c for a batch of (a, b, c) with this instruction's k".

A :class:`Target` takes ``a``, ``b`` of shape (n, k) and ``c`` of shape (n,), float64 values exactly
representable in its A, B and C formats, and returns d (n,) in the D format's numpy dtype, so results
compare bit for bit.  The specs :func:`target` takes (``"sim:H100"`` or a Model, a callable ``f(a, b, c)``
with ``k=``, ``"cuda:..."``, ``"torch:..."``) are in docs/probes.md, "Targets"; a call to a real GPU is a
kernel launch, so the probes batch every round's rows into one call.

The protocol underneath, :class:`BlackBox`, is shared by every black box blockfma calls: these dot-product
targets, the order prober's :class:`~blockfma.probes.order.SumTarget` and the multiword hardware units
(:class:`~blockfma.multiword.hardware.TorchUnit`, :class:`~blockfma.multiword.hardware.Int8Unit`).

* **Called** on numpy arrays, returning numpy arrays; the operands are its kind's: ``t(a, b, c) -> d``
  (dot products of k products: :class:`Target`), ``t(X) -> y`` (sums of k summands: ``SumTarget``),
  ``unit.gemm(A, B, C) -> D`` and ``unit(A, B)`` (whole products of any K: ``k`` is None).  Bad operands
  raise ValueError; a black box that fails or misbehaves raises its kind's error (TargetError, OrderError,
  RuntimeError) naming it.
* **What it is**: ``name`` (in errors and records), ``formats`` (A, B, C and D: :class:`~.inputs.Formats`;
  None for integer units), ``k`` and :meth:`~BlackBox.describe_formats`.
* **What it did**: ``calls``, ``rows`` and ``seconds`` (time in the computation itself), counted by
  :meth:`~BlackBox.counting` around each successful call.
* **Where it ran**: :meth:`~BlackBox.metadata`, the target, k, formats, date, versions and host, with the
  device's metadata (:mod:`.runtime`: :func:`~.runtime.gpu_metadata`, :func:`~.runtime.device_info`).

    >>> t = target("sim:A100", "fp16", "fp32")
    >>> t.k, t.formats.input_name
    (16, 'fp16')
"""

from __future__ import annotations

import contextlib
import datetime
import os
import platform
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from .. import formats as _formats
from ..arguments import ArgumentError, flag, integer, keywords
from ..devices import Device, device as _device
from ..engine import dot
from ..formats import Format, bits
from ..model import Model
from ..version import __version__
from ..inputs import Formats
from .runtime import TORCH_DTYPES, gpu_metadata, import_torch

__all__ = ["BlackBox", "Target", "TargetError", "SimTarget", "CallableTarget", "CudaTarget", "TorchTarget", "target",
           "bits", "sim_jobs", "gpu_metadata", "MAX_K", "holds", "OPTIONS", "kind_of", "check_options", "check_k",
           "probe_bytes"]

class TargetError(RuntimeError):
    """A target cannot be reached or misbehaves (the message says what is missing and how to get it)."""


class BlackBox:
    """The protocol of every black box blockfma calls (see the module docstring): subclasses set ``name``,
    ``formats`` and ``k``, and wrap each call's computation in :meth:`counting`."""

    name: str = "target"
    formats: Formats | None
    k: int | None
    calls: int
    rows: int
    seconds: float

    def __init__(self) -> None:
        self.reset_counts()

    def reset_counts(self) -> None:
        """Set ``calls``, ``rows`` and ``seconds`` to zero."""
        # object.__setattr__: frozen dataclasses (the order prober's SumTarget) count as well
        object.__setattr__(self, "calls", 0)
        object.__setattr__(self, "rows", 0)
        object.__setattr__(self, "seconds", 0.0)

    @contextlib.contextmanager
    def counting(self, rows: int) -> Iterator[None]:
        """Time the block and count it as one call of ``rows`` rows when it ends without an exception."""
        t0 = time.perf_counter()
        yield
        object.__setattr__(self, "seconds", self.seconds + (time.perf_counter() - t0))
        object.__setattr__(self, "calls", self.calls + 1)
        object.__setattr__(self, "rows", self.rows + rows)

    def metadata(self) -> dict[str, Any]:
        """What the black box is and where it ran (for the device record); subclasses add their device."""
        return {"target": self.name, "k": self.k, "formats": self.describe_formats(),
                "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "blockfma": __version__, "host": platform.node(), "numpy": np.__version__}

    def describe_formats(self) -> str:
        """The formats in words: ``"fp16 -> fp32 (C in fp32)"``."""
        f = self.formats
        if f is None:
            return "-"
        return f"{f.input_name} -> {f.d.name} (C in {f.c.name})"

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} k={self.k} {self.describe_formats()}>"


class Target(BlackBox):
    """A dot-product target, ``t(a, b, c) -> d`` over rows of k products: subclasses set ``name``,
    ``formats``, ``k`` and implement :meth:`_compute`."""

    formats: Formats
    k: int

    def _compute(self, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def __call__(self, a: Any, b: Any, c: Any) -> np.ndarray:
        a = np.asarray(a, dtype=np.float64)
        b = np.asarray(b, dtype=np.float64)
        c = np.asarray(c, dtype=np.float64)
        n = c.shape[0] if c.ndim == 1 else -1
        if a.shape != (n, self.k) or b.shape != (n, self.k):
            raise ValueError(f"{self.name}: a and b must have shape (n, {self.k}) and c shape (n,); got "
                             f"{a.shape}, {b.shape} and {c.shape}")
        with self.counting(n):
            d = self._compute(a, b, c) if n else np.zeros(0, self.formats.d.dtype)
        return d

    @property
    def chaining(self) -> str | None:
        """How :meth:`chain` runs rows longer than k: ``"calls"`` (one call per k products, each call's D the
        next call's C, as a GEMM chains the instruction in registers), ``"k"`` (one call at the longer k) or
        None where the target cannot chain (C narrower than D, or a target whose one call is a whole GEMM)."""
        return "calls" if holds(self.formats.c, self.formats.d) else None

    def chain_rows(self, a: Any, b: Any, c: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """a, b, c of a chain as float64 arrays, checked: a and b of shape (n, s*k) with s >= 1, c of (n,)."""
        a = np.asarray(a, dtype=np.float64)
        b = np.asarray(b, dtype=np.float64)
        c = np.asarray(c, dtype=np.float64)
        n, kk = a.shape if a.ndim == 2 else (-1, -1)
        if kk < self.k or kk % self.k or b.shape != a.shape or c.shape != (n,):
            raise ValueError(f"{self.name}: a chain takes a and b of shape (n, s*{self.k}) and c of shape (n,); "
                             f"got {a.shape}, {b.shape} and {c.shape}")
        return a, b, c

    def chain(self, a: Any, b: Any, c: Any) -> np.ndarray:
        """d for rows of ``s * k`` products (``s`` >= 1): the instruction chained over them, its output in the
        D format after each k products becoming the C of the next (see :attr:`chaining`)."""
        a, b, c = self.chain_rows(a, b, c)
        kk = a.shape[1]
        if self.chaining != "calls":
            raise TargetError(f"{self.name} cannot chain its calls: " + (
                f"its C format ({self.formats.c.name}) does not hold every {self.formats.d.name} output"
                if not holds(self.formats.c, self.formats.d) else "one call is a whole GEMM over k"))
        d = np.zeros(0, self.formats.d.dtype)
        for s in range(0, kk, self.k):
            d = self(a[:, s:s + self.k], b[:, s:s + self.k], c)
            with np.errstate(all="ignore"):
                c = np.asarray(d, dtype=np.float64)
        return d


def holds(c: _formats.Format, d: _formats.Format) -> bool:
    """Whether every value of format ``d`` is a value of format ``c`` (D fed back as C loses nothing)."""
    if c == d:
        return True
    return (c.nan == "ieee" and c.precision >= d.precision and c.emax >= d.emax and c.emin <= d.emin
            and c.emin - c.precision <= d.emin - d.precision)


class SimTarget(Target):
    """The engine running one Model."""

    def __init__(self, model: Model, k: int, name: str | None = None, c_format: Any = None):
        super().__init__()
        self.model = model
        self.k = int(k)
        self.name = name or f"sim:{model.name or model.family.value}"
        self.formats = Formats.of(model.input_format, model.b_format, c_format or model.c_format, model.output_format)

    def _compute(self, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        return dot(a, b, c, model=self.model, c_format=self.formats.c)

    @property
    def chaining(self) -> str | None:
        """``"k"``: the engine runs the Model's own plan at any k (C after the instruction's last block where
        the Model says so, e.g. a GEMM library's epilogue)."""
        return "k"

    def chain(self, a: Any, b: Any, c: Any) -> np.ndarray:
        """The Model at the rows' own length (a multiple of k), one counted call."""
        a, b, c = self.chain_rows(a, b, c)
        with self.counting(len(c)):
            return self._compute(a, b, c)

    def metadata(self) -> dict[str, Any]:
        return {**super().metadata(), "model": self.model.to_dict()}


def call_user(call: str, f: Callable[..., Any], operands: tuple[np.ndarray, ...], shape: tuple[int, ...],
              fmt: Format, floats_only: bool = False) -> np.ndarray:
    """``f`` on copies of ``operands``, its result checked for ``shape`` and converted to ``fmt``'s dtype
    (``floats_only``: a dtype other than a float is refused); TargetError naming ``call`` where it fails."""
    try:
        d = np.asarray(f(*(x.copy() for x in operands)))
    except Exception as exc:  # the user's code: say which call broke, keep the cause attached
        raise TargetError(f"{call} raised {type(exc).__name__}: {exc}") from exc
    if d.shape != shape:
        raise TargetError(f"{call} returned shape {d.shape}; it must return one value per row, shape {shape}")
    if d.dtype == fmt.dtype:
        return d
    if floats_only and d.dtype.kind != "f" and d.dtype.kind != "V":
        raise TargetError(f"{call} returned dtype {d.dtype}; return floats in {fmt.name} ({fmt.dtype})")
    try:
        return _formats.to_numpy(fmt, d.astype(np.float64))
    except ValueError as exc:
        raise TargetError(f"{call} returned a value that is not a {fmt.name} number: {exc}") from None


class CallableTarget(Target):
    """Any Python callable ``f(a, b, c) -> d``; its first call is repeated to check it is deterministic."""

    def __init__(self, f: Callable[..., Any], k: int, formats: Formats, name: str | None = None):
        super().__init__()
        self.f = f
        self.k = int(k)
        self.formats = formats
        self.name = name or f"callable:{getattr(f, '__qualname__', type(f).__name__)}"
        self._long: bool | None = None  # whether f takes rows longer than k (None: not tried yet)

    def _once(self, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        call = f"call {self.calls + 1} of {self.name} (a, b of shape {a.shape})"
        return call_user(call, self.f, (a, b, c), c.shape, self.formats.d, floats_only=True)

    @property
    def chaining(self) -> str | None:
        """``"k"`` where the callable takes rows longer than its k (tried once, on the first :meth:`chain`, with
        a row of zeros; until then assumed), else ``"calls"`` where its C format holds D, else None."""
        if self._long is not False:
            return "k"
        return "calls" if holds(self.formats.c, self.formats.d) else None

    def chain(self, a: Any, b: Any, c: Any) -> np.ndarray:
        """The callable on the longer rows themselves where it takes them (a simulator of any k: its own chain),
        else one call per k products, each output the next call's C."""
        a, b, c = self.chain_rows(a, b, c)
        if self._long is None:  # does it take a longer row?  One row of zeros, not counted
            try:
                self._once(np.zeros((1, a.shape[1])), np.zeros((1, a.shape[1])), np.zeros(1))
                self._long = True
            except TargetError:
                self._long = False  # an instruction of fixed k: chained through C
        if not self._long:
            return super().chain(a, b, c)
        with self.counting(len(c)):
            return self._once(a, b, c)

    def _compute(self, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        d = self._once(a, b, c)
        if self.calls == 0:
            again = self._once(a, b, c)
            diff = np.nonzero(bits(d) != bits(again))[0]
            if len(diff):
                i = int(diff[0])
                raise TargetError(f"{self.name} is not deterministic: row {i} gave {d[i]!r} and then {again[i]!r} "
                                  "for the same inputs; a probe needs the same bits every time")
        return d


def diagonal_tiles(a: np.ndarray, b: np.ndarray, c: np.ndarray, m: int, k: int, n: int) -> tuple[np.ndarray, ...]:
    """Rows ``a``, ``b`` (rows x k) and ``c`` as tiles A (T, m, k), B (T, k, n) and C (T, m, n), one dot product on each
    diagonal element of a tile and the rest zero, and ``t``, ``i``: row j's result is ``D[t[j], i[j], i[j]]``."""
    r = min(m, n)  # dot products per tile: the diagonal of D
    T = -(-len(c) // r)
    t, i = np.divmod(np.arange(len(c)), r)
    A, B, C = np.zeros((T, m, k)), np.zeros((T, k, n)), np.zeros((T, m, n))
    A[t, i, :], B[t, :, i], C[t, i, i] = a, b, c
    return A, B, C, t, i


class CudaTarget(Target):
    """One ``mma.sync`` or ``wgmma`` instruction on this GPU, through :mod:`blockfma.probes.cuda` (CuPy;
    NVRTC, and nvcc for wgmma's sm_90a)."""

    CHUNK = 1 << 18

    def __init__(self, instruction: str):
        super().__init__()
        from . import cuda

        self._cuda = cuda
        self.path = cuda.path(instruction)
        p = self.path
        self.k = p.k
        self.name = f"cuda:{p.name}"
        self.formats = Formats.of(p.a_format, p.b_format, p.c_format, p.d_format)
        if not cuda.available():
            raise TargetError("target 'cuda' needs an NVIDIA GPU and CuPy: pip install 'blockfma[cuda]' "
                              "(cupy-cuda12x or cupy-cuda13x), and a working driver")
        cc = cuda.compute_capability()
        if not p.runs_on(cc):
            need = "9.0 exactly (sm_90a)" if p.name.startswith("wgmma") else f"{p.sm / 10:.1f} or later"
            raise TargetError(f"{p.name} needs compute capability {need}; this GPU has {cc / 10:.1f}")

    def _compute(self, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        p = self.path
        out = []
        for s in range(0, len(c), self.CHUNK):
            A, B, C, t, i = diagonal_tiles(a[s:s + self.CHUNK], b[s:s + self.CHUNK], c[s:s + self.CHUNK], p.m, p.k, p.n)
            out.append(self._cuda.run(p, A, B, C)[t, i, i])
        return np.concatenate(out)

    def metadata(self) -> dict[str, Any]:
        return {**super().metadata(), "instruction": self.path.ptx, "sass": self.sass_ops(), **gpu_metadata()}

    def sass_ops(self) -> list[str] | str:
        """The matrix and conversion instructions in the compiled kernel's SASS (HMMA, DMMA, HGMMA, QMMA,
        F2FP...), as Fasi et al. and FTTN checked theirs: whether the PTX instruction runs on the tensor
        cores (on Ampere ``mma.m8n8k4`` becomes FFMAs).  A string saying why where nvcc or cuobjdump fail."""
        import re

        try:
            text = self._cuda.sass(self.path)
        except Exception as exc:  # noqa: BLE001 - metadata: say why it is missing
            return f"not read: {type(exc).__name__}: {exc}"[:200]
        return sorted(set(re.findall(r"\b((?:[HDIQ]MMA|HGMMA|QGMMA|F2FP|FFMA|DFMA)(?:\.[\w]+)*)", text)))


class TorchTarget(Target):
    """``torch.baddbmm`` (cuBLAS on a GPU) on batches of 16 x k x 16 GEMMs, one dot product per diagonal
    element; D in the inputs' dtype (fp16, bf16 or fp32), as ``torch.matmul`` gives it, or fp32 from fp16
    or bf16 inputs (``out_dtype=torch.float32``: cuBLAS writing its fp32 accumulator, CUDA and torch 2.8 or
    later), the path of ``blockfma.multiword``'s ``backend="torch"``.  The matmul switches (TF32, reduced-
    precision reductions; fp16 accumulation off) are set for each call (:mod:`blockfma.torch_switches`)."""

    TILE = 16
    DTYPES = TORCH_DTYPES

    def __init__(self, input_format: str, k: int, device: str = "cuda", allow_tf32: bool = False,
                 reduced_precision_reduction: bool = False, output_format: Any = None):
        super().__init__()
        fmt = _formats.get(input_format)
        out = fmt if output_format is None else _formats.get(output_format)
        if out != fmt and not (out.name == "fp32" and fmt.name in ("fp16", "bf16")):
            raise ValueError(f"target 'torch' returns D in the input format ({fmt.name}), or fp32 from fp16 or bf16 "
                             f"inputs; ask for output_format={fmt.name!r}, not {out.name!r}")
        try:
            torch = import_torch("target 'torch'")
        except ImportError as exc:
            raise TargetError(str(exc)) from None
        if fmt.name not in self.DTYPES:
            raise TargetError(f"target 'torch' takes fp16, bf16 or fp32 inputs, not {fmt.name}")
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise TargetError("target 'torch:cuda' needs a GPU that torch sees (torch.cuda.is_available() is False); "
                              "use 'torch:cpu' for the CPU path")
        self.out_dtype = None
        if out != fmt:
            if not device.startswith("cuda"):
                raise TargetError(f"target 'torch' with {fmt.name} inputs and fp32 output needs CUDA: torch's CPU "
                                  "kernels have no out_dtype path; use 'torch:cuda' on a GPU")
            if "dtype" not in torch.ops.aten.baddbmm.overloads():
                raise TargetError(f"{fmt.name} inputs with fp32 output need torch.baddbmm(..., out_dtype=...), new in "
                                  f"torch 2.8; this is torch {torch.__version__}: pip install -U 'torch>=2.8'")
            self.out_dtype = torch.float32
        self.torch = torch
        self.device = device
        self.k = int(k)
        self.allow_tf32 = allow_tf32
        self.reduced = reduced_precision_reduction
        self.dtype = getattr(torch, self.DTYPES[fmt.name])
        self.formats = Formats.of(fmt, fmt, out, out)
        flags = (",tf32" if allow_tf32 else "") + (",reduced" if reduced_precision_reduction else "") + \
            (",fp32-out" if out != fmt else "")
        self.name = f"torch:{device}{flags}"

    def _compute(self, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        torch = self.torch
        A, B, C, t, i = diagonal_tiles(a, b, c, self.TILE, self.k, self.TILE)
        from ..torch_switches import matmul_switches

        with matmul_switches(torch, tf32=self.allow_tf32, reduced=self.reduced, fp16_accumulation=False):
            as_t = lambda x, dt=self.dtype: torch.from_numpy(x).to(self.device).to(dt)  # noqa: E731 - exact casts
            if self.out_dtype is None:
                D = torch.baddbmm(as_t(C), as_t(A), as_t(B))
            else:  # C in fp32: cuBLAS with an fp32 C and D
                D = torch.baddbmm(as_t(C, torch.float32), as_t(A), as_t(B), out_dtype=self.out_dtype)
        d = D[torch.from_numpy(t).to(self.device), torch.from_numpy(i).to(self.device),
              torch.from_numpy(i).to(self.device)]
        return _formats.to_numpy(self.formats.d, d.float().cpu().numpy().astype(np.float64), check=False)

    @property
    def chaining(self) -> str | None:
        """None: one call is a whole cuBLAS GEMM over k, whose Model (``c_entry="end"``) adds C once after the
        sum, so GEMMs chained through C are not the Model at a longer k; and a longer K may change cuBLAS's
        kernel (split-K on skinny shapes)."""
        return None

    def metadata(self) -> dict[str, Any]:
        torch = self.torch
        call = "torch.baddbmm, 16 x k x 16 tiles" + (", out_dtype=torch.float32" if self.out_dtype else "")
        meta = {**super().metadata(), "torch": torch.__version__, "call": call,
                "allow_tf32": self.allow_tf32, "reduced_precision_reduction": self.reduced}
        if self.device.startswith("cuda"):
            meta.update(gpu_metadata())
        return meta


def _device_k(dev: Device, model: Model, instruction: str | None) -> int | None:
    try:
        ins = dev.instruction_for(model.input_name, model.output_format.name) if instruction is None else next(
            i for i in dev.instructions if i.name == instruction)
    except (ValueError, StopIteration):
        return None
    ks = dict(ins.k or {})
    return ks.get(model.input_name) or ks.get(model.input_format.name)


def sim_jobs(devices: Any = None, scaled: bool | None = None) -> list[tuple[str, Any, str, Model]]:
    """(target spec, input format, output format, preset Model) for every instruction and format pair of the given
    presets (default: every hardware preset but the variants).  Pairs that read wider registers (tf32 from binary32,
    ``input_rounding``) are left out: a probe sends values of the input format. Mixed inputs come as (A's format, B's
    format).  ``scaled``: None keeps every model, False leaves the block-scaled ones out (they take scales:
    :func:`blockfma.probes.scaled.probe_scaled` probes them), True keeps only those."""
    from ..devices import devices as _devices

    devs = [d for d in _devices() if d.vendor != "reference" and not d.variant_of] if devices is None else \
        [_device(d) for d in devices]
    jobs = []
    for dev in devs:
        for ins in dev.instructions:
            for (inp, out), m in ins.models.items():
                if m.input_rounding is None and (scaled is None or scaled == m.block_scaled):
                    fa, fb = _formats.pair(inp)
                    jobs.append((f"sim:{dev.name}:{ins.name}", inp if fa == fb else (fa.name, fb.name), out, m))
    return jobs


def default_k(model: Model) -> int:
    """A k that shows a Model's chaining: its instruction's k, else twice its block width (at least 8)."""
    if model.instruction_k:
        return model.instruction_k
    L = model.block_width or 8
    return max(2 * L, 8)


MAX_K = 1024
"""The most products a row that a probe takes.  Its feature tests grow as k squared (the order test alone
sends about 3k rows of k products and keeps their hex forms): at k = 1024 a probe of ``sim:V100`` takes about
3.5 minutes and 1.5 GB with ``verify=1000``; beyond that minutes become hours and the memory grows past a
workstation's (k = 10**8 would need petabytes).  An instruction's k is 4 to 64; the summation order of a long
reduction is what :mod:`blockfma.probes.order` measures."""

#: the keyword options each kind of target takes (every other keyword is refused)
OPTIONS: dict[str, tuple[str, ...]] = {"sim": (), "model": (), "callable": (), "target": (), "cuda": (),
                                       "torch": ("allow_tf32", "reduced_precision_reduction")}

TARGET_FIX = ("use 'sim:DEVICE[:INSTRUCTION]' (blockfma devices lists them), a devices file 'FILE.json', "
              "'cuda[:PATH]', 'torch[:cpu|:cuda[:N]]', a Model or a callable f(a, b, c) -> d")


class _Default(str):
    """A default format name: a str that :func:`target` can tell from the same name passed on purpose
    (a Model or a Target brings its own formats; a format passed with one must match them)."""


FP16: str = _Default("fp16")
FP32: str = _Default("fp32")


def kind_of(spec: Any) -> str:
    """The kind of target ``spec`` names: "target", "model", "callable", "sim" (a preset or a devices file),
    "cuda" or "torch"; an :class:`~blockfma.arguments.ArgumentError` naming the spec otherwise."""
    if isinstance(spec, Target):
        return "target"
    if isinstance(spec, Model):
        return "model"
    if callable(spec):
        return "callable"
    if isinstance(spec, os.PathLike):
        return "sim"
    if not isinstance(spec, str):
        raise ArgumentError("target", spec, f"is not a probe target (a {type(spec).__name__})", fix=TARGET_FIX)
    kind = spec.partition(":")[0].strip().lower()
    if kind in ("sim", "cuda", "torch"):
        return kind
    if spec.strip().lower().endswith(".json"):
        return "sim"
    raise ArgumentError("target", spec, "names no probe target", fix=TARGET_FIX)


def check_options(kind: str, options: dict[str, Any], function: str = "target",
                  also: tuple[str, ...] = ()) -> dict[str, Any]:
    """The options a ``kind`` of target takes, checked (each is True or False); a keyword it does not take is refused,
    naming the kinds that take it or the closest keyword of ``function`` (``also``: its own keywords, for the hint)."""
    own = OPTIONS[kind]
    for key, value in options.items():
        if key in own:
            continue
        takers = [k for k, names in OPTIONS.items() if key in names]
        if takers:
            raise ArgumentError(key, value, f"is an option of {' and '.join(repr(t) for t in takers)} targets only, "
                                f"and this target is a {kind!r} one", fix=f"drop {key}=")
        keywords(function, {key: value}, (*also, *own))
    return {key: flag(key, value) for key, value in options.items()}


def check_k(k: Any) -> int | None:
    """``k`` as an int from 1 to :data:`MAX_K` (None passes: the target's own k), refused with the size a
    larger one would take."""
    if k is None:
        return None
    k = integer("k", k, least=1)
    if k > MAX_K:
        gib = probe_bytes(k) / 2**30
        raise ArgumentError("k", k, f"must be at most {MAX_K} products a row (a probe's rows grow as k squared: this "
                            f"k would need about {gib:.3g} GiB, and hours)",
                            fix="an instruction's k is 4 to 64; the order of a long sum is blockfma.probes.order's job")
    return k


def probe_bytes(k: int, verify: int = 10_000, rounds: int = 2) -> float:
    """An estimate of a probe's working set in bytes (see :data:`MAX_K`): the order test's rows of k products
    with their hex forms, about 200 bytes a product, and the rows of separation and verification (float64 a,
    b, the rows a verification draws to find adversarial ones), about 64 bytes a product, with the chained
    rows of three times k (up to 4 million products a check, more where a fifth of ``verify`` is more)."""
    pairs = k * (k - 1) // 2
    order_rows = pairs if pairs <= 600 else 3 * k
    chained = max(4_000_000, 3 * k * min(verify // 5, 100_000))
    return 200.0 * k * order_rows + 64.0 * k * (24_000 + (rounds + 1) * verify) + 64.0 * chained


def _format(name: str, value: Any, pair: bool = False) -> Any:
    """A format argument read (the pair of A's and B's for ``pair``), or an ArgumentError naming it."""
    try:
        return _formats.pair(value) if pair else _formats.get(value)
    except (ValueError, TypeError) as exc:
        raise ArgumentError(name, value, str(exc).split(" (known")[0], fix=f"formats: {', '.join(_formats.names())}"
                            ) from None


def _own_formats(kind: str, formats: Formats, input_format: Any, output_format: Any) -> None:
    """A Model or a Target computes in its own formats: a format passed on purpose must be the same."""
    if not isinstance(input_format, _Default) and _format("input_format", input_format, True) != (formats.a, formats.b):
        raise ArgumentError("input_format", input_format,
                            f"differs from the {kind}'s own inputs ({formats.input_name})",
                            fix="leave it out: the target brings its formats")
    if not isinstance(output_format, _Default) and _format("output_format", output_format) != formats.d:
        raise ArgumentError("output_format", output_format, f"differs from the {kind}'s own output ({formats.d.name})",
                            fix="leave it out: the target brings its formats")


def target(spec: Any, input_format: Any = FP16, output_format: Any = FP32, *, k: int | None = None,
           instruction: str | None = None, c_format: Any = None, **options: Any) -> Target:
    """A :class:`Target` from ``spec``: a Target, a Model, ``"sim:DEVICE[:INSTRUCTION]"`` (DEVICE a preset or a
    devices file; a bare ``"FILE.json"`` too), a callable (needs ``k``), ``"cuda[:INSTRUCTION]"`` (an mma.sync or
    wgmma path name, or "mma"/"wgmma": that kind's path for the formats) or ``"torch[:cpu|:cuda[:N]]"``.

    Every argument is checked here (:class:`~blockfma.arguments.ArgumentError` naming it): ``k`` from 1 to
    :data:`MAX_K`; ``instruction`` only for sim and cuda targets; ``c_format`` not for cuda and torch, whose C
    format is fixed; a Model or a Target keeps its own formats and k (one passed must match); ``options``: only
    the keywords of :data:`OPTIONS` for the kind (torch: ``allow_tf32``, ``reduced_precision_reduction``)."""
    kind = kind_of(spec)
    scaled = getattr(spec, "scale_block", None) is not None or \
        (isinstance(spec, Model) and spec.block_scaled)
    if scaled:  # a ScaledTarget (a callable of five arguments) or a block-scaled Model: rows need scales
        raise ArgumentError("target", getattr(spec, "name", None) or spec, "is block-scaled: its rows need scales "
                            "of A and B, which a dot-product target does not pass",
                            fix="probe it with blockfma.probes.scaled.probe_scaled(target)")
    options = check_options(kind, options)
    k = check_k(k)
    if instruction is not None:
        if not isinstance(instruction, str) or not instruction.strip():
            raise ArgumentError("instruction", instruction, "must be an instruction name (a string)",
                                fix="blockfma devices DEVICE lists a preset's instructions")
        if kind not in ("sim", "cuda"):
            raise ArgumentError("instruction", instruction, f"names an instruction of a 'sim:DEVICE' or 'cuda' target; "
                                f"a {kind} target has none", fix="drop instruction=")
    if c_format is not None:
        c_format = _format("c_format", c_format)
        if kind in ("cuda", "torch", "target"):
            raise ArgumentError("c_format", c_format.name, f"cannot be chosen for a {kind} target: its C format is "
                                "fixed", fix="drop c_format=")
    if kind == "target":
        _own_formats("Target", spec.formats, input_format, output_format)
        if k is not None and k != spec.k:
            raise ArgumentError("k", k, f"differs from the Target's own k ({spec.k})", fix="leave it out")
        return spec
    if kind == "model":
        _own_formats("Model", Formats.of(spec.input_format, spec.b_format, spec.output_format, spec.output_format),
                     input_format, output_format)
        return SimTarget(spec, k or default_k(spec), c_format=c_format)
    fa, fb = _format("input_format", input_format, True)
    d = _format("output_format", output_format)
    if kind == "callable":
        if k is None:
            raise ArgumentError("k", None, "is needed for a callable target: the number of products its "
                                "instruction takes (a and b come as arrays of shape (n, k))", fix="pass k=")
        return CallableTarget(spec, k, Formats.of(fa, fb, c_format or d, d))
    spec_text = os.fspath(spec) if isinstance(spec, os.PathLike) else spec
    head, _, rest = spec_text.partition(":")
    if kind == "sim":
        return _sim_target(spec_text, rest if head.strip().lower() == "sim" else spec_text, (fa, fb), d, k,
                           instruction, c_format)
    if kind == "cuda":
        return _cuda_target(spec_text, rest, instruction, (fa, fb), d, k,
                            isinstance(input_format, _Default) and isinstance(output_format, _Default))
    return _torch_target(spec_text, rest, input_format, (fa, fb), d, k, options)


def _cuda_target(spec_text: str, rest: str, instruction: str | None, pair: tuple[Any, Any], d: Any, k: int | None,
                 defaults: bool) -> Target:
    """The mma.sync or wgmma path ``rest`` (or ``instruction``) names, or the one for the formats ("", "mma", "wgmma");
    a named path's k and formats must match those passed (its formats unless ``defaults``: none passed)."""
    from . import cuda

    fa, fb = pair
    name = rest.strip() or instruction
    if rest.strip() and instruction is not None and instruction != rest.strip():
        raise ArgumentError("instruction", instruction, f"differs from the path {spec_text!r} names",
                            fix="name the path once")
    if not name or name in ("mma", "wgmma"):
        name = _cuda_path(cuda, (fa.name, fb.name), d, k, name or "mma")
    else:
        try:
            p = cuda.path(name)
        except ValueError:
            known = ", ".join([*cuda.PATHS, *cuda.WGMMA_PATHS])
            raise ArgumentError("target", spec_text, f"names no mma.sync or wgmma path {name!r}",
                                fix=f"use 'cuda', 'cuda:mma', 'cuda:wgmma' or one of {known}") from None
        if k is not None and k != p.k:
            raise ArgumentError("k", k, f"differs from the k of {p.name} ({p.k})",
                                fix=f"leave it out, or name a path with k={k}")
        have = (_formats.get(p.a_format), _formats.get(p.b_format), _formats.get(p.d_format))
        if have != (fa, fb, d) and not defaults:
            raise ArgumentError("target", spec_text, f"computes {_formats.pair_name(have[0], have[1])} -> "
                                f"{have[2].name}, not {_formats.pair_name(fa, fb)} -> {d.name}",
                                fix="pass that path's formats, or 'cuda' to pick the path for the formats")
    return CudaTarget(name)


def _torch_target(spec_text: str, rest: str, input_format: Any, pair: tuple[Any, Any], d: Any, k: int | None,
                  options: dict[str, Any]) -> Target:
    """torch.baddbmm on the device ``rest`` names (default cuda), in one input format."""
    fa, fb = pair
    device = rest.strip().lower() or "cuda"
    if not re.fullmatch(r"cpu|cuda(:\d+)?", device):
        raise ArgumentError("target", spec_text, f"names no torch device ({device!r})",
                            fix="use 'torch', 'torch:cpu', 'torch:cuda' or 'torch:cuda:N'")
    if fa != fb:
        raise ArgumentError("input_format", input_format, "must be one format: torch multiplies two tensors of "
                            "one dtype", use={"input_format": "fp16"})
    return TorchTarget(fa.name, k or 64, device, output_format=d, **options)


def _sim_target(spec: str, name: str, pair: tuple[Any, Any], d: Any, k: int | None, instruction: str | None,
                c_format: Any) -> SimTarget:
    """The simulator target of a preset or a devices file (``name``, optionally ``:INSTRUCTION``)."""
    from ..devices import DeviceFileError

    name, ins = name.strip(), None
    if not name.lower().endswith(".json") and ":" in name:
        name, _, ins = name.partition(":")
        name, ins = name.strip(), ins.strip() or None
    if not name:
        raise ArgumentError("target", spec, "needs a device name", use={"target": "sim:H100"},
                            fix="blockfma devices lists the presets")
    if ins is not None and instruction is not None and ins != instruction:
        raise ArgumentError("instruction", instruction, f"differs from the instruction {spec!r} names",
                            fix="name the instruction once")
    ins = ins or instruction
    try:
        dev = _device(name)
    except DeviceFileError as exc:
        raise ArgumentError("target", spec, str(exc), fix="give the path of a devices file (blockfma probe ... "
                            "--record FILE writes one)") from None
    except ValueError as exc:
        raise ArgumentError("target", spec, str(exc), fix="blockfma devices lists the presets") from None
    inp = pair[0].name if pair[0] == pair[1] else (pair[0].name, pair[1].name)
    try:
        model = dev.model(inp, d.name, ins) if ins else dev.model(inp, d.name)
    except ValueError as exc:
        takes_input = any(i == _formats.pair_name(*pair) for i, _ in dev.pairs())
        if ins and not any(i.name == ins for i in dev.instructions):
            raise ArgumentError("instruction", ins, str(exc)) from None
        arg, value = ("output_format", d.name) if takes_input else ("input_format", _formats.pair_name(*pair))
        raise ArgumentError(arg, value, str(exc)) from None
    if model.block_scaled:
        raise ArgumentError("target", spec, f"is block-scaled ({model.summary()}): its rows need scales of A and B, "
                            "which this target does not pass", fix="probe it with blockfma.probes.scaled.probe_scaled"
                            f"({spec!r}, {_formats.pair_name(*pair)!r}, {d.name!r})")
    kk = k or _device_k(dev, model, ins) or default_k(model)
    return SimTarget(model, kk, name=f"sim:{dev.name}" + (f":{ins}" if ins else ""), c_format=c_format)


def _cuda_path(cuda: Any, input_format: Any, output_format: Any, k: int | None, kind: str = "mma") -> str:
    """The name of the ``kind`` ("mma": mma.sync, "wgmma") path for these formats (and k), the longest k
    where several fit."""
    fa, fb = (f.name for f in _formats.pair(input_format))
    d = _formats.get(output_format).name
    paths = cuda.WGMMA_PATHS if kind == "wgmma" else cuda.PATHS
    found = [p for p in paths.values() if (p.a_format, p.b_format, p.d_format) == (fa, fb, d)
             and (k is None or p.k == k)]
    if not found:
        have = sorted({f"{p.a_format}*{p.b_format}->{p.d_format} k={p.k}" for p in paths.values()})
        what = "wgmma" if kind == "wgmma" else "mma.sync"
        raise TargetError(f"no {what} path for {fa}*{fb} -> {d}" + (f" with k={k}" if k else "") +
                          f"; the cuda target has: {', '.join(have)}")
    return max(found, key=lambda p: p.k).name
