"""``dot`` and ``gemm``: checked inputs, blocks chained over k, results in the output dtype."""

from __future__ import annotations

import functools
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import formats as _formats
from ..arguments import ArgumentError, available_memory, flag
from ..formats import Format, RoundingMode
from ..model import Model
from ..plan import Plan, plan
from ..progress import on_terminal
from . import distributed, registry, tensors
from .kernels import flush_operands
from .registry import GPU_MIN_WORK, Explanation, Operands, finish

__all__ = ["dot", "gemm", "gemms", "explain", "resolve_model", "last_backend", "check_backend", "BACKENDS",
           "GPU_MIN_WORK", "finish"]

BACKENDS = ("auto", "numpy", "numba", "torch", "cuda", "triton")


def check_backend(backend: Any) -> str:
    """The backend's name, lower-cased (as device and format names are), or ValueError."""
    name = backend.strip().lower() if isinstance(backend, str) else backend
    if not (name in BACKENDS or (isinstance(name, str) and name.startswith("cuda:"))):
        raise ValueError(f"backend must be one of {', '.join(map(repr, BACKENDS))} (or 'cuda:N'), not {backend!r}")
    return name


_LAST = threading.local()


def last_backend() -> str | None:
    """Which engine ran the last ``dot``/``gemm`` call of this thread: ``"numba"`` (the compiled kernels),
    ``"numpy"``, ``"torch"`` (the GPU engine's code on the CPU), ``"cuda"``/``"cuda:N"``, ``"triton"`` or
    ``"reference"``; None before any call.  ``backend="auto"``'s policy: :mod:`blockfma.engine.registry`."""
    return getattr(_LAST, "name", None)


def resolve_model(device: Any = None, input_format: Any = None,
                  output_format: str | Format | None = None, instruction: str | None = None,
                  model: Model | None = None) -> Model:
    """The Model that ``dot``/``gemm`` use for these arguments (``device`` defaults to the H100)."""
    for given, what in ((input_format, "input_format"), (output_format, "output_format"), (instruction, "instruction")):
        if isinstance(given, str) and not given.strip():
            raise ValueError(f"{what}='' names nothing; leave it out for the default or name one")
    if model is not None:
        if not isinstance(model, Model):
            raise TypeError(f"model= takes a blockfma.Model, not {type(model).__name__}")
        if device is not None or instruction is not None:
            raise ValueError(f"pass either model= or device=/instruction=, not both (model={model.summary()!r}, "
                             f"device={device!r}, instruction={instruction!r})")
        from ..devices import input_key

        for given, name, have, what in ((input_format, input_key, model.input_name, "input_format"),
                                        (output_format, lambda f: _formats.get(f).name, model.output_format.name,
                                         "output_format")):
            if given is not None and name(given) != have:
                raise ValueError(f"{what}={name(given)!r} contradicts the model's {have!r}; "
                                 f"leave {what} out when passing model=")
        return model
    from ..devices import device as _device

    dev = _device("H100" if device is None else device)
    return dev.model(input_format or "fp16", output_format or "fp32", instruction)


def _is_ml_float(dtype: np.dtype) -> bool:
    import ml_dtypes

    try:
        ml_dtypes.finfo(dtype)
    except (ValueError, TypeError, KeyError):
        return False
    return True


def _as_float64(x: Any, what: str) -> np.ndarray:
    """float64 values of an input, exactly: float arrays of any width (numpy, ml_dtypes), integers, and
    exact numbers (Python ints, Fractions, the output of ``blockfma.literals.parse``); ValueError for a
    value that float64 cannot hold (an integer of more than 53 significant bits, a long double between
    two float64 values, a Fraction that is not a binary fraction), which no supported format holds either."""
    if isinstance(x, np.ma.MaskedArray):
        raise ValueError(f"{what} is a masked array; matrix units have no masks: fill it first "
                         "(np.ma.filled(x, 0.0)) or drop the masked rows")
    try:
        arr = np.asarray(x)
    except Exception as exc:  # noqa: BLE001 - numpy raises many kinds for ragged lists and the like
        raise ValueError(f"{what} is not an array of numbers: {exc}") from None
    if arr.dtype.kind == "V" and not _is_ml_float(arr.dtype):
        raise ValueError(f"{what} has dtype {arr.dtype}, which is not a floating-point type")
    if arr.dtype.kind in "US":
        raise ValueError(f"{what} must hold numbers (got dtype {arr.dtype}); parse strings with "
                         "blockfma.literals.parse")
    if arr.dtype.kind == "c":
        raise ValueError(f"{what} is complex; matrix units take real values")
    if arr.dtype.kind == "O":
        return _exact_objects(arr, what)
    return _formats.from_numpy(arr, what)


