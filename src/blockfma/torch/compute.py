"""How ``bf.torch.emulate`` computes one routed GEMM (:meth:`blockfma.torch.Emulation.gemm` picks the function),
and the tensors' values to host arrays and back with their bits unchanged (:func:`to_numpy`, :func:`from_numpy`,
NaN codes and zero signs finished as ``bf.gemm`` finishes them by :func:`finish`)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np
import torch

from .. import formats as _formats
from ..engine import gemm
from ..engine.api import finish as _finish, gemms
from ..engine.tensors import to_host as to_numpy  # a tensor's values on the host, bits unchanged
from ..formats import RoundingMode
from ..model import Model
from .routes import DTYPES, Route

__all__ = ["host", "on_device", "split_k", "block_scaled", "to_numpy", "from_numpy", "finish", "pow2_scale"]


def host(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | None, route: Route, backend: str) -> torch.Tensor:
    """D = A @ B + C on the host with ``backend``: a 2-D call is one ``bf.gemm``, a batched one one engine call over the
    batch (:func:`blockfma.engine.api.gemms`, each slice as ``bf.gemm`` computes it).  Scaled routes scale each operand
    as a whole; stored ones round the model's result into the dtype and add C after."""
    assert route.model is not None
    out_dtype = a.dtype if route.dtype in DTYPES else DTYPES[route.model.output_format.name]
    A, B = to_numpy(a), to_numpy(b)
    Cn = None if c is None else to_numpy(c)
    ea = eb = 0
    if route.scaled:
        mdl = route.model
        A64, B64 = _formats.from_numpy(A), _formats.from_numpy(B)
        ea, eb = pow2_scale(A64, mdl.input_format), pow2_scale(B64, mdl.b_format)
        A = _formats.round(mdl.input_format, np.ldexp(A64, ea), RoundingMode.TiesToEven)
        B = _formats.round(mdl.b_format, np.ldexp(B64, eb), RoundingMode.TiesToEven)
    D = _product(A, B, None if route.stored else Cn, route, backend)
    if route.stored:
        fmt = _formats.get(route.dtype)
        with np.errstate(invalid="ignore", over="ignore"):
            D64 = _formats.round(fmt, np.ldexp(_formats.from_numpy(D), -(ea + eb)), RoundingMode.TiesToEven)
            if Cn is not None:  # one IEEE addition in the dtype (float64 holds the sum or rounds innocuously)
                D64 = _formats.round(fmt, D64 + _formats.from_numpy(Cn), RoundingMode.TiesToEven)
        D = _formats.to_numpy(fmt, D64, check=False)
    return from_numpy(D, out_dtype, a.device)


def _product(A: np.ndarray, B: np.ndarray, C: np.ndarray | None, route: Route, backend: str) -> np.ndarray:
    """The model's D = A @ B + C in its output format, batch axes equal."""
    model, rnd = route.model, route.round_inputs
    if A.ndim == 2:
        return gemm(A, B, C, model=model, round_inputs=rnd, backend=backend)
    (m, k), n = A.shape[-2:], B.shape[-1]
    D = gemms(A.reshape(-1, m, k), B.reshape(-1, k, n), None if C is None else C.reshape(-1, m, n), model=model,
              round_inputs=rnd, backend=backend)
    return D.reshape(A.shape[:-2] + (m, n))


def pow2_scale(x: np.ndarray, fmt: _formats.Format) -> int:
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


def on_device(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | None, route: Route) -> torch.Tensor:
    """The GEMM on the tensors' device by the Triton kernel, slice by slice over batch axes; the float32
    results finished as ``bf.gemm`` finishes them (:func:`finish`).  A GEMM that cannot fit the
    device's free memory is refused first (``bf.engine.triton.check_fits``)."""
    from ..engine import tensors, triton as tr

    assert route.model is not None
    model = route.model.arithmetic_model()
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    lead = tuple(a.shape[:-2])
    tr.check_fits(m * max(1, int(np.prod(lead))), k, n, a.device)
    A, B = a.detach().to(torch.float32), b.detach().to(torch.float32)  # exact: values of <= 24 bits
    C = torch.zeros((1, 1), dtype=torch.float32, device=a.device).expand(lead + (m, n)) if c is None else \
        c.detach().to(torch.float32)  # no C: a zero read with strides 0 (no pass over D)
    if lead:
        D = torch.empty(lead + (m, n), dtype=torch.float32, device=a.device)
        for idx in np.ndindex(*lead):
            D[idx] = tr.gemm_tensors(model, A[idx], B[idx], C[idx])
    else:
        D = tr.gemm_tensors(model, A, B, C)  # as it comes: no copy
    out = a.dtype if route.dtype in DTYPES else DTYPES[model.output_format.name]
    done = tensors.finish(model, D) if str(out) == f"torch.{tensors.DTYPES.get(model.output_format.name)}" else None
    return finish(model, D, out) if done is None else done  # on the device without a read back where it can


