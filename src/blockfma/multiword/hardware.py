"""Word products on real matrix units through torch: ``matmul(..., backend="hardware")``.

``"hardware"`` is the GPU where torch sees one, else the CPU; ``"hardware:cuda"``, ``"hardware:cuda:N"`` and
``"hardware:cpu"`` pick it.  What each word product computes on CUDA and on the CPU (``out_dtype=``, TF32,
``torch._int_mm``), the switches :func:`matmul_flags` sets for each call, and why the bits need not be the
simulator's: docs/multiword.md, "On a GPU".  With torch tensors in (:mod:`.tensors`) the units take words
already on the device (:meth:`TorchUnit.product`, :meth:`Int8Unit.product`).  The units follow the protocol
of :class:`blockfma.probes.targets.BlackBox`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from .. import formats as _formats
from ..inputs import Formats
from ..arguments import ArgumentError
from ..probes.runtime import TORCH_HINT, device_info, import_torch
from ..probes.targets import BlackBox
from ..torch_switches import matmul_switches
from .ozaki import int_mm, int_mm_shape, torch_unit

__all__ = ["TORCH_HINT", "is_hardware", "hardware_spec", "hardware_device", "import_torch", "device_info",
           "matmul_flags", "TorchUnit", "Int8Unit"]

NEEDS = "backend='hardware'"


# --- the backend names ---------------------------------------------------------------------------------------
def is_hardware(backend: Any) -> bool:
    """Whether ``backend`` names the real units ("hardware", "hardware:cpu", "hardware:cuda[:N]", any case)."""
    return isinstance(backend, str) and backend.strip().lower().partition(":")[0] == "hardware"


def hardware_spec(backend: Any) -> str:
    """The device part of a hardware backend name: "" (the GPU where torch sees one, else the CPU), "cpu",
    "cuda" or "cuda:N"; an ArgumentError for any other spelling."""
    name = backend.strip().lower() if isinstance(backend, str) else None
    if name is not None and is_hardware(name):
        spec = name[len("hardware:"):] if name != "hardware" else ""
        if spec in ("", "cpu", "cuda") or (spec.startswith("cuda:") and spec[5:].isdigit()):
            return spec
    raise ArgumentError("backend", backend, "names no real unit; use 'hardware' (a GPU where torch sees one, "
                        "else the CPU), 'hardware:cuda', 'hardware:cuda:N' or 'hardware:cpu'")


def hardware_device(backend: str = "hardware") -> Any:
    """The torch device a hardware backend names: "hardware" is "cuda" where ``torch.cuda.is_available()``,
    else "cpu".  ArgumentError for a device that is not here, ImportError without torch."""
    spec = hardware_spec(backend)
    torch = import_torch(NEEDS)
    if spec == "":
        spec = "cuda" if torch.cuda.is_available() else "cpu"
    if spec.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ArgumentError("backend", backend, f"needs a CUDA GPU, and torch {torch.__version__} sees none "
                                "(torch.cuda.is_available() is False)", use={"backend": "hardware:cpu"},
                                fix="or use the simulator (backend='auto')")
        index = torch.cuda.current_device() if spec == "cuda" else int(spec[5:])
        if index >= torch.cuda.device_count():
            raise ArgumentError("backend", backend, f"there are {torch.cuda.device_count()} CUDA devices (0 to "
                                f"{torch.cuda.device_count() - 1})", use={"backend": "hardware:cuda:0"})
        return torch.device("cuda", index)
    return torch.device("cpu")

FORMATS = ("fp16", "bf16", "tf32", "fp32", "fp64")
"""Word formats a :class:`TorchUnit` takes (fp32 and fp64: the native baselines)."""


# --- the switches ------------------------------------------------------------------------------------------
@contextlib.contextmanager
def matmul_flags(*, tf32: bool = False) -> Iterator[None]:
    """For the block: TF32 for fp32 matmuls on CUDA iff ``tf32`` (``torch.backends.cuda.matmul.fp32_precision``
    where torch has it, else ``allow_tf32``), IEEE fp32 matmuls in oneDNN (CPU), fp16/bf16 reduced-precision
    reductions and fp16 accumulation off; every switch restored afterwards, also after an exception
    (:func:`blockfma.torch_switches.matmul_switches`)."""
    with matmul_switches(import_torch(NEEDS), tf32=tf32, reduced=False, fp16_accumulation=False):
        yield


# --- the units ---------------------------------------------------------------------------------------------
def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class TorchUnit(BlackBox):
    """A matrix unit of the torch device ``backend`` names, for words of ``fmt`` ("fp16", "bf16", "tf32";
    "fp32"/"fp64" for the native SGEMM/DGEMM baselines); a :class:`~blockfma.probes.targets.BlackBox` of any
    K (``k`` is None).  ``calls`` counts the products, ``rows`` their rows of A, ``seconds`` is the time
    spent in them (synchronised; operands already on the device, transfers excluded)."""

    def __init__(self, fmt: str, backend: str = "hardware") -> None:
        try:
            name = _formats.get(fmt).name if isinstance(fmt, str) and fmt.strip() else fmt
        except ValueError:
            name = fmt
        if name not in FORMATS:
            raise ArgumentError("fmt", fmt, "backend='hardware' runs fp16, bf16 and tf32 words (and the fp32/fp64 "
                                "baselines) only", fix="use the simulator (backend='auto') for other formats")
        super().__init__()
        self.fmt: str = name
        out = "fp64" if name == "fp64" else "fp32"
        self.formats = Formats.of(name, name, out, out)
        self.k = None
        self.device = hardware_device(backend)
        torch = self._torch = import_torch(NEEDS)
        cuda = self.device.type == "cuda"
        if name in ("fp16", "bf16") and cuda:
            if "dtype" not in torch.ops.aten.mm.overloads() or "dtype" not in torch.ops.aten.baddbmm.overloads():
                raise ValueError(f"{name} words with fp32 output on the GPU need torch.mm(..., out_dtype="
                                 f"torch.float32), new in torch 2.8; this is torch {torch.__version__}: "
                                 "pip install -U 'torch>=2.8'")
            self.path = "out_dtype"
            self.dtype = torch.float16 if name == "fp16" else torch.bfloat16
        elif name == "fp64":
            self.path, self.dtype = "fp64", torch.float64
        else:  # tf32 words on CUDA: fp32 tensors read by the TF32 tensor cores; else an fp32 matmul
            self.path, self.dtype = ("tf32" if name == "tf32" and cuda else "fp32"), torch.float32
        self._info: dict[str, Any] | None = None

    @property
    def name(self) -> str:
        """What the unit is, in words: the device and the torch path."""
        where = f"{self.info()['name']} ({self.device})"
        if self.path == "out_dtype":
            return f"{where}: {self.fmt} -> fp32, torch.mm(out_dtype=float32)"
        if self.path == "tf32":
            return f"{where}: tf32 -> fp32, TF32 tensor cores"
        if self.fmt in ("fp16", "bf16", "tf32"):
            return f"{where}: {self.fmt} words by torch's fp32 matmul"
        return f"{where}: torch {'fp32 matmul (no TF32)' if self.fmt == 'fp32' else 'fp64 matmul'}"

    def info(self) -> dict[str, Any]:
        """:func:`device_info` of the unit's device, with the format and the path ("out_dtype", "tf32",
        "fp32", "fp64")."""
        if self._info is None:
            self._info = {**device_info(self.device), "format": self.fmt, "path": self.path}
        return self._info

    def metadata(self) -> dict[str, Any]:
        """The protocol's record (:meth:`BlackBox.metadata`) with :meth:`info`."""
        return {**super().metadata(), **self.info()}

    each = True  # synchronised around each call, to time it (the tensor path times its calls together: mark)

    def _sync(self, per_call: bool = True) -> None:
        if self.device.type == "cuda" and (self.each or not per_call):
            self._torch.cuda.synchronize(self.device)

    def mark(self) -> float:
        """time.perf_counter() once the device's queued work is done (on CUDA: a synchronisation)."""
        self._sync(per_call=False)
        return time.perf_counter()

    def to_device(self, X: Any, *, check: bool = True, what: str = "A") -> Any:
        """X (values of the unit's format) as a tensor of the unit's dtype on its device, exactly;
        ``check=True`` raises a ValueError naming the first value the format does not hold."""
        x = np.asarray(X, dtype=np.float64)
        if x.ndim != 2:
            raise ValueError(f"{what} must be a 2-D matrix; got shape {x.shape}")
        if check:
            ok = _formats.is_representable(self.fmt, x) & np.isfinite(x)
            if not ok.all():
                idx = tuple(int(i) for i in np.argwhere(~ok)[0])
                raise ValueError(f"{what}{_formats.index_text(idx)} = {float(x[idx])!r} is not a finite {self.fmt} "
                                 f"value; round it first with blockfma.formats.round({self.fmt!r}, {what})")
        host = np.ascontiguousarray(x if self.fmt == "fp64" else x.astype(np.float32))  # exact: checked above
        t = self._torch.from_numpy(host).to(self.device)
        return t if t.dtype == self.dtype else t.to(self.dtype)

    def product(self, a: Any, b: Any, c: Any = None) -> Any:
        """a @ b (+ c, beta = 1) on the unit, tensors on its device: fp32 out (fp64 for the fp64 unit)."""
        torch = self._torch
        with matmul_flags(tf32=self.fmt == "tf32"):
            self._sync()
            with self.counting(int(a.shape[0])):
                try:
                    if self.path == "out_dtype":
                        out = (torch.mm(a, b, out_dtype=torch.float32) if c is None else
                               torch.baddbmm(c[None], a[None], b[None], out_dtype=torch.float32)[0])
                    else:
                        out = torch.mm(a, b) if c is None else torch.addmm(c, a, b)
                    self._sync()
                except (RuntimeError, NotImplementedError, TypeError) as exc:
                    raise RuntimeError(f"torch's {self.fmt} matmul on {self.device} failed: "
                                       f"{_first_line(exc)}") from None
        return out

    def gemm(self, A: Any, B: Any, C: Any = None, *, check: bool = True) -> np.ndarray:
        """A @ B (+ C chained into the unit, beta = 1) for float64 arrays of the format's values (C: of fp32,
        fp64 for the fp64 unit); the result as float64.  ``check=False`` skips the exactness checks (for
        words made by :func:`.split.split`)."""
        a, b = self.to_device(A, check=check, what="A"), self.to_device(B, check=check, what="B")
        if a.shape[1] != b.shape[0]:
            raise ValueError(f"inner dimensions differ: A is {tuple(a.shape)}, B is {tuple(b.shape)}")
        c = None
        if C is not None:
            cfmt = "fp64" if self.fmt == "fp64" else "fp32"
            Cx = np.asarray(C, dtype=np.float64)
            if Cx.shape != (a.shape[0], b.shape[1]):
                raise ValueError(f"C has shape {Cx.shape}, but A @ B has shape {(a.shape[0], b.shape[1])}")
            if check and not (_formats.is_representable(cfmt, Cx) & np.isfinite(Cx)).all():
                raise ValueError(f"C must hold finite {cfmt} values (the unit's accumulator); round it first")
            host = np.ascontiguousarray(Cx if cfmt == "fp64" else Cx.astype(np.float32))
            c = self._torch.from_numpy(host).to(self.device)
        return self.product(a, b, c).cpu().numpy().astype(np.float64)