def _exact_objects(arr: np.ndarray, what: str) -> np.ndarray:
    """float64 values of an object array of exact numbers (ints, Fractions, floats), each checked exact."""
    from fractions import Fraction
    from numbers import Rational

    out = np.empty(arr.shape)
    for idx, v in np.ndenumerate(arr):
        if isinstance(v, (float, np.floating)):  # a long double is checked like an array of them
            out[idx] = _formats.from_numpy(np.asarray(v), f"{what}{_formats.index_text(idx)}")
            continue
        if not isinstance(v, (Rational, np.integer)) or isinstance(v, bool):
            raise ValueError(f"{what}{_formats.index_text(idx)} = {v!r} is not a number; pass floats, ints or "
                             "Fractions (blockfma.literals.parse reads strings)")
        exact = Fraction(v)
        if abs(exact) >= 2**1024 or Fraction(float(exact)) != exact:
            _formats.not_binary64(what, idx, v)
        out[idx] = float(exact)
    return out


def _check_format(fmt: Format, x: np.ndarray, what: str, round_with: RoundingMode | None,
                  transposed: bool = False, source: Any = None) -> np.ndarray:
    """x, or ValueError naming the first value ``fmt`` does not hold (index as the caller passed it: reversed
    for a ``transposed`` view); with ``round_with``, x rounded instead.  ``source``: the array x was read
    from, as the caller passed it; a numpy array of a dtype whose every code ``fmt`` holds (fp16 values for
    an fp16 or fp32 input) needs no look at its values."""
    if round_with is not None:
        return _formats.round(fmt, x, round_with)
    native = _native_format(source.dtype) if isinstance(source, np.ndarray) else None
    if native is not None and _formats.holds_codes(fmt, native):
        return x
    ok = _formats.is_representable(fmt, x)
    if not np.all(ok):
        idx = tuple(int(i) for i in np.argwhere(~ok)[0])
        x, idx = (x.T, idx[::-1]) if transposed else (x, idx)
        raise ValueError(
            f"{what}{_formats.index_text(idx)} = {float(x[idx])!r} is not representable in {fmt.name}; round it "
            f"first with blockfma.formats.round({fmt.name!r}, x) or pass round_inputs='rne' (or 'device' to read it as "
            f"the device does)")
    return x


def _check_c_format(model: Model, c_format: Any, c: np.ndarray, what: str) -> np.ndarray:
    """C as given, checked against a ``c_format`` narrower than the model's C format (``Model.c_format``):
    only the check differs; the model reads C's exponent in its own C format (a model that reads C narrower
    than D says so by its ``c_input_format``)."""
    if c_format is None:
        return c
    fc = _formats.get(c_format)
    wide = model.c_format
    if not _formats.holds(wide, fc):
        raise ValueError(f"c_format={fc.name!r} holds values the model's C format {wide.name!r} does not; "
                         "c_format names a narrower format of C (e.g. fp16 C with fp32 output)")
    return _check_format(fc, c, what, None)


def _input_rounding(model: Model, round_inputs: Any) -> tuple[RoundingMode | None, RoundingMode | None]:
    """(mode for a and b, mode for c) from the user's ``round_inputs``."""
    if round_inputs is None or round_inputs is False:
        return None, None
    if isinstance(round_inputs, str) and round_inputs.lower() == "device":
        if model.input_rounding is None:
            return RoundingMode.TiesToEven, RoundingMode.TiesToEven
        return model.input_rounding, RoundingMode.TiesToEven
    mode = RoundingMode.parse(round_inputs)
    return mode, mode


