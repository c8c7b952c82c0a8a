"""Targets of the order probe: :class:`SumTarget`, a batched black-box summation ``f(X) -> y``, and its
adapters from plain sums, dot products, any matmul, ``torch.matmul`` and the blockfma simulator.

A SumTarget follows the protocol of every black box blockfma calls (:class:`blockfma.probes.targets.BlackBox`):
``name``, ``formats``, ``k`` (its summands per row, ``n``), ``calls``, ``rows``, ``seconds`` and
:meth:`~SumTarget.metadata`; its call takes rows of summands instead of (a, b, c).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

import numpy as np

from ... import formats as _formats
from ...devices import device as _device
from ...engine import dot as _dot
from ...formats import Format
from ...torch_switches import matmul_switches, tf32_enabled
from ...inputs import Formats
from ..runtime import TORCH_DTYPES, device_info, import_torch
from ..targets import BlackBox
from ...arguments import ArgumentError, choice, integer, memory
from .tree import MAX_N, check_count

__all__ = ["OrderError", "SumTarget", "sum_target", "dot_target", "matmul_target", "torch_matmul_target",
           "sim_target", "probe_ratio"]


class OrderError(ValueError):
    """The target's outputs fit no summation tree (or the probe values cannot be built for it)."""


@dataclass(frozen=True)
class SumTarget(BlackBox):
    """A batched black-box summation: ``fn(X) -> y`` with ``X`` of shape (rows, n), ``y`` of shape (rows,);
    a :class:`~blockfma.probes.targets.BlackBox` whose ``k`` is ``n``.

    ``fn`` takes float64 summands and returns the sums (any array-like of numbers).  The probe needs to know what it may
    feed and how the target adds: the summands must be values of ``input_format`` times ``2**scale`` (a dot product
    whose other factor is ``2**scale``; 0 for a plain sum), sums are formed in ``accumulator`` (its precision sets
    ``M``) and returned in ``output_format``; ``fraction_bits``, where known, is the number of bits a fused block keeps
    below its largest exponent (``Model.fraction_bits``). ``max_batch`` caps the rows of one call (a GEMM of fixed shape
    takes m rows); ``name`` appears in errors and records; ``where``, if given, returns the metadata of the device the
    sums run on (see :meth:`metadata`).  Each call counts in ``calls``, ``rows`` and ``seconds``.
    """

    fn: Callable[[np.ndarray], Any]
    n: int
    input_format: Format
    accumulator: Format
    output_format: Format
    scale: int = 0
    fraction_bits: int | None = None
    max_batch: int | None = None
    name: str = "target"
    where: Callable[[], dict[str, Any]] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        self.reset_counts()
        set_ = object.__setattr__
        if not callable(self.fn):
            raise TypeError(f"SumTarget.fn must be callable f(X) -> y, not {self.fn!r}")
        set_(self, "n", check_count(self.n, "n (the number of summands)", most=MAX_N))
        set_(self, "scale", integer("scale", self.scale))
        for name in ("input_format", "accumulator", "output_format"):
            set_(self, name, _formats.get(getattr(self, name)))
        if self.max_batch is not None:
            set_(self, "max_batch", check_count(self.max_batch, "max_batch", least=1))
        if self.fraction_bits is not None:
            set_(self, "fraction_bits", check_count(self.fraction_bits, "fraction_bits", least=0))

    @property
    def k(self) -> int:  # type: ignore[override]
        """Summands per row (the protocol's k): ``n``."""
        return self.n

    @property
    def formats(self) -> Formats:  # type: ignore[override]
        """A and B: the summands' format (a dot target's factors), C: the accumulator, D: the output."""
        return Formats.of(self.input_format, self.input_format, self.accumulator, self.output_format)

    def metadata(self) -> dict[str, Any]:
        """The protocol's record (:meth:`BlackBox.metadata`), the scale of the summands and ``where()``'s
        metadata of the device."""
        return {**super().metadata(), "scale": self.scale, **(self.where() if self.where is not None else {})}

    def summand_exponents(self) -> tuple[int, int]:
        """The least and largest k such that ``2**k`` is a summand this target takes."""
        f = self.input_format
        low = f.emin - f.precision + 1 if f.subnormals else f.emin
        return low + self.scale, f.emax + self.scale

    def random_summands(self, rng: np.random.Generator, rows: int) -> np.ndarray:
        """Random summands the target takes: normal values times 2**k, rounded to the input format after
        the factor ``2**scale``.  Each row draws its k uniformly from its own window of 1 to 41 exponents
        (narrow rows have few roundings, wide ones many), inside the range where the input format is normal
        (full precision) and n summands cannot overflow the output, around 2**0 where that range allows."""
        f, s = self.input_format, self.scale
        room = min(self.output_format.max, self.accumulator.max) / (8 * self.n)
        hi_ok = min(f.emax + s, math.floor(math.log2(room)))
        lo_ok = min(f.emin + s, hi_ok)
        mid = min(max(0, lo_ok), hi_ok)
        lo, hi = max(lo_ok, mid - 20), min(hi_ok, mid + 20)
        width = rng.integers(0, hi - lo + 1, size=(rows, 1))
        start = lo + np.floor(rng.random((rows, 1)) * (hi - lo - width + 1)).astype(np.int64)
        k = start + np.floor(rng.random((rows, self.n)) * (width + 1)).astype(np.int64)
        x = rng.standard_normal((rows, self.n)) * np.exp2(k - s)
        return _formats.round(f, x) * 2.0 ** s

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """One checked call: float64 sums of shape (rows,), or OrderError naming the target."""
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.n:
            raise ValueError(f"target {self.name} takes rows of {self.n} summands, not an array of shape {x.shape}")
        with self.counting(x.shape[0]):
            try:
                y = self.fn(x)
            except OrderError:
                raise
            except Exception as exc:
                raise OrderError(f"target {self.name} raised {type(exc).__name__} on {x.shape[0]} rows of "
                                 f"{self.n} summands: {exc}") from exc
            y = np.asarray(y)
            if y.dtype.kind not in "fiu" and y.dtype.kind != "V":
                try:
                    y = y.astype(np.float64)
                except (TypeError, ValueError):
                    raise OrderError(f"target {self.name} returned {y.dtype} values; it must return "
                                     "numbers") from None
            y = _formats.from_numpy(y, "y")
            if y.shape not in ((x.shape[0],), (x.shape[0], 1)):
                raise OrderError(f"target {self.name} returned shape {y.shape} for {x.shape[0]} rows; it must "
                                 f"return one sum per row, shape ({x.shape[0]},)")
        return y.reshape(x.shape[0])


