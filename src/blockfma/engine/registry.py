"""The engines, and the one place that chooses which of them runs a call.

An engine is a registered object (:class:`Engine`): its ``name`` (what :func:`blockfma.engine.last_backend`
reports and ``backend=`` asks for), ``supports(plan, operands)`` (None where it runs the call, else why not,
in words for the user) and ``run(plan, operands, progress)`` (float64 D, before
:func:`finish` writes it in the output format).  ``auto(plan, operands)`` is the engine's part of the
``backend="auto"`` policy: None where auto may take it, else why auto passes it over.

:data:`ENGINES` lists them in auto's order of preference; :func:`choose` walks it (or looks the named
backend up) and :func:`explain` says, for one call, what each engine did.  ``dot``, ``gemm`` and
``check`` ask here; nothing else picks an engine.  Adding an engine: a module defining its
:class:`~.base.Engine` (the built-in ones below adapt the engines' modules), and one line in :data:`ENGINES`.

The auto policy: the Triton kernel for a gemm of :data:`GPU_MIN_WORK` products or more on a visible CUDA GPU, once it
has given the exact engines' bits for the model there (:func:`verified`); else numba where it runs the model and the
inputs; else, for a large call, the torch GPU engine where torch sees a GPU; else numpy; block-scaled calls beyond the
engines' exact bounds in the exact reference, row by row.  Block-scaled calls go to a GPU only when asked for by name.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import formats as _formats, optional
from ..model import Model
from ..plan import Plan, plan as make_plan, run as run_plan
from . import gpu, rules, scaled, triton
from .base import Engine, Operands, Progress
from .kernels import Blocks, flush_operands

__all__ = ["Engine", "Operands", "Progress", "Explanation", "ENGINES", "GPU_MIN_WORK", "choose", "explain", "engine",
           "finish", "verified", "trial_inputs"]

GPU_MIN_WORK = 1 << 24  # products below which backend="auto" never moves a call to the GPU (launch costs)
TILE = 1 << 21  # products per numpy tile (rows x n x L), bounding the memory of one step


class Numpy(Engine):
    """The numpy engine (:mod:`.kernels`, :mod:`.scaled`): every model; block-scaled ones within its exact
    float64 bounds (every preset).  Tiles of rows and of batch entries bound the memory of one step."""

    name, fallback = "numpy", "reference"

    def supports(self, p: Plan, ops: Operands | None) -> str | None:
        if p.model.block_scaled and not scaled.supports(p.block):
            return "the block-scaled model lies beyond its exact float64 bounds"
        return None

    def run(self, p: Plan, ops: Operands, progress: Progress = None) -> np.ndarray:
        batch, m, _, n = ops.shape
        D = np.array(ops.c, dtype=np.float64)
        a, bt = rules.pad(ops.a, p.padded), rules.pad(np.swapaxes(ops.b, 1, 2), p.padded)
        if ops.scaled:
            block = p.model.option("scale_block")
            sa = scaled.per_product(ops.sa, block, p.padded)
            sbt = scaled.per_product(np.swapaxes(ops.sb, 1, 2), block, p.padded)
        rows = max(1, TILE // max(1, n * (scaled.width(p) if ops.scaled else p.width)))
        group = max(1, rows // max(1, m))  # batch entries per tile
        for t, r in itertools.product(range(0, batch, group), range(0, m, rows)):
            ts, rs = slice(t, t + group), slice(r, min(m, r + rows))
            if ops.scaled and scaled.runs_groups(p, ops.a[ts, rs], ops.b[ts]):  # group sums by matrix products
                D[ts, rs] = scaled.group_chain(p, a[ts, rs], bt[ts], D[ts, rs], sa[ts, rs], sbt[ts])
            else:
                datapath = scaled.ScaledBlocks(p, a[ts, rs, None, :], bt[ts, None, :, :], sa[ts, rs, None, :],
                                               sbt[ts, None, :, :]) if ops.scaled else \
                    Blocks(p, a[ts, rs, None, :], bt[ts, None, :, :])
                D[ts, rs] = run_plan(p, datapath, D[ts, rs])
            if progress is not None:
                progress((t * m + rs.stop * min(group, batch - t)) / (batch * m))
        return D


_FAST: Any = None


def _fast_module() -> Any:
    """engine.fast if numba imports, else False (looked up once)."""
    global _FAST
    if _FAST is None:
        try:
            from . import fast
        except ImportError:
            _FAST = False
        else:
            _FAST = fast
    return _FAST


class Numba(Engine):
    """The compiled kernels (:mod:`.fast`; block-scaled: :mod:`.fast.scaled`, a scale per product)."""

    name = "numba"

    def supports(self, p: Plan, ops: Operands | None) -> str | None:
        fast = _fast_module()
        if not fast:
            return f"numba is not installed ({optional.hint('fast')})"
        if p.model.block_scaled:
            from .fast import scaled as fast_scaled

            if not fast_scaled.supports(p.block):
                return ("it runs block-scaled models with a scale per product and +0 exact zeros within the exact "
                        "float64 bounds (group-scaled ones run in the numpy engine by matrix products)")
        elif not fast.supports(p.model):
            return "no compiled kernel for this model"
        if ops is not None and not ops.finite:
            return "it takes finite A, B and C only"
        return None

    def refusal(self, p: Plan, ops: Operands | None, why: str) -> Exception:
        if not _fast_module():
            return ValueError(f"backend='numba' needs numba: {optional.hint('fast')}")
        if p.model.block_scaled:
            return ValueError(f"the compiled kernels do not run {p.model.summary()} on these inputs (they run "
                              "block-scaled models with a scale per product, finite values and +0 exact zeros; "
                              "group-scaled ones run in the numpy engine by matrix products); use "
                              "backend='numpy' or 'auto'")
        return ValueError(f"the compiled kernels do not run {p.model.summary()} on these inputs (non-finite "
                          "values or an unsupported option); use backend='numpy' or 'auto'")

    def run(self, p: Plan, ops: Operands, progress: Progress = None) -> np.ndarray | None:
        if ops.scaled:
            from .fast import scaled as fast_scaled

            block = p.model.option("scale_block")
            b = np.swapaxes(rules.pad(np.swapaxes(ops.b, 1, 2), p.padded), 1, 2)
            return fast_scaled.batched(p, rules.pad(ops.a, p.padded), b, np.asarray(ops.c, dtype=np.float64),
                                       scaled.per_product(ops.sa, block, p.padded),
                                       scaled.per_product(ops.sb, block, p.padded, axis=1))
        m = ops.shape[1]
        D = np.array(ops.c, dtype=np.float64)
        B = np.ascontiguousarray(ops.b)
        chunk = m if progress is None else max(8, -(-m // 50))
        for r in range(0, m, chunk):
            rs = slice(r, min(m, r + chunk))
            out = _fast_module().batched(p, ops.a[:, rs], B, D[:, rs])
            if out is None:
                return None
            D[:, rs] = out
            if progress is not None:
                progress(rs.stop / m)
        return D


@dataclass(frozen=True)
class Torch(Engine):
    """The GPU engine (:mod:`.gpu`: the array kernels on torch tensors): ``"torch"`` on the CPU, ``"cuda"`` or
    ``"cuda:N"`` on a CUDA GPU."""

    name: str = "torch"

    def supports(self, p: Plan, ops: Operands | None) -> str | None:
        if not optional.available("torch"):
            return "torch is not installed"
        if p.model.block_scaled:
            return None if scaled.supports(p.block) else "it lies beyond the block-scaled engines' exact float64 bounds"
        return None if gpu.supports(p.model) else "no array kernel for this model"

    def auto(self, p: Plan, ops: Operands) -> str | None:
        if self.name != "cuda":
            return "it runs only when asked for by name"
        if p.model.block_scaled:
            return "block-scaled calls go to the GPU only when asked for by name"
        if ops.work < GPU_MIN_WORK:
            return f"fewer than GPU_MIN_WORK = {GPU_MIN_WORK} products"
        return None if gpu.available() else "torch sees no CUDA GPU"

    def refusal(self, p: Plan, ops: Operands | None, why: str) -> Exception:
        if not optional.available("torch"):
            gpu.torch_device(self.name)  # raises the install hint, as ImportError
        if p.model.block_scaled:
            return ValueError(f"the GPU engine does not run {p.model.summary()}: it lies beyond the block-scaled "
                              "engines' exact float64 bounds; backend='auto' runs it in the exact reference")
        return gpu.refusal(p.model)

    def run(self, p: Plan, ops: Operands, progress: Progress = None) -> np.ndarray:
        if ops.scaled:
            block = p.model.option("scale_block")
            return gpu.scaled(p, rules.pad(ops.a, p.padded), rules.pad(np.swapaxes(ops.b, 1, 2), p.padded),
                              np.asarray(ops.c, dtype=np.float64), scaled.per_product(ops.sa, block, p.padded),
                              scaled.per_product(np.swapaxes(ops.sb, 1, 2), block, p.padded), self.name)
        if ops.gemm:
            return np.stack([gpu.gemm(p, a, b.T, np.array(c, dtype=np.float64), self.name, progress=progress)
                             for a, b, c in zip(ops.a, ops.b, ops.c)])
        return gpu.dot(p, ops.a[:, 0], ops.b[:, :, 0], ops.c[:, 0, 0], self.name)[:, None, None]


class Triton(Engine):
    """Our Triton kernels (:mod:`.triton`): gemm only; auto takes them for large gemms on a visible CUDA GPU
    once :func:`verified`."""

    name, tensors = "triton", True

    def supports(self, p: Plan, ops: Operands | None) -> str | None:
        if ops is None or not ops.gemm:
            return "it runs bf.gemm only (its kernel tiles a matrix product)"
        if ops.device == "cpu" and not triton.interpreting():  # before the look for triton: every CPU call asks
            return "it runs CPU tensors under Triton's interpreter only (TRITON_INTERPRET=1)"
        if ops.device is not None and not optional.available("triton"):
            return "triton is not installed"
        return triton.unsupported_reason(p.model)

    def auto(self, p: Plan, ops: Operands) -> str | None:
        if ops.device is not None:  # tensors where they lie: CUDA ones always, the interpreter when asked for
            return "CPU tensors go to Triton's interpreter only when asked for by name" if ops.device == "cpu" else None
        if p.model.block_scaled:
            return "block-scaled calls go to the Triton kernel only when asked for by name"
        if ops.work // ops.shape[0] < GPU_MIN_WORK:  # per matrix product: each of a batch is a launch of its own
            return f"fewer than GPU_MIN_WORK = {GPU_MIN_WORK} products"
        if not optional.available("triton"):
            return "triton is not installed"
        if not triton.gpu_visible():
            return "no CUDA GPU visible (or Triton's interpreter is on)"
        import torch  # importable: gpu_visible saw it

        _, m, k, n = ops.shape
        try:
            triton.check_fits(m, k, n, torch.device("cuda"), **triton.GEMM_BYTES)
        except MemoryError:
            return "the operands do not fit the GPU's free memory"
        if not verified(p.model):
            return "the kernel has not given the exact engines' bits for this model on this GPU"
        return None

    def refusal(self, p: Plan, ops: Operands | None, why: str) -> Exception:
        if ops is None or not ops.gemm:
            return ValueError("backend='triton' runs bf.gemm only (its kernel tiles a matrix product); use bf.gemm, "
                              "or backend='auto' for dot")
        return super().refusal(p, ops, why)

    def run(self, p: Plan, ops: Operands, progress: Progress = None) -> Any:
        """float64 D (batch, m, n) of host operands; of float32 tensors (:mod:`.tensors`), a float32 tensor
        (1, m, n) where they lie."""
        if ops.device is not None:
            return triton.gemm_tensors(p.model, ops.a[0], ops.b[0], ops.c[0])[None]
        scales = (ops.sa, ops.sb) if ops.scaled else ()
        return np.stack([triton.gemm(p.model, *x) for x in zip(ops.a, ops.b, ops.c, *scales)])


class Reference(Engine):
    """The exact reference (:func:`blockfma.reference.dot`, Fractions, one dot product at a time: about a
    millisecond each): auto's last resort, for block-scaled models beyond the engines' bounds."""

    name = "reference"

    def run(self, p: Plan, ops: Operands, progress: Progress = None) -> np.ndarray:
        from .. import reference

        batch, m, _, n = ops.shape
        out = np.empty((batch, m, n))
        for t, i, j in np.ndindex(batch, m, n):
            scales = (ops.sa[t, i], ops.sb[t, :, j]) if ops.scaled else ()
            out[t, i, j] = reference.dot(p.model, ops.a[t, i], ops.b[t, :, j], ops.c[t, i, j], *scales)
        return out


#: the engines, in backend="auto"'s order of preference (a new engine: one line here)
ENGINES: tuple[Engine, ...] = (Triton(), Numba(), Torch("cuda"), Torch("torch"), Numpy(), Reference())


def engine(name: str) -> Engine:
    """The registered engine of a backend name (``"cuda:N"``: the GPU engine on GPU N); KeyError if none."""
    for e in ENGINES:
        if e.name == name:
            return e
    if name.startswith("cuda:"):
        return Torch(name)
    raise KeyError(f"no engine named {name!r}; engines: {', '.join(e.name for e in ENGINES)}")


def _verdicts(p: Plan, ops: Operands, backend: str) -> Iterator[tuple[Engine, str, bool]]:
    """(engine, what it did with the call, whether it runs it) for each engine, the one taken first among them; a
    refused named backend raises its error (after a fallback engine, where it has one).  Tensor operands: only the
    engines that take tensors are asked; none may take them (the caller then brings them to the host)."""
    on_host = ops is None or ops.device is None
    if backend != "auto":
        named = engine(backend)
        if not (on_host or named.tensors):
            yield named, "runs on host arrays only", False
            return
        why = named.supports(p, ops)
        taker = named if why is None else (engine(named.fallback) if named.fallback else None)
        if taker is None and not on_host:  # tensors: the caller brings them to the host, where it is refused
            yield named, f"does not run them where they lie: {why}", False
            return
        if taker is None:
            raise named.refusal(p, ops, why or "")
        if why is not None:
            yield named, f"does not run it: {why}; {taker.name} does", False
        yield taker, f"runs it (backend={backend!r})", True
        for e in ENGINES:
            if e is not named and e is not taker:
                yield e, "not asked for", False
        return
    chosen: Engine | None = None
    for e in ENGINES:
        why = e.supports(p, ops) if on_host or e.tensors else "runs on host arrays only"
        if why is not None:
            yield e, f"does not run it: {why}", False
        elif chosen is not None:
            yield e, f"not tried: {chosen.name} comes first", False
        elif (passed := e.auto(p, ops)) is not None:
            yield e, f"passed over by backend='auto': {passed}", False
        else:
            chosen = e
            yield e, "runs it", True


def choose(p: Plan, ops: Operands, backend: str = "auto") -> Engine | None:
    """The engine that runs this call: ``backend`` by name (its refusal raised, or its fallback taken), or
    the first engine of :data:`ENGINES` that runs it and that auto takes.  None only for torch tensors
    that no engine takes where they lie (the torch front then computes on the host)."""
    return next((e for e, _, taken in _verdicts(p, ops, backend) if taken), None)


@dataclass(frozen=True)
class Explanation:
    """What each engine did with one call: ``chosen`` (the engine that runs it; None: tensors no engine
    takes where they lie) and ``lines``, one ``"name: verdict"`` per engine asked, in :data:`ENGINES`' order."""

    chosen: str | None
    lines: tuple[str, ...]

    def line(self, name: str) -> str:
        """The line of one engine."""
        return next(s for s in self.lines if s.split(":")[0] == name)

    def __str__(self) -> str:
        return "\n".join(self.lines)