def _register_codes(given: Any, values: np.ndarray, transposed: bool = False) -> np.ndarray:
    """The array whose codes a register read looks at (:func:`formats.read_register`): the caller's own
    float16/float32/float64 array (a float32 NaN's low payload bits survive there, not in its float64
    copy), else the float64 values (Python floats are binary64 already)."""
    if given is None:
        return values
    arr = np.asarray(given).T if transposed else np.asarray(given)
    return arr if arr.dtype in (np.float16, np.float32, np.float64) and arr.shape == values.shape else values


def _prepare(model: Model, a: np.ndarray, b: np.ndarray, c: np.ndarray, round_inputs: Any, check: bool = True,
             names: str = "abc", b_transposed: bool = False, given: tuple[Any, ...] = (None, None)
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """a, b, c checked against the model's formats (or rounded per ``round_inputs``; ``"device"`` reads A
    and B from ``given``, the arrays as the caller passed them, as the unit reads its registers; arrays of
    a dtype the format holds are not looked at) and flushed where the model flushes."""
    mode_ab, mode_c = _input_rounding(model, round_inputs)
    if isinstance(round_inputs, str) and round_inputs.lower() == "device" and model.input_rounding is not None:
        a = _formats.read_register(model.input_format, _register_codes(given[0], a), mode_ab)
        b = _formats.read_register(model.b_format, _register_codes(given[1], b, b_transposed), mode_ab)
    elif check or mode_ab is not None:
        a = _check_format(model.input_format, a, names[0], mode_ab, source=given[0])
        b = _check_format(model.b_format, b, names[1], mode_ab, transposed=b_transposed, source=given[1])
    if (check or mode_c is not None) and (len(given) < 3 or given[2] is not None):  # no C given: +0 made here
        c = _check_format(model.c_format, c, names[2], mode_c, source=given[2] if len(given) > 2 else None)
    return flush_operands(model, a, b, c)


def dot(a: Any, b: Any, c: Any = None, *, device: Any = None, input_format: Any = None,
        output_format: str | Format | None = None, instruction: str | None = None, model: Model | None = None,
        round_inputs: Any = None, backend: str = "auto", check: bool = True, c_format: Any = None,
        scale_a: Any = None, scale_b: Any = None) -> np.ndarray:
    """d = a·b + c over the last axis, as the device (or ``model``) computes it, bit for bit.

    ``a``, ``b``: shape ``(..., k)`` (leading axes broadcast); ``c``: shape ``(...)``, in the model's C format (the
    output format unless the model has a ``c_input_format``; None: +0).  Exact numbers are accepted: Python ints,
    Fractions, long doubles, as long as float64 holds them. Values must be exactly representable in ``input_format`` (c
    in the C format), else ValueError; ``round_inputs`` rounds them instead: a rounding mode (``"rne"``, ``"rz"``, ...)
    or ``"device"`` (a and b read as the unit reads registers, e.g. tf32 by truncation; c to nearest).  Blocks of the
    model's width are chained in order, each block's result being the next block's c.  Returns an array of shape
    ``(...)`` in the output format's dtype (float16, float32, float64), so results compare bit for bit. ``input_format``
    may name A's and B's formats apart: ``("e4m3fn", "e5m2")`` or ``"e4m3fn*e5m2"``, where the device's instruction
    takes them.  ``c_format`` checks C against a format narrower than the model's C format (:attr:`Model.c_format`: the
    output format, or the model's ``c_input_format``, against which C is checked by default); only the check differs,
    the model reads C as its C format says (a model with ``c_input_format``, V100's and T4's ``mma.f16c``, reads the
    first block's C in it). ``check=False`` is the trusted path for callers that built their values in the formats
    themselves (multiword splitting, probes): it skips the representability check; values outside the format then give
    unspecified bits. ``scale_a``, ``scale_b``: for a block-scaled model (the scaled-fused family: ``mma.block_scale``,
    ``tcgen05.mma.block_scale``), the scales of A and B, values of the model's scale format (ue8m0 as ``e8m0fnu``, or
    ``ue4m3``), shape ``(..., k // scale_block)``: one per scale block along K, broadcasting as ``a`` and ``b`` do; a
    NaN scale makes its dot products NaN (MMA-Sim's rule). ``backend``: ``"auto"`` (the policy:
    :mod:`blockfma.engine.registry`), or one engine by name: ``"numpy"``, ``"numba"``, ``"cuda"`` (the GPU engine,
    torch: the fused families, block-scaled models) on a CUDA GPU and ``"torch"`` the same code on the CPU.  Every
    backend gives the same bits.
    """
    backend = check_backend(backend)
    m = resolve_model(device, input_format, output_format, instruction, model)
    A, B, C, lead = _dot_operands(m, a, b, c, c_format)
    if A.shape[-1] == 0:  # an empty dot product is c itself, as given
        C = _check_format(m.c_format, C, "c", _input_rounding(m, round_inputs)[1])
        _LAST.name = "numpy"
        return finish(m, np.array(np.broadcast_to(C, lead), dtype=np.float64), computed=False)
    rows, k = int(np.prod(lead, dtype=np.int64)), A.shape[-1]
    _check_memory(rows, 2 * rows * k, f"dot of {rows} rows of length {k}")  # broadcasts copy
    A, B, C = _prepare(m, A, B, C, round_inputs, check, given=(a, b, c))
    scales = _scales(m, scale_a, scale_b, k, (lead, lead)) or (None, None)
    flat = [None if x is None else np.broadcast_to(x, lead + x.shape[-1:]).reshape(rows, -1) for x in (A, B) + scales]
    ops = Operands.rows(flat[0], flat[1], np.broadcast_to(C, lead).reshape(rows), flat[2], flat[3])
    return _execute(plan(m, k), ops, backend).reshape(lead)


def _dot_operands(m: Model, a: Any, b: Any, c: Any, c_format: Any
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, ...]]:
    """a, b, c of a dot as float64 (values not yet checked), their shapes checked; and the shape of d."""
    A = _as_float64(a, "a")
    B = _as_float64(b, "b")
    C = np.zeros(()) if c is None else _check_c_format(m, c_format, _as_float64(c, "c"), "c")  # None: +0
    if A.ndim == 0 or B.ndim == 0:
        raise ValueError(f"a and b need a last axis of length k; got shapes {A.shape} and {B.shape}")
    if A.shape[-1] != B.shape[-1]:
        raise ValueError(f"a and b must have the same length k on their last axis; got shapes {A.shape} and "
                         f"{B.shape}")
    try:
        lead = np.broadcast_shapes(A.shape[:-1], B.shape[:-1], C.shape)
    except ValueError:
        raise ValueError(f"shapes do not broadcast: a {A.shape}, b {B.shape}, c {C.shape} (c must have the "
                         "shape of a and b without their last axis)") from None
    return A, B, C, lead