def sum_target(fn: Callable[[np.ndarray], Any], n: int, *, input_format: str | Format = "fp32",
               accumulator: str | Format | None = None, output_format: str | Format | None = None,
               fraction_bits: int | None = None, max_batch: int | None = None, name: str = "sum") -> SumTarget:
    """A plain summation ``fn(X) -> y`` over rows of ``n`` values of ``input_format`` (accumulator and
    output default to the input format)."""
    acc = input_format if accumulator is None else accumulator
    return SumTarget(fn, n, _formats.get(input_format), _formats.get(acc),
                     _formats.get(acc if output_format is None else output_format), 0, fraction_bits,
                     max_batch, name)


def probe_ratio(n: int, accumulator: Format, fraction_bits: int | None) -> int:
    """log2(M / unit), M the large probe value: see :func:`~blockfma.probes.order.infer.probe_scale`."""
    p = accumulator.precision
    f = p + 2 if fraction_bits is None else fraction_bits
    return max(p + 1, f) + max(1, math.ceil(math.log2(n))) + 1


def _default_scale(n: int, input_format: Format, accumulator: Format, fraction_bits: int | None) -> int:
    """The exponent s of the second factor 2**s of a dot-product target: 0 (b = ones) where the input format holds 2**r
    itself, else as much as it takes (at most the format's largest exponent) so that products a * 2**s reach M."""
    r = probe_ratio(n, accumulator, fraction_bits)
    if input_format.emax >= r:
        return 0
    return min(input_format.emax, r - input_format.emax)