def split_k(whole_k: Callable[..., torch.Tensor], a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | None,
            route: Route, parts: int, tile: int = 1) -> torch.Tensor:
    """K cut into ``parts`` contiguous runs of ``tile``-wide k-tiles (ceil(T / parts) tiles each, T = ceil(k /
    tile); a run past K is empty, +0), each run summed from +0 into fp32 by the model's fp32 form (its output, or
    its fp32 accumulator's sum before it is stored: ``whole_k(a, b, None, ...)``), the partial sums added one
    after the other in binary32 (nearest even); then the route's epilogue: an fp32 result adds C in binary32, an
    fp16/bf16 one stores the sum in its dtype (nearest even) and adds C there (one IEEE addition, as cuBLAS's
    beta * C); NaN codes by the model (:func:`finish`)."""
    model = route.model
    assert model is not None
    if model.accumulator_format is not None:  # c_entry "end" (routes.with_split): the sum before it is stored
        model = model.replace(output_format=model.accumulator_format.name, accumulator_format=None, name=None)
    whole = dataclasses.replace(route, dtype="fp32 partial sums", model=model, stored=False)
    tiles = -(-a.shape[-1] // tile)
    size = -(-tiles // parts) * tile
    total = whole_k(a[..., :size], b[..., :size, :], None, whole)
    for s in range(size, size * parts, size):
        total = total + whole_k(a[..., s:s + size], b[..., s:s + size, :], None, whole)
    out = a.dtype if route.dtype in DTYPES else torch.float32
    total = total.to(out)  # fp16/bf16: the fp32 sum stored (nearest even)
    if c is not None:
        total = total + c.to(out)
    return finish(route.model, total.to(torch.float32), out, computed=False)


def block_scaled(a: np.ndarray, b: np.ndarray, scale_a: np.ndarray, scale_b: np.ndarray, route: Route,
                 backend: str, device: torch.device) -> torch.Tensor:
    """The fp32 product of block-scaled operands (host values, ``scale_a`` (m, K // block), ``scale_b``
    (K // block, n)) by the route's model through ``bf.gemm``, as a tensor on ``device``."""
    product = gemm(a, b, model=route.model, scale_a=scale_a, scale_b=scale_b, scale_layout="kn", backend=backend)
    return torch.from_numpy(np.asarray(product, dtype=np.float32)).to(device)


def from_numpy(x: np.ndarray, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """numpy values of the dtype's format (float16, float32, ml_dtypes bfloat16) as a tensor, bits unchanged."""
    x = np.ascontiguousarray(x)
    if dtype == torch.bfloat16:
        out = torch.from_numpy(x.view(np.int16).copy()).view(torch.bfloat16)
    else:
        out = torch.from_numpy(x.astype(np.dtype(str(dtype).removeprefix("torch.")), copy=True))
    return out.to(device)


def finish(model: Model, d: torch.Tensor, dtype: torch.dtype, *, computed: bool = True) -> torch.Tensor:
    """float32 results of ``model``'s output format (``d``, on any device) as a tensor of ``dtype`` there,
    the NaNs and -0s finished by :func:`blockfma.engine.api.finish` (only those entries visit the host)."""
    out = d.to(dtype)  # exact: the values are in the format already; NaNs and -0s are rewritten below
    special = torch.isnan(d) | ((d == 0) & torch.signbit(d))
    if bool(special.any()):
        idx = special.nonzero(as_tuple=True)
        done = _finish(model, d[idx].double().cpu().numpy(), computed=computed)
        out = out.clone() if out.data_ptr() == d.data_ptr() else out
        out[idx] = from_numpy(done, dtype, d.device)
    return out