def _execute(p: Plan, ops: Operands, backend: str, progress: registry.Progress = None) -> np.ndarray:
    """The call run by the engine :func:`registry.choose` picks (the numpy engine where the compiled kernels
    meet inputs they do not run after all), recorded for :func:`last_backend`; D (batch, m, n), output format."""
    engine = registry.choose(p, ops, backend)
    assert engine is not None  # numpy operands: the reference runs every call
    D = engine.run(p, ops, progress)
    if D is None:  # the compiled kernels met a value they do not run
        if backend == "numba":
            raise ValueError(f"the compiled kernels do not run {p.model.summary()} on these inputs (a product may "
                             "overflow, or a value lies outside their exact range); backend='numpy' or 'auto' runs "
                             "them")
        engine = registry.engine("numpy")
        D = engine.run(p, ops, progress)
    _LAST.name = engine.name
    return finish(p.model, D)


def _scales(model: Model, scale_a: Any, scale_b: Any, k: int, leads: tuple[tuple[int, ...], ...], gemm: bool = False,
            stated: bool = False) -> tuple[np.ndarray, np.ndarray] | None:
    """The scales of a block-scaled model as float64 arrays, shapes checked (:meth:`Model.scale_shapes`) and
    broadcast, values of the scale format, NaN allowed; None for other models, which take no scales."""
    given = [None if x is None else _as_float64(x, name) for name, x in (("scale_a", scale_a), ("scale_b", scale_b))]
    shapes = model.scale_shapes(k, tuple(given), leads, gemm, stated)
    if shapes is None:
        return None
    fs, out = model.scale_format, []
    for name, x, shape in zip(("scale_a", "scale_b"), given, shapes):
        finite = ~np.isnan(x)  # NaN scales pass (they make results NaN); no sign, values of the scale format
        bad = finite & (np.signbit(x) | ~_formats.is_representable(fs, np.where(finite, x, 1.0)))
        if bad.any():
            pos = tuple(int(j) for j in np.argwhere(bad)[0])
            value = float(x[pos])
            raise ArgumentError(name, x, f"{name}[{', '.join(map(str, pos))}] = {value!r} is not a value of "
                                f"{fs.name}" + (" (scales are unsigned)" if np.signbit(value) else ""),
                                fix="round the scales to the scale format first (bf.formats.round)")
        out.append(np.broadcast_to(x[:, None] if gemm and name == "scale_b" and x.ndim == 1 else x, shape))
    return out[0], out[1]