def dot_target(fn: Callable[[np.ndarray, np.ndarray], Any], n: int, *, input_format: str | Format = "fp16",
               accumulator: str | Format = "fp32", output_format: str | Format | None = None,
               fraction_bits: int | None = None, scale: int | None = None, max_batch: int | None = None,
               name: str = "dot") -> SumTarget:
    """A batched dot product ``fn(a, b) -> y`` (a, b of shape (rows, n), y of shape (rows,)) probed as the sum of its
    products: ``b`` is ``2**scale`` everywhere (1 where the input format holds M itself; else, e.g. for fp16, ``2**15``
    so that products ``2**15 * 2**15`` reach ``2**30``) and the summand ``x`` is fed as ``a = x / 2**scale``."""
    fin, acc = _formats.get(input_format), _formats.get(accumulator)
    n = check_count(n, "n (the number of summands)", most=MAX_N)
    s = _default_scale(n, fin, acc, fraction_bits) if scale is None else integer("scale", scale)
    if not _formats.is_representable(fin, 2.0 ** s):
        raise ArgumentError("scale", s, f"makes b = 2**{s}, which is not a value of {fin.name}",
                            fix=f"choose scale from {fin.emin - fin.precision + 1} to {fin.emax}")
    factor = 2.0 ** s

    def summed(x: np.ndarray) -> Any:
        return fn(x / factor, np.full_like(x, factor))

    return SumTarget(summed, n, fin, acc, _formats.get(acc if output_format is None else output_format), s,
                     fraction_bits, max_batch, name)


def matmul_target(matmul: Callable[[np.ndarray, np.ndarray], Any], n: int, *, m: int = 64, n_cols: int = 64,
                  column: int = 0, input_format: str | Format = "fp32", accumulator: str | Format = "fp32",
                  output_format: str | Format | None = None, fraction_bits: int | None = None,
                  scale: int | None = None, name: str = "matmul") -> SumTarget:
    """The reduction over K = ``n`` of ``matmul(A, B) -> C``, A of shape (m, n), B of shape (n, n_cols),
    both float64 arrays of values of ``input_format``: each probe is one row of A (at most m per call, the
    rest of A zero), B is ``2**scale`` everywhere and column ``column`` of C is read.  The GEMM keeps its
    shape in every call, since a library may pick another kernel (another order) for another shape."""
    n = check_count(n, "n (the number of summands)", most=MAX_N)
    m = check_count(m, "m", least=1)
    n_cols = check_count(n_cols, "n_cols", least=1)
    column = integer("column", column, least=0, most=n_cols - 1)
    memory("m", m, 8.0 * (m * n + n * n_cols + 2 * m * n_cols), f"the ({m}, {n}) @ ({n}, {n_cols}) operands of "
           "each call", fix="take a smaller m or n_cols")

    def rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        A = np.zeros((m, a.shape[1]))
        A[: a.shape[0]] = a
        B = np.repeat(b[:1].T, n_cols, axis=1)
        C = np.asarray(matmul(A, B))
        if C.shape != (m, n_cols):
            raise OrderError(f"target {name}: matmul of ({m}, {a.shape[1]}) by ({a.shape[1]}, {n_cols}) returned "
                             f"shape {C.shape}")
        return C[: a.shape[0], column]

    return dot_target(rows, n, input_format=input_format, accumulator=accumulator, output_format=output_format,
                      fraction_bits=fraction_bits, scale=scale, max_batch=m, name=name)


