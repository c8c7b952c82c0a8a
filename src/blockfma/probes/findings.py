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

from ..arguments import choice, integer, memory
from ..devices import SCHEMA
from ..files import dumps, write_json
from ..model import Model
from ..progress import reporter
from . import targets
from .infer import DEFAULT_VERIFY, search
from .targets import FP16, FP32, target as _target

__all__ = ["Findings", "ProbeError", "probe", "MAX_VERIFY"]


class ProbeError(RuntimeError):
    """No verified Model: the message names the first counterexample."""


@dataclass(repr=False)
class Findings:
    """What a probe run found (see the module docstring).

    ``repr(findings)`` is one line (:meth:`summary`), ``print(findings)`` a short report (the summary, one line
    a stage, the checks, :meth:`__str__`); the whole evidence, every row in exact hex, is :meth:`to_json` (a
    dict) and :meth:`details` (its JSON text), which grow as k squared (about 140 kB at k = 4)."""

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

    def summary(self) -> str:
        """One line: target, formats, k, verified or not, the Model's summary (or the first counterexample's
        outputs), target calls and seconds."""
        head = f"{self.target}: {self.formats}, k={self.k}"
        tail = f"{self.calls} calls, {self.seconds:.1f} s"
        if self._model is not None:
            return f"{head}: verified on {self.verification[-1]['rows']} rows: {self._model.summary()} ({tail})"
        last = self.verification[-1] if self.verification else {}
        ce = last.get("first_counterexample") or {}
        first = f"; first: target {ce.get('target')}, model {ce.get('model')}" if ce else ""
        return (f"{head}: NOT verified ({last.get('mismatches', '?')} of {last.get('rows', '?')} rows differ"
                f"{first}) ({tail})")

    def __repr__(self) -> str:
        return f"<Findings {self.summary()}>"

    def __str__(self) -> str:
        """The summary, then one line a stage and a line a check (the evidence: :meth:`details`)."""
        lines = [self.summary()]
        for st in self.stages:
            chosen = ", ".join(f"{k}={v}" for k, v in st.get("chosen", {}).items())
            line = (f"  {st['stage']}: {st['candidates']} candidates, {st['consistent']} consistent, "
                    f"{st['after_separation']} after separation: {st['family']} {chosen}")
            lines.append(line if len(line) <= 160 else line[:157] + "...")
        for i, v in enumerate(self.verification, 1):
            chained = f" and {v['chained_rows']} chained rows of k = {v['chained_k']}" if "chained_rows" in v else ""
            lines.append(f"  check {i}: {v['rows']} rows ({v['adversarial']} adversarial){chained}, {v['mismatches']} "
                         "mismatches")
        if self.smt:
            lines.append(f"  smt: {len(self.smt)} separation(s) asked ({', '.join(e['answer'] for e in self.smt)})")
        lines.append(f"  {self.rows} rows in {self.calls} calls; every row and reading: .to_json() or .details()")
        return "\n".join(lines)

    def details(self) -> str:
        """Everything (:meth:`to_json`) as indented JSON text: every feature test's rows and readings in exact
        hex, the stages, the SMT separations, the checks (long: it grows as k squared)."""
        return dumps(self.to_json())

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
        out.update(calls=self.calls, rows=self.rows, seconds=round(self.seconds, 2))
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


#: the keywords of :func:`probe` itself (a misspelt one is refused with the closest of these)
PROBE_KEYWORDS = ("target", "input_format", "output_format", "k", "verify", "rounds", "priors", "seed", "instruction",
                  "c_format", "progress")
MAX_VERIFY = 10_000_000
"""The most rows a verification takes (10**7 rows of k = 4 take minutes); a larger ``verify`` is refused, and
one whose rows would not fit the memory available is refused with the size it would need."""


def probe(target: Any, input_format: Any = FP16, output_format: Any = FP32, k: int | None = None, *,
          verify: int = DEFAULT_VERIFY, rounds: int = 2, priors: str = "presets", seed: int | None = 0,
          instruction: str | None = None, c_format: Any = None,
          progress: bool | Callable[[str], None] | None = None, **options: Any) -> Findings:
    """Measure ``target`` through its outputs alone and infer its Model, verified in a closed loop.

    ``target``: ``"sim:H100"``, a devices file, a Model, a callable ``f(a, b, c) -> d`` (give ``k``), ``"cuda"``
    or ``"torch"`` (see :func:`blockfma.probes.targets.target`; ``options`` are that function's: ``allow_tf32``
    and ``reduced_precision_reduction`` for torch, nothing for the others).  ``k``: products a row, 1 to
    :data:`~blockfma.probes.targets.MAX_K` (default: the instruction's).  ``verify``: rows of each check (random
    and adversarial, 100 to :data:`MAX_VERIFY`); ``rounds``: repair rounds after a failed check, 0 to 100 (0: the
    first check decides), so at most ``rounds + 1`` checks; ``priors``: ``"presets"`` lets the presets that take these
    formats join the candidates, ``"none"`` infers from the generic families alone; ``seed``: of the generated
    rows (None: fresh entropy).  ``progress``: None (default) prints each stage on stderr where stderr is a
    terminal, True always, False never, or a function of one string (:mod:`blockfma.progress`).

    Every argument is checked before any work (:class:`~blockfma.arguments.ArgumentError` naming it, its value
    and the fix).  Timings: docs/probes.md, "Speed"."""
    kind = targets.kind_of(target)
    options = targets.check_options(kind, options, "probe", PROBE_KEYWORDS)
    priors = choice("priors", priors, ("presets", "none"))
    verify = integer("verify", verify, least=100, most=MAX_VERIFY)
    rounds = integer("rounds", rounds, least=0, most=100)
    seed = None if seed is None else integer("seed", seed, least=0)
    say = reporter(progress)
    k = targets.check_k(k)
    t = _target(target, input_format, output_format, k=k, instruction=instruction, c_format=c_format, **options)
    memory("verify", verify, targets.probe_bytes(t.k, verify, rounds), f"the probe's rows (k = {t.k}, "
           f"verify = {verify})", fix="pass a smaller verify (or k)")
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