_available_memory = available_memory  # a module name, so tests can stand in a smaller machine
_native_format = functools.lru_cache(maxsize=64)(_formats.of_dtype)  # per dtype: the registry is fixed
MEMORY_UNCHECKED = 1 << 26  # bytes of working set below which no call is refused (64 MiB)
MEMORY_FACTOR = 7  # peak bytes per float64 of an m x n result (measured: 4 numpy, 6.3 numba, 3000^2 x 16)


def _check_memory(outputs: int, inputs: int, label: str) -> None:
    """Refuse up front a call whose working set (about MEMORY_FACTOR float64 per output, 3 per input value)
    exceeds the memory available, instead of dying in numpy's MemoryError halfway (or being killed)."""
    need = 8 * (MEMORY_FACTOR * outputs + 3 * inputs)
    if need < MEMORY_UNCHECKED:  # reading the machine's memory costs more than a small call's products
        return
    have = _available_memory()
    if have is not None and need > have:
        gib = 2.0**30
        raise MemoryError(f"{label} needs about {need / gib:.1f} GiB ({outputs} outputs in float64 and their "
                          f"temporaries), and this machine has {have / gib:.1f} GiB available; pass dask arrays "
                          "(bf.gemm runs them tile by tile, see the README) or split the call")


class _Progress:
    """A one-line progress report on stderr for long GEMMs (off unless asked for or long and on a TTY)."""

    def __init__(self, enabled: bool | None, work: int, label: Callable[[], str]):
        if enabled is not None:
            enabled = flag("progress", enabled)
        self.on = (work >= 4e9 and on_terminal()) if enabled is None else enabled
        self.label = label
        self.start = time.monotonic()

    def __call__(self, done: float) -> None:
        if self.on:
            elapsed = time.monotonic() - self.start
            eta = elapsed * (1 - done) / done if done > 0 else float("nan")
            end = "\n" if done >= 1 else ""
            print(f"\r{self.label()}: {100 * done:5.1f}%  {elapsed:6.1f} s, about {eta:5.0f} s left", end=end,
                  file=sys.stderr, flush=True)