class Int8Unit(BlackBox):
    """:func:`.ozaki.torch_unit` on the torch device ``backend`` names (``torch._int_mm``: int8 tensor cores
    on CUDA), a :class:`~blockfma.probes.targets.BlackBox` of integer operands (``formats`` is None) and any K,
    counting its ``calls``, their ``rows`` of A and ``seconds`` (whole calls: padding and the transfers of
    the int8 operands and the int32 result included)."""

    formats = None
    k = None

    def __init__(self, backend: str = "hardware") -> None:
        super().__init__()
        self.device = hardware_device(backend)
        self._unit = torch_unit(str(self.device))
        self._torch = import_torch(NEEDS)
        self.__name__ = f"torch._int_mm on {self.device}"

    @property
    def name(self) -> str:
        return f"{device_info(self.device)['name']} ({self.device}): int8 -> int32, torch._int_mm"

    def info(self) -> dict[str, Any]:
        """:func:`device_info` of the unit's device, with the format and the path."""
        return {**device_info(self.device), "format": "int8", "path": "_int_mm"}

    def metadata(self) -> dict[str, Any]:
        """The protocol's record (:meth:`BlackBox.metadata`) with :meth:`info`."""
        return {**super().metadata(), **self.info()}

    def describe_formats(self) -> str:
        return "int8 -> int32"

    def product(self, a: Any, b: Any) -> Any:
        """a @ b for int8 tensors on the unit's device, exactly, as an int64 tensor there: zero-padded to
        :func:`.ozaki.int_mm_shape`, one :meth:`int_mm`."""
        (m, k), n = a.shape, b.shape[1]
        mp, kp, np_ = int_mm_shape(m, k, n)
        if (mp, kp) != (m, k):
            a, a_ = a.new_zeros((mp, kp)), a
            a[:m, :k] = a_
        if (kp, np_) != (k, n):
            b, b_ = b.new_zeros((kp, np_)), b
            b[:k, :n] = b_
        return self.int_mm(a, b)[:m, :n].to(self._torch.int64)

    def int_mm(self, a: Any, b: Any, out: Any = None) -> Any:
        """One ``torch._int_mm`` (int8 -> int32, exact) of tensors already padded to :func:`.ozaki.int_mm_shape`
        (into ``out`` if given), counted and timed (synchronised)."""
        torch, cuda = self._torch, self.device.type == "cuda"
        if cuda:
            torch.cuda.synchronize(self.device)
        with self.counting(int(a.shape[0])):
            try:
                out = int_mm(torch, a, b, out)
                if cuda:
                    torch.cuda.synchronize(self.device)
            except (RuntimeError, NotImplementedError) as exc:
                raise RuntimeError(f"torch._int_mm on {self.device} failed: {_first_line(exc)}") from None
        return out

    def __call__(self, A: np.ndarray, B: np.ndarray) -> np.ndarray:
        with self.counting(int(np.shape(A)[0])):
            try:
                out = self._unit(A, B)
            except (RuntimeError, NotImplementedError) as exc:
                raise RuntimeError(f"torch._int_mm on {self.device} failed: {_first_line(exc)}") from None
        return out
