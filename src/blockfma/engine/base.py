"""What an engine is (:class:`Engine`) and what it is handed (:class:`Operands`, with the call's
:class:`blockfma.plan.Plan`); :mod:`.registry` lists the engines and chooses among them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ..plan import Plan

__all__ = ["Engine", "Operands", "Progress"]

Progress = Callable[[float], None] | None


@dataclass(frozen=True, eq=False)
class Operands:
    """The values of one call, checked, flushed and in the model's formats, as a batch of matrix products: ``a`` (batch,
    m, k), ``b`` (batch, k, n), ``c`` (batch, m, n); a block-scaled call's scales, one per scale block along K, ``sa``
    (batch, m, k / scale_block), ``sb`` (batch, k / scale_block, n).  A ``dot`` is ``rows`` products of m = n = 1
    (:meth:`rows`); ``gemm=True``: matrix products (``bf.gemm``: batch 1; the torch front's batched matmuls).  float64
    numpy arrays here; torch tensors of one device for the torch front (:attr:`finite` reads either)."""

    a: Any
    b: Any
    c: Any
    sa: Any = None
    sb: Any = None
    gemm: bool = False

    @classmethod
    def rows(cls, a: Any, b: Any, c: Any, sa: Any = None, sb: Any = None) -> Operands:
        """The operands of a dot: a, b (rows, k), c (rows,), scales (rows, k / scale_block)."""
        return cls(a[:, None, :], b[:, :, None], c[:, None, None], None if sa is None else sa[:, None, :],
                   None if sb is None else sb[:, :, None])

    @classmethod
    def matrix(cls, a: Any, b: Any, c: Any, sa: Any = None, sb: Any = None) -> Operands:
        """The operands of a gemm: a (m, k), b (k, n), c (m, n), scales (m, k / block) and (k / block, n)."""
        return cls(a[None], b[None], c[None], None if sa is None else sa[None], None if sb is None else sb[None],
                   gemm=True)

    @property
    def scaled(self) -> bool:
        return self.sa is not None

    @property
    def device(self) -> str | None:
        """Where the operands lie: None for numpy arrays (the host), else the tensors' device type
        (``"cuda"``, ``"cpu"``)."""
        return None if isinstance(self.a, np.ndarray) else str(self.a.device.type)

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """(batch, m, k, n)."""
        batch, m, k = self.a.shape
        return batch, m, k, self.b.shape[2]

    @property
    def work(self) -> int:
        """Products in the call."""
        batch, m, k, n = self.shape
        return batch * m * k * n

    @cached_property
    def finite(self) -> bool:
        """A, B and C hold no NaN or infinity (the scales may be NaN)."""
        return all(bool(x.isfinite().all()) if hasattr(x, "isfinite") else bool(np.isfinite(x).all())
                   for x in (self.a, self.b, self.c))


class Engine:
    """An engine: ``name`` (the backend name that asks for it, and what ``last_backend()`` reports), what it
    runs (:meth:`supports`), how ``backend="auto"`` sees it (:meth:`auto`), the error that refuses it by
    name (:meth:`refusal`), and :meth:`run`.  Subclass it, and add an instance to
    :data:`blockfma.engine.registry.ENGINES` where auto should try it."""

    name: str = ""
    fallback: str | None = None  # asked for by name but refused: the engine that runs the call instead
    tensors: bool = False  # runs operands that are torch tensors where they lie (else: numpy arrays only)

    def supports(self, p: Plan, ops: Operands | None) -> str | None:
        """None where the engine runs this call, else why not (a clause for the user).  ``ops=None`` asks
        about the model alone, for a dot whose values are not known yet (:func:`blockfma.check`)."""
        return None

    def auto(self, p: Plan, ops: Operands) -> str | None:
        """None where ``backend="auto"`` may take the engine for a call it :meth:`supports`, else why it
        passes it over (too small for a GPU, not verified, ...)."""
        return None

    def refusal(self, p: Plan, ops: Operands | None, why: str) -> Exception:
        """The error for ``backend=name`` on a call this engine does not run."""
        return ValueError(f"backend={self.name!r} does not run {p.model.summary()}: {why}; backend='auto' runs it")

    def run(self, p: Plan, ops: Operands, progress: Progress = None) -> np.ndarray | None:
        """float64 D (batch, m, n), or None where these inputs need the numpy engine after all."""
        raise NotImplementedError