def torch_matmul_target(n: int, dtype: Literal["fp16", "bf16", "fp32"] = "fp32", device: str = "cpu", *,
                        allow_reduced_precision_reduction: bool | None = None, allow_tf32: bool | None = None,
                        m: int = 64, n_cols: int = 64, column: int = 0) -> SumTarget:
    """The reduction over K = ``n`` of ``torch.matmul`` on (m, n) x (n, n_cols) tensors of ``dtype`` on
    ``device`` ("cpu", "cuda", "cuda:1", ...).

    ``allow_reduced_precision_reduction`` sets ``torch.backends.cuda.matmul.allow_fp16_reduced_precision_
    reduction`` (fp16) or ``allow_bf16_reduced_precision_reduction`` (bf16), ``allow_tf32`` sets
    ``allow_tf32`` (fp32), for each call only; None leaves torch's setting.  Sums are taken to be formed in
    fp32 (CPU kernels and tensor cores alike); where split-K partial sums are kept in fp16 or bf16 instead
    (reduced-precision reduction), M overflows or no longer absorbs, and the inference says so.  fp16 inputs
    cannot hold M, so B is ``2**15`` and the probe values are products (``2**15 * 2**15 = 2**30``).
    """
    dtype = choice("dtype", dtype, TORCH_DTYPES)
    torch = import_torch("torch_matmul_target")
    tdtype = getattr(torch, TORCH_DTYPES[dtype])
    if str(device).startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"device {device!r}: torch sees no CUDA GPU (torch {torch.__version__}, "
                           f"CUDA build {torch.version.cuda}); use device='cpu' or a CUDA build of torch on a GPU")
    settings: dict[str, bool] = {}
    if allow_reduced_precision_reduction is not None and dtype != "fp32":
        settings[f"allow_{dtype}_reduced_precision_reduction"] = bool(allow_reduced_precision_reduction)
    if allow_tf32 is not None and dtype == "fp32":
        settings["allow_tf32"] = bool(allow_tf32)
    tf32 = dtype == "fp32" and str(device).startswith("cuda") and (
        allow_tf32 if allow_tf32 is not None else tf32_enabled(torch))
    switches = {"tf32": settings.get("allow_tf32"),
                "reduced": settings.get(f"allow_{dtype}_reduced_precision_reduction")}  # None: torch's own

    def matmul(A: np.ndarray, B: np.ndarray) -> np.ndarray:
        At = torch.from_numpy(A).to(device=device, dtype=tdtype)
        Bt = torch.from_numpy(B).to(device=device, dtype=tdtype)
        with matmul_switches(torch, **switches):
            C = torch.matmul(At, Bt)
        return C.to(torch.float64).cpu().numpy()

    flags = ", ".join(f"{k}={v}" for k, v in settings.items())
    name = f"torch.matmul {dtype} {device} ({m}x{n})@({n}x{n_cols}){' ' + flags if flags else ''}"
    target = matmul_target(matmul, n, m=m, n_cols=n_cols, column=column, input_format="tf32" if tf32 else dtype,
                           accumulator="fp32", output_format=dtype, name=name)
    return dataclasses.replace(target, where=lambda: {**device_info(device), **settings})


def sim_target(n: int, device: str = "H100", input_format: str = "fp16", output_format: str = "fp32", *,
               model: Any = None, instruction: str | None = None) -> SumTarget:
    """The blockfma simulator as a target: ``blockfma.dot(a, b, 0)`` over k = ``n`` for the device's model
    (or ``model``), blocks chained as the engine chains them."""
    mdl = model if model is not None else _device(device).model(input_format, output_format, instruction=instruction)
    acc = mdl.accumulator

    def fn(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return _dot(a, b, np.zeros(a.shape[0]), model=mdl)

    target = dot_target(fn, n, input_format=mdl.input_format, accumulator=acc, output_format=mdl.output_format,
                        fraction_bits=mdl.fraction_bits, name=f"sim:{mdl.name or mdl.family.value}")
    return dataclasses.replace(target, where=lambda: {"model": mdl.to_dict()})