def explain(p: Plan, ops: Operands, backend: str = "auto") -> Explanation:
    """For each engine, why it was taken or refused for this call (see :func:`choose`)."""
    order = {e.name: i for i, e in enumerate(ENGINES)}
    rows = sorted(_verdicts(p, ops, backend), key=lambda row: order.get(row[0].name, len(order)))
    chosen = next((e.name for e, _, taken in rows if taken), None)
    return Explanation(chosen, tuple(f"{e.name}: {text}" for e, text, _ in rows))


def finish(model: Model, values: np.ndarray, *, computed: bool = True) -> np.ndarray:
    """float64 results -> the output format's dtype, NaNs written with the model's NaN style, every
    computed zero +0 under ``rounded_zero="positive"`` (one place for all engines: with exact_zero="positive"
    a zero block result only ever meets the next block as a zero C, whose sign then cannot matter).
    ``computed=False``: no product was summed (k = 0), C comes back as given."""
    fmt = model.output_format
    if computed and model.rounded_zero == "positive":
        values = np.where(values == 0, 0.0, values)
    out = _formats.to_numpy(fmt, np.where(np.isnan(values), 0.0, values), check=False)  # engine-made values
    nan = np.isnan(values)
    if np.any(nan):
        bits = _formats.bits(out)
        bits[nan] = rules.nan_codes(fmt, model.nan, values[nan]).astype(bits.dtype)
    return out


