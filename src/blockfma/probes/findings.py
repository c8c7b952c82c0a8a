"""Findings of one probe run: the feature-table row, the verified Model, a device record, the evidence.

:func:`probe` is the public entry point (``bf.probe``).  A :class:`Findings` holds what the target showed
(each feature test's reading and its rows in exact hex), how the search went, the verification, and the
Model, but only if it passed verification: :meth:`Findings.model` raises otherwise.  :meth:`record` writes
the result as a ``blockfma-devices/1`` file, so ``bf.device("record.json")`` and every command take it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..devices import SCHEMA
from ..files import write_json
from ..model import Model
from .infer import DEFAULT_VERIFY, search, stderr_progress
from .targets import target as _target

__all__ = ["Findings", "ProbeError", "probe"]


class ProbeError(RuntimeError):
    """No verified Model: the message names the first counterexample."""


@dataclass
class Findings:
    """What a probe run found (see the module docstring)."""

    target: str
    formats: str
    k: int
    metadata: dict[str, Any]
    verified: bool
    candidate: dict[str, Any] | None  # the last Model tried, as a dict (also when it failed)
    verification: list[dict[str, Any]]
    stages: list[dict[str, Any]]
    readings: dict[str, Any]
    observations: dict[str, list[dict[str, str]]]
    calls: int
    rows: int
    seconds: float
    target_seconds: float
    smt: list[dict[str, Any]] = field(default_factory=list)  # SMT separations (pairs, answers, seconds)
    _model: Model | None = field(default=None, repr=False)

    def model(self) -> Model:
        """The inferred Model; raises :class:`ProbeError` when it failed verification."""
        if self._model is None:
            last = self.verification[-1] if self.verification else {}
            ce = last.get("first_counterexample")
            raise ProbeError(f"{self.target}: no Model passed verification ({last.get('mismatches', '?')} of "
                             f"{last.get('rows', '?')} rows differ" + (f"; first: {ce}" if ce else "") + ")")
        return self._model

    def row(self) -> dict[str, Any]:
        """One row of the cross-device feature table (FTTN's Table IV with more columns)."""
        out: dict[str, Any] = {"target": self.target, "pair": self.formats, "k": self.k, "verified": self.verified}
        if self._model is not None:
            f = self._model.features()
            out.update({key: f.get(key) for key in ("family", "L", "F", "e_zero", "alignment", "output_rounding",
                                                    "subnormals", "nan", "carry_bits", "c_entry")})
        sub = self.readings.get("subnormals", {})
        out["subnormal inputs"] = sub.get("subnormal inputs kept (T_si_no)")
        out["subnormal outputs"] = sub.get("subnormal outputs (T_ni_so)")
        out["products exact"] = self.readings.get("products", {}).get("products exact")
        out["calls"] = self.calls
        out["rows"] = self.rows
        out["seconds"] = round(self.seconds, 2)
        return out

    def record(self, name: str | None = None) -> dict[str, Any]:
        """A ``blockfma-devices/1`` document holding the measured device (verified runs only)."""
        m = self.model()
        label = name or f"probed {self.target}"
        ins_name = self.metadata.get("instruction") or self.target
        model = m.replace(name=f"{label} {self.formats}").to_dict()
        dev = {"name": label, "vendor": "measured", "arch": self.metadata.get("gpu", self.target),
               "confidence": "measured", "sources": [], "measured": {
                   **{k: v for k, v in self.metadata.items() if k != "model"},
                   "verification": self.verification[-1], "calls": self.calls, "rows": self.rows},
               "notes": f"Inferred by blockfma.probe from {self.target} and verified on "
                        f"{self.verification[-1]['rows']} rows with no mismatch.",
               "instructions": [{"name": str(ins_name), "k": {m.input_name: self.k}, "models": [model]}]}
        return {"schema": SCHEMA, "devices": [dev]}

    def save(self, path: str | os.PathLike, name: str | None = None) -> Path | None:
        """Write :meth:`record` (verified runs) or :meth:`to_json` (failed runs) atomically through
        :func:`blockfma.files.write_json`: a regular file (a symbolic link is followed), in a folder that
        exists, or ``"-"`` for standard output (then None is returned, else the path)."""
        return write_json(path, self.record(name) if self.verified else self.to_json())

    def to_json(self) -> dict[str, Any]:
        """Everything, as plain values."""
        return {"target": self.target, "formats": self.formats, "k": self.k, "metadata": self.metadata,
                "verified": self.verified, "model": self.candidate, "verification": self.verification,
                "stages": self.stages, "readings": self.readings, "observations": self.observations,
                "calls": self.calls, "rows": self.rows, "seconds": self.seconds,
                "target_seconds": self.target_seconds, "smt": self.smt, "row": self.row()}


def probe(target: Any, input_format: Any = "fp16", output_format: Any = "fp32", k: int | None = None, *,
          verify: int = DEFAULT_VERIFY, rounds: int = 3, priors: str = "presets", seed: int = 0,
          instruction: str | None = None, c_format: Any = None,
          progress: bool | Callable[[str], None] = False, **options: Any) -> Findings:
    """Measure ``target`` through its outputs alone and infer its Model, verified in a closed loop.

    ``target``: ``"sim:H100"``, a Model, a callable ``f(a, b, c) -> d`` (give ``k``), ``"cuda"`` or
    ``"torch"`` (see :func:`blockfma.probes.targets.target`).  ``verify``: rows of the final check (random
    and adversarial); ``rounds``: repair rounds after a failed check; ``priors``: ``"presets"`` lets the
    presets that take these formats join the candidates, ``"none"`` infers from the generic families alone.
    ``progress``: True prints each stage on stderr (or pass a function of one string).
    """
    if priors not in ("presets", "none"):
        raise ValueError(f"priors must be 'presets' or 'none', not {priors!r}")
    if not isinstance(verify, int) or verify < 100:
        raise ValueError(f"verify must be an integer of at least 100 rows, not {verify!r}")
    t = _target(target, input_format, output_format, k=k, instruction=instruction, c_format=c_format, **options)
    say = stderr_progress if progress is True else (progress or None)
    if say:
        say(f"probe {t.name}: {t.describe_formats()}, k={t.k}")
    t0 = time.perf_counter()
    model, s, ver = search(t, verify=verify, rounds=rounds, priors=priors, seed=seed, progress=say)
    last = s.best if model is None else model
    return Findings(target=t.name, formats=t.describe_formats(), k=t.k, metadata=t.metadata(),
                    verified=model is not None, candidate=last.to_dict() if last is not None else None,
                    verification=ver, stages=s.log.stages, readings=s.log.readings,
                    observations=s.log.observations, calls=t.calls, rows=t.rows,
                    seconds=time.perf_counter() - t0, target_seconds=t.seconds, smt=s.log.smt, _model=model)