def gemm(A: Any, B: Any, C: Any = None, *, device: Any = None, input_format: Any = None,
         output_format: str | Format | None = None, instruction: str | None = None, model: Model | None = None,
         round_inputs: Any = None, backend: str = "auto", progress: bool | None = None, check: bool = True,
         c_format: Any = None, scale_a: Any = None, scale_b: Any = None, scale_layout: str | None = None
         ) -> np.ndarray:
    """D = A @ B + C with every element computed as :func:`dot` computes it.

    ``A``: (m, k), ``B``: (k, n), ``C``: (m, n), a scalar, or None (zeros).  Works row by row (compiled kernels) or tile
    by tile (numpy, torch), so memory stays O(mn + (m + n)k) plus one tile.  ``backend`` as for :func:`dot`, and
    ``"triton"``: our own tiled Triton kernel (:mod:`blockfma.engine.triton`, the models it ``supports``, block-scaled
    ones by name only) on a CUDA GPU, or on the CPU under Triton's interpreter (``TRITON_INTERPRET=1``: small shapes,
    tests).  ``progress`` prints a progress line on stderr (default: for GEMMs of 4e9 products or more, on a terminal).
    ``check=False`` skips the input check, as for :func:`dot`.  ``scale_a`` (m, k // scale_block) and ``scale_b`` (k //
    scale_block, n), each laid out as its operand (torch's (n, k // block) is ``scale_b.T``): the scales of a
    block-scaled model, as for :func:`dot`; a 1-D ``scale_a`` or ``scale_b`` serves every row of A or column of B.
    ``scale_layout``: "kn" (as B) or "nk" (torch's), required where a 2-D ``scale_b`` is square (n = k // block > 1: its
    shape cannot say). With dask arrays for A, B or C it returns a lazy dask array computed tile by tile, bit-identical
    to the in-memory call, the scales following A's row and B's column chunks (:mod:`.distributed`).  With torch tensors
    that an engine runs where they lie (Triton: on a GPU, or ``backend="triton"`` under the interpreter) it returns a
    tensor of the output dtype there, nothing copied to the host (:mod:`.tensors`).
    """
    backend = check_backend(backend)
    mdl = resolve_model(device, input_format, output_format, instruction, model)
    scale_b = _scale_b_as_b(scale_b, scale_layout)
    if any(distributed.is_dask(x) for x in (A, B, C)):
        return distributed.gemm(A, B, C, mdl, kernel=gemm, scale_a=scale_a, scale_b=scale_b,
                                stated=bool(scale_layout), round_inputs=round_inputs, backend=backend, check=check,
                                c_format=c_format)
    if tensors.given(A, B, C):  # where they lie (a tensor of the output dtype there), else on the host
        ran = None if round_inputs or c_format or scale_a is not None or scale_b is not None else \
            tensors.gemm(mdl, A, B, C, backend, check)
        if ran is not None:
            _LAST.name = ran[1]
            return ran[0]
        A, B, C = (tensors.to_host(x) for x in (A, B, C))
    call = _gemm_call(mdl, A, B, C, round_inputs, check, c_format, scale_a, scale_b, bool(scale_layout))
    if isinstance(call, np.ndarray):  # no products to sum
        _LAST.name = "numpy"
        return call
    p, ops = call
    _, m, k, n = ops.shape
    report = _Progress(progress, ops.work, lambda: f"gemm {mdl.summary()} {m}x{k}x{n}")
    return _execute(p, ops, backend, report if report.on else None)[0]


def gemms(A: np.ndarray, B: np.ndarray, C: np.ndarray | None, *, model: Model, round_inputs: Any = None,
          backend: str = "auto") -> np.ndarray:
    """D[t] = A[t] @ B[t] + C[t] for a batch of matrix products, A (batch, m, k), B (batch, k, n), C None
    or (batch, m, n), each as :func:`gemm` computes it, in one engine call (the torch front's batched matmuls)."""
    (nb, m, k), n = A.shape, B.shape[-1]
    _check_memory(nb * m * n, A.size + B.size, f"{nb} gemms {m}x{k}x{n}")
    C_ = np.zeros((nb, m, n)) if C is None else _as_float64(C, "C")
    if k == 0 or C_.size == 0:  # no products: D is C as given
        return finish(model, _check_format(model.c_format, C_, "C", _input_rounding(model, round_inputs)[1]),
                      computed=False)
    ops = _prepare(model, _as_float64(A, "A"), _as_float64(B, "B"), C_, round_inputs, names="ABC", given=(A, B, C))
    return _execute(plan(model, k), Operands(*ops, gemm=True), backend)