# --- the Triton engine under backend="auto": the kernel, once it has shown the CPU engine's bits here ----------
_VERIFIED: dict[Model, bool] = {}  # arithmetic model -> whether the kernel gave the numpy engine's bits here


def trial_inputs(model: Model, m: int = 40, k: int | None = None, n: int = 24,
                 seed: int = 20) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A, B, C for a trial of ``model``: values of its formats over a wide exponent range with zeros of both
    signs, subnormals, infinities and NaN (where the formats have them) at a few per cent, k spanning two
    of the model's steps and a partial third (the plan's padding)."""
    m_ = model.arithmetic_model()
    if k is None:
        k = 2 * m_.step(m_.block_width or 1) + 3
    rng = np.random.default_rng(seed)

    def values(fmt: Any, shape: tuple[int, int]) -> np.ndarray:
        x = rng.standard_normal(shape) * np.exp2(rng.integers(-14, 14, shape))
        r = rng.random(shape)
        x = np.where(r < 0.08, x * fmt.smallest_normal * 2.0**-4, x)  # subnormals, or flushed later
        x = np.array(_formats.round(fmt, x, "rne"))
        x[(r > 0.10) & (r < 0.15)] = 0.0
        if fmt.has_negative_zero:
            x[(r > 0.15) & (r < 0.18)] = -0.0
        if fmt.has_infinities:
            x[(r > 0.18) & (r < 0.19)] = np.inf
            x[(r > 0.19) & (r < 0.20)] = -np.inf
        x[(r > 0.20) & (r < 0.21)] = np.nan  # every format has a NaN (ieee, fn, fnuz)
        return x

    return (values(model.input_format, (m, k)), values(model.b_format, (k, n)), values(model.c_format, (m, n)))


def verified(model: Model) -> bool:
    """Whether the Triton kernel gives the numpy engine's bits for ``model`` on this machine: tried once per model and
    process on :func:`trial_inputs` (about 0.1 s after the compilation), as drawn (NaN and infinities: the paths that
    handle them) and with those made zeros (the fast paths that need finite operands: the grid path's rounding
    instruction).  A difference is reported once (RuntimeWarning with the first differing output) and the model then
    stays on the CPU engines; so a GPU or Triton version on which the kernel is wrong costs speed, never bits."""
    if model in _VERIFIED:
        return _VERIFIED[model]
    A, B, C = trial_inputs(model)
    p = make_plan(model, A.shape[1])
    finite = [np.where(np.isfinite(x), x, 0.0) for x in (A, B)]
    trials = [Operands.matrix(*flush_operands(model, *x)) for x in ((A, B, C), (*finite, C))]
    try:
        got = np.concatenate([_formats.bits(finish(p.model, engine("triton").run(p, ops)[0])) for ops in trials])
    except Exception as exc:  # noqa: BLE001 - a kernel that does not compile or launch on this GPU
        warnings.warn(f"backend='auto': the Triton kernel failed for {model.summary()} on this GPU "
                      f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); the CPU engines run "
                      "it", RuntimeWarning, stacklevel=3)
        _VERIFIED[model] = False
        return False
    want = np.concatenate([_formats.bits(finish(p.model, engine("numpy").run(p, ops)[0])) for ops in trials])
    bad = np.argwhere(got != want)  # (rows of the second trial follow the first's)
    if bad.size:
        i, j = (int(t) for t in bad[0])
        warnings.warn(f"backend='auto': the Triton kernel differs from the exact engines for {model.summary()} on "
                      f"this GPU ({len(bad)} of {got.size} trial outputs, first D[{i}, {j}]: bits {int(got[i, j]):#x} "
                      f"instead of {int(want[i, j]):#x}); the CPU engines run it; please report this with "
                      "blockfma's and Triton's versions", RuntimeWarning, stacklevel=3)
    _VERIFIED[model] = not bad.size
    return _VERIFIED[model]
