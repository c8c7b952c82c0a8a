"""A survey of ``torch.matmul``'s summation order over K (FPRev's probes, :mod:`blockfma.probes.order`):
every dtype, matmul switch, K and GEMM shape, each recovered tree verified against the target, with fp32
additions and, on a GPU that names a blockfma preset, with the preset's tensor-core blocks.

    >>> survey = torch_orders("cpu", sizes=(32,), dtypes=("fp32",), shapes=((16, 16),), trials=50)
    >>> survey["runs"][0]["kind"]
    'sequential'

The records of the H100 are in ``data/hardware/h100-torch-order.json.gz``; ``docs/probes-order.md`` lists
what was found.
"""

from __future__ import annotations

import re
import time
from typing import Any, Sequence

from ..devices import device as _device
from ..probes.order import OrderError, block_op, infer_order, torch_matmul_target, verify
from ..probes.runtime import import_torch

__all__ = ["torch_orders"]


def _preset_for(name: str) -> Any:
    """The blockfma preset whose name appears in a GPU's name ('NVIDIA H100 80GB HBM3' -> H100), or None."""
    for token in re.split(r"[\s_-]+", name):
        try:
            return _device(token)
        except (KeyError, ValueError):
            continue
    return None


def torch_orders(device: str = "cuda", *, sizes: Sequence[int] = (64, 256, 1024),
                 dtypes: Sequence[str] = ("fp16", "bf16", "fp32"),
                 shapes: Sequence[tuple[int, int]] = ((16, 16), (128, 128), (1024, 1024)),
                 switches: Sequence[bool | None] | None = None, trials: int = 1000,
                 preset: str | None = None) -> dict[str, Any]:
    """Infer and verify the order of ``torch.matmul`` over K for every dtype, switch setting, K in
    ``sizes`` and GEMM shape (m, n_cols) in ``shapes``; returns a JSON-able dict with the environment.

    The switch is ``allow_reduced_precision_reduction`` for fp16/bf16 and ``allow_tf32`` for fp32 (``switches``: default
    both ways on CUDA, torch's setting on the CPU).  Each recovered tree is held to the target on ``trials`` random rows
    with fp32 additions per node and, on a GPU whose name names a blockfma preset (or ``preset``), with the preset's
    tensor-core blocks (:func:`block_op`).  A configuration that fits no tree records the error instead.
    """
    torch = import_torch("torch_orders")
    on_gpu = str(device).startswith("cuda")
    env: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": str(device)}
    model_source = None
    if on_gpu and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.device(device))
        env.update(gpu=props.name, capability=f"{props.major}.{props.minor}")
        model_source = _device(preset) if preset else _preset_for(props.name)
        env["preset"] = model_source.name if model_source is not None else None
    runs = []
    for dtype in dtypes:
        for switch in (switches if switches is not None else ((False, True) if on_gpu else (None,))):
            for n in sizes:
                for m, n_cols in shapes:
                    key = "allow_tf32" if dtype == "fp32" else "allow_reduced_precision_reduction"
                    rec: dict[str, Any] = {"dtype": dtype, key: switch, "n": n, "m": m, "n_cols": n_cols}
                    start = time.perf_counter()
                    try:
                        target = torch_matmul_target(n, dtype, device, m=m, n_cols=n_cols, **{key: switch})
                        found = infer_order(target)
                        rec.update(found.to_dict(), seconds=round(time.perf_counter() - start, 3))
                        rec["verify_fp32"] = verify(found.tree, target, trials=trials, node="fp32").to_dict()
                        if model_source is not None and target.input_format.name != "fp32":
                            model = model_source.model(target.input_format.name, "fp32")
                            try:
                                op = block_op(model, target.scale, "fp32", backend="numpy")
                                rec["verify_preset"] = {"model": model.name, **verify(
                                    found.tree, target, trials=trials, node=op).to_dict()}
                            except ValueError as exc:
                                rec["verify_preset"] = {"model": model.name, "error": str(exc)}
                    except (OrderError, ValueError) as exc:
                        rec.update(error=str(exc), seconds=round(time.perf_counter() - start, 3))
                    runs.append(rec)
    return {"environment": env, "runs": runs}