def _scale_b_as_b(scale_b: Any, layout: str | None) -> Any:
    """``scale_b`` laid out as B, (k // block, n), from the ``scale_layout`` gemm was given."""
    if layout not in (None, "kn", "nk"):
        raise ArgumentError("scale_layout", layout, 'must be "kn" (scale_b laid out as B) or "nk" (torch\'s layout)')
    if layout is not None and scale_b is None:
        raise ArgumentError("scale_layout", layout, "says how scale_b is laid out, and no scale_b was given",
                            fix="pass scale_b too, or leave scale_layout out")
    if layout == "nk" and scale_b is not None and getattr(scale_b, "ndim", 2) == 2:
        return scale_b.T
    return scale_b


def _gemm_call(mdl: Model, A: Any, B: Any, C: Any, round_inputs: Any, check: bool, c_format: Any, scale_a: Any,
               scale_b: Any, stated: bool = False) -> tuple[Plan, Operands] | np.ndarray:
    """The plan and the checked operands of a gemm, B and its scales as the caller lays them, (k, n); or,
    for a call without products to sum (k, m or n zero), D itself."""
    A_, B_, C_ = _gemm_operands(mdl, A, B, C, c_format)
    (m, k), n = A_.shape, B_.shape[1]
    if k == 0:  # no products: D is C as given
        return finish(mdl, np.array(_check_format(mdl.c_format, C_, "C", _input_rounding(mdl, round_inputs)[1])),
                      computed=False)
    A_, Bt, C_ = _prepare(mdl, A_, B_.T, C_, round_inputs, check, names="ABC", b_transposed=True, given=(A, B, C))
    scales = _scales(mdl, scale_a, scale_b, k, ((m,), (n,)), True, stated) or (None, None)
    if m == 0 or n == 0:
        return finish(mdl, np.array(C_, dtype=np.float64))
    return plan(mdl, k), Operands.matrix(A_, Bt.T, C_, *scales)


def _gemm_operands(model: Model, A: Any, B: Any, C: Any, c_format: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A, B, C of a gemm as float64 (values not yet checked), their shapes checked and the memory the call
    needs; C broadcast to (m, n)."""
    A_ = _as_float64(A, "A")
    B_ = _as_float64(B, "B")
    distributed.matrix_shapes(A_, B_)
    (m, k), n = A_.shape, B_.shape[1]
    _check_memory(m * n, A_.size + B_.size, f"gemm {m}x{k}x{n}")
    C_ = np.zeros((m, n)) if C is None else _check_c_format(model, c_format, _as_float64(C, "C"), "C")
    try:
        return A_, B_, np.broadcast_to(C_, (m, n))
    except ValueError:
        raise ValueError(f"C has shape {C_.shape}; it must be ({m}, {n}) or broadcast to it") from None


def explain(A: Any, B: Any, C: Any = None, *, device: Any = None, input_format: Any = None,
            output_format: str | Format | None = None, instruction: str | None = None, model: Model | None = None,
            round_inputs: Any = None, backend: str = "auto", c_format: Any = None, scale_a: Any = None,
            scale_b: Any = None) -> Explanation:
    """Which engine :func:`gemm` would run for these arguments, and why each other engine was passed over
    or refused (:func:`blockfma.engine.registry.explain`); nothing is computed (``backend="auto"`` may try
    the Triton kernel once, as :func:`gemm` would).  A refused ``backend`` raises as :func:`gemm` would.

        >>> import numpy as np, blockfma as bf
        >>> e = bf.engine.explain(np.ones((2, 4)), np.ones((4, 3)), device="H100", backend="numpy")
        >>> e.chosen
        'numpy'
        >>> print(e.line("numpy"))
        numpy: runs it (backend='numpy')
        >>> amx = bf.device("Intel AMX").model("bf16", "fp32")
        >>> e = bf.engine.explain(np.ones((2, 4)), np.ones((4, 3)), model=amx)
        >>> e.line("triton").startswith("triton: does not run it:"), e.line("triton").endswith("only, not amx")
        (True, True)
    """
    backend = check_backend(backend)
    mdl = resolve_model(device, input_format, output_format, instruction, model)
    call = _gemm_call(mdl, A, B, C, round_inputs, True, c_format, scale_a, scale_b)
    if isinstance(call, np.ndarray):
        return Explanation("numpy", ("numpy: runs it (no products to sum: D is C)",))
    return registry.explain(*call, backend)
