"""Plain-text tables and JSON-ready rows: the cross-device report (``blockfma report``), its data gathered.

The sections are :func:`sections`' (docs/cli.md, "The report").  The row functions take presets (or
names) and return rows (lists of dicts of plain values) or text; :func:`sections` assembles
:class:`Section` objects, :func:`as_text` and :func:`as_json` (with :func:`provenance`) render them, and
:mod:`blockfma.report_html` renders the same JSON as one self-contained page.  Writing files (:func:`write_json`,
:func:`dumps`, :func:`atomic_path`) lives in :mod:`blockfma.files`, re-exported here.

    >>> from blockfma import report
    >>> print(report.table([{"device": "V100", "D": 0.0}], ["device", "D"]))
    device    D
    ------  ---
    V100    0.0
"""

from __future__ import annotations

import textwrap
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from . import __version__
from .devices import Device, device as _device, devices as _devices, open_questions as _questions
from .experiments import fttn as _fttn
from .files import atomic_path, dumps, write_json  # noqa: F401 (re-exported: their home is blockfma.files)
from .arguments import ArgumentError
from .progress import reporter

__all__ = ["table", "hardware", "feature_rows", "fttn_rows", "confidence_rows", "probe_rows", "verdict_rows",
           "verdict_lines", "discriminate_rows", "provenance", "Section", "sections", "report", "as_text", "as_json",
           "dumps", "write_json", "FEATURE_COLUMNS", "FTTN_COLUMNS", "CONFIDENCE_COLUMNS", "PROBE_COLUMNS",
           "VERDICT_COLUMNS", "DISCRIMINATE_COLUMNS", "NEIGHBOURS"]

DATA_PATH = "formats -> Model -> engine (bit-exact simulation) -> devices (presets with sources) -> report"

FEATURE_COLUMNS = ["device", "instruction", "pair", "family", "L", "F", "e_zero", "alignment", "rounding",
                   "subnormals", "nan", "confidence", "sources"]
FTTN_COLUMNS = ["device", "D_fp16", "D_bf16", "FTTN", "match"]
CONFIDENCE_COLUMNS = ["device", "confidence", "sources", "why"]
QUESTION_COLUMNS = ["question", "devices", "variant"]  # the rows also carry preset, other reading, to settle


# --- tables ----------------------------------------------------------------------------------------------
def cell(value: Any) -> str:
    """A value as a table cell's text: - for None, yes/no, repr of floats, lists joined with commas."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value))
    return str(value)


def _numeric(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def table(rows: Sequence[dict[str, Any]], columns: Sequence[str], *, group: Sequence[str] = ()) -> str:
    """Rows as an aligned plain-text table with a header and a rule; numbers right-aligned, missing
    values as '-', booleans as yes/no, lists joined with commas.  Cells of the ``group`` columns are left
    blank where a row repeats the previous row's values in all of them (one device's rows read as a block).
    """
    cells = [[cell(row.get(c)) for c in columns] for row in rows]
    for i in range(len(rows) - 1, 0, -1):
        if group and all(rows[i].get(g) == rows[i - 1].get(g) for g in group):
            cells[i] = ["" if c in group else v for c, v in zip(columns, cells[i])]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    right = [bool(rows) and all(_numeric(row.get(c)) or row.get(c) is None for row in rows) for c in columns]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right)]
        return "  ".join(parts).rstrip()

    out = [line(list(columns)), line(["-" * w for w in widths])]
    out += [line(r) for r in cells]
    return "\n".join(out)


# --- rows --------------------------------------------------------------------------------------------------
def resolve(devs: Iterable[str | Device] | None, default: list[Device]) -> list[Device]:
    if devs is None:
        return default
    out: list[Device] = []
    for d in devs:
        dev = _device(d)
        if dev not in out:
            out.append(dev)
    return out


def hardware() -> list[Device]:
    """Every preset but the CPU references (``exact``, ``ieee-sequential``), variants included."""
    return [d for d in _devices() if d.vendor != "reference"]


def feature_rows(devices: Iterable[str | Device] | None = None) -> list[dict[str, Any]]:
    """One row per (device, format pair, model): the model's features, the instruction(s) that use it,
    the preset's confidence and source keys.  Instructions of one device that share a model share a row
    ("mma, wgmma").  Default: the hardware presets (see :func:`hardware`)."""
    rows: list[dict[str, Any]] = []
    for dev in resolve(devices, hardware()):
        seen: dict[tuple, dict[str, Any]] = {}
        for ins in dev.instructions:
            for (inp, out), m in ins.models.items():
                key = (inp, out, m)
                if key in seen:
                    seen[key]["instruction"] += f", {ins.name}"
                    continue
                f = m.features()
                rounding = f["output_rounding"]
                if f["output_fraction_bits"] is not None:
                    rounding += f"@{f['output_fraction_bits']}b"
                if f["accumulator"] is not None:
                    rounding = f"{rounding} via {f['accumulator']}, then RNE"
                family = f["family"] + ({"after": ", C after", "end": ", C at the end"}.get(f["c_entry"], "")) + (
                    ", common cut" if f["late_cut"] == "common" else "")
                row = {
                    "device": dev.name, "instruction": ins.name, "pair": f"{inp}->{out}",
                    "family": family, "L": f["L"], "F": f["F"], "e_zero": f["e_zero"],
                    "alignment": f["alignment"], "rounding": rounding, "subnormals": f["subnormals"],
                    "nan": f["nan"], "confidence": dev.confidence, "sources": list(dev.sources),
                    "output_rounding": f["output_rounding"], "output_fraction_bits": f["output_fraction_bits"],
                    "summary": m.summary(),
                }
                seen[key] = row
                rows.append(row)
    return rows


@lru_cache(maxsize=None)
def _fttn_d(name: str, input_format: str) -> float:
    return _fttn.run(name, input_format=input_format)


def _takes(dev: Device, inp: str) -> bool:
    return (inp, "fp32") in dev.pairs()


def fttn_rows(devices: Iterable[str | Device] | None = None,
              inputs: Sequence[str] = ("fp16", "bf16")) -> list[dict[str, Any]]:
    """FTTN's porting GEMM (:mod:`blockfma.experiments.fttn`) on every preset with an fp16->fp32 model: D for each input
    format in ``inputs`` the preset takes (``D_fp16``, ``D_bf16``; None where it does not), FTTN's published value where
    FTTN measured the device (a variant shows the value of the device it reads), and whether the fp16 value matches it.
    Each D is a full K = 8192 chain, computed once per process (cached; about a second for every preset)."""
    inputs = _fttn_inputs(inputs)
    rows: list[dict[str, Any]] = []
    for dev in resolve(devices, _devices()):
        if not _takes(dev, "fp16"):
            continue
        row: dict[str, Any] = {"device": dev.name}
        for inp in ("fp16", "bf16"):
            row[f"D_{inp}"] = _fttn_d(dev.name, inp) if inp in inputs and _takes(dev, inp) else None
        published = _fttn.PUBLISHED.get(dev.name, _fttn.PUBLISHED.get(dev.variant_of or ""))
        row["FTTN"] = published
        row["match"] = None if published is None or row["D_fp16"] is None else row["D_fp16"] == published
        rows.append(row)
    return rows


def _fttn_inputs(inputs: Any) -> tuple[str, ...]:
    """The FTTN GEMM's input formats, checked: fp16 and/or bf16 (by any name :func:`blockfma.formats.get`
    knows; a sequence, or one string with commas: "fp16,bf16"), at least one; any other format would leave
    its column silently empty."""
    from . import formats as _formats

    listed = inputs.split(",") if isinstance(inputs, str) else inputs
    try:
        names = [_formats.get(f.strip() if isinstance(f, str) else f).name for f in listed]
    except (TypeError, ValueError, KeyError):
        names = None
    if not names or any(n not in ("fp16", "bf16") for n in names):
        raise ArgumentError("fttn_inputs", inputs, "FTTN's GEMM runs on fp16 and bf16 inputs only",
                            use={"fttn_inputs": "fp16,bf16"})
    return tuple(dict.fromkeys(names))


def confidence_rows(devices: Iterable[str | Device] | None = None) -> list[dict[str, Any]]:
    """Presets to read with care: those resting on one source, on vendor manuals only
    (``specification_only``), or with confidence below high.  Default: the hardware presets."""
    rows = []
    for dev in resolve(devices, hardware()):
        why = []
        if dev.specification_only:
            why.append("vendor manual only, no hardware study")
        if len(dev.sources) == 1 and not dev.specification_only:
            why.append("one source")
        if dev.variant_of:
            why.append(f"variant of {dev.variant_of}")
        if dev.confidence != "high" and not why:
            why.append(f"confidence {dev.confidence}: see blockfma devices {dev.name!r}")
        if why:
            rows.append({"device": dev.name, "confidence": dev.confidence, "sources": list(dev.sources),
                         "why": "; ".join(why)})
    return rows


# --- the report --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Section:
    """One part of the report: a titled table with an introduction and notes."""

    key: str
    title: str
    columns: list[str]
    rows: list[dict[str, Any]]
    intro: str = ""
    notes: tuple[str, ...] = field(default=())
    group: tuple[str, ...] = field(default=())  # columns shown once per block of equal rows
    details: list[dict[str, Any]] = field(default_factory=list)  # finer rows (JSON and HTML only)

    def text(self) -> str:
        parts = [self.title, "=" * len(self.title)]
        if self.intro:
            parts.append(textwrap.fill(self.intro, 100))
        parts.append(table(self.rows, self.columns, group=self.group) if self.rows else "(none)")
        parts.extend(textwrap.fill(n, 100) for n in self.notes)
        return "\n".join(parts)

    def to_json(self) -> dict[str, Any]:
        out = {"title": self.title, "intro": self.intro, "columns": list(self.columns),
               "rows": self.rows, "notes": list(self.notes)}
        if self.details:
            out["details"] = self.details
        return out


def question_rows(devices: Iterable[str | Device] | None = None) -> list[dict[str, Any]]:
    """The open questions of these devices (default: every hardware preset), one row each; settled ones
    are left out (``blockfma devices NAME`` shows them with their evidence)."""
    names = {d.name for d in resolve(devices, hardware())}
    rows = []
    for q in _questions(settled=False):
        shown = [d for d in q.devices if d in names]
        if shown:
            rows.append({"question": q.id, "text": q.question, "devices": shown, "preset": q.preset,
                         "other reading": q.other,
                         "variant": q.variant(shown[0]).replace(shown[0], "<device>") if q.change else "not yet",
                         "to settle": q.settle})
    return rows


#: presets the report probes as black boxes (one or two per family), with the pair and instruction (H100 fp8: wgmma,
#: some seconds; its mma.sync reading, two fp16 HMMAs, takes a minute to probe and the verdict replays its record)
PROBED = (("V100", "fp16", "fp32", None), ("A100", "bf16", "fp32", None), ("H100", "fp16", "fp16", None),
          ("H100", "e4m3fn", "fp32", None), ("B200", "e5m2", "fp32", None),
          ("MI100", "fp16", "fp32", None), ("MI250X", "bf16", "fp32", None), ("MI300X", "fp16", "fp32", None),
          ("Intel AMX", "bf16", "fp32", None), ("Arm BFDOT", "bf16", "fp32", None))
PROBE_COLUMNS = ["target", "pair", "k", "verified", "family", "L", "F", "e_zero", "rounding", "same as preset",
                 "calls", "rows", "seconds"]


def probe_row(spec: str, inp: str, out: str, preset: tuple | None, verify: int = 2000) -> dict[str, Any]:
    """One probe of :func:`probe_rows` (``preset``: (device, input, output, instruction) whose bits the inferred
    model should give, or None), as a row of :data:`PROBE_COLUMNS` plus ``summary``, the model found."""
    from .probes import probe
    from .probes.infer import disagreements

    f = probe(spec, inp, out, verify=verify, priors="none", progress=False)
    found = f.row()
    row = {k: v for k, v in found.items() if k in PROBE_COLUMNS}
    row["rounding"] = found.get("output_rounding")
    model = None
    if preset is not None:
        name, pi, po, ins = preset
        model = _device(name).model(pi, po, ins) if ins else _device(name).model(pi, po)
    row["same as preset"] = (disagreements(f.model(), model, 3 * f.k, 2000, seed=1) == 0
                             if f.verified and model is not None else None)
    row["summary"] = f.model().summary() if f.verified else "no model verified"
    return row


_SLOW = ("sim:A100", "sim:Intel AMX", "sim:B200", "sim:H100")  # the probes that take longest


@lru_cache(maxsize=None)
def _source_hash() -> str:
    """A hash of this package's code and preset data, and of numpy's version."""
    import hashlib
    from pathlib import Path

    import numpy

    here, h = Path(__file__).parent, hashlib.sha256(numpy.__version__.encode())
    for f in sorted(p for p in here.rglob("*") if p.suffix in (".py", ".json")):
        h.update(f.relative_to(here).as_posix().encode() + f.read_bytes())
    return h.hexdigest()


def _probe_cache(job: tuple, verify: int, row: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """A simulated target's probe row kept on disk (a probe is seeded: its row is a function of the code, the
    presets, the versions and the job alone) in $BLOCKFMA_CACHE (default ~/.cache/blockfma; off: none):
    read (None where absent or unreadable), or written where ``row`` is given."""
    import hashlib
    import json
    import os
    from pathlib import Path

    folder = os.environ.get("BLOCKFMA_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache",
                                                      "blockfma")
    if folder == "off" or not job[0].startswith("sim:"):
        return None
    path = Path(folder, f"probe-{hashlib.sha256(repr((_source_hash(), job, verify)).encode()).hexdigest()[:24]}.json")
    try:
        if row is None:
            return found if isinstance(found := json.loads(path.read_text()), dict) else None
        write_json(path, row, parents=True)
    except (OSError, ValueError):  # absent, unreadable or not writable: probe again
        pass
    return None


def _quiet_worker() -> None:
    """Probe workers leave Ctrl-C to the parent, which ends them (no traceback from each)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


class _ProbeRun:
    """The probes of :data:`PROBED` (of ``devices``; with ``gpu``, this GPU's too): those the cache holds read
    from it (:func:`_probe_cache`), the other simulated ones started at once in ``workers`` spawned processes
    (so that the rest of the report runs beside them), a GPU's in this process when :meth:`rows` is called."""

    def __init__(self, devices: Iterable[str | Device] | None, verify: int, gpu: bool, workers: int | None,
                 say: Any) -> None:
        import os
        import queue

        from .probes import cuda

        names = None if devices is None else {d.name for d in resolve(devices, [])}
        jobs = [(f"sim:{n}" + (f":{ins}" if ins else ""), inp, out, (n, inp, out, ins)) for n, inp, out, ins in PROBED
                if names is None or n in names] + ([("cuda", "fp16", "fp32", None)] if gpu and cuda.available() else [])
        workers = min(2, os.cpu_count() or 1) if workers is None else workers
        self.jobs, self.verify, self.say = jobs, verify, say or (lambda line: None)
        self.done: queue.Queue = queue.Queue()
        self.pool = None
        self.cached = {i: row for i, j in enumerate(jobs) if (row := _probe_cache(j, verify)) is not None}
        self.remote = [i for i, j in enumerate(jobs) if j[0] != "cuda" and i not in self.cached] if workers > 1 else []
        if len(self.remote) > 1:
            import multiprocessing

            n = min(workers, len(self.remote))
            self.say(f"report: probing {len(self.remote)} targets, {n} at a time in worker processes ...")
            ctx = multiprocessing.get_context("spawn")
            self.pool = ctx.Pool(n, initializer=_quiet_worker)
            for i in sorted(self.remote, key=lambda i: jobs[i][0] not in _SLOW):  # the longest first
                self.pool.apply_async(probe_row, (*jobs[i], verify),
                                      callback=lambda row, i=i: self.done.put((i, row, None)),
                                      error_callback=lambda exc, i=i: self.done.put((i, None, exc)))
        else:
            self.remote = []

    def close(self) -> None:
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()
            self.pool = None

    def _said(self, i: int, out: list[Any]) -> None:
        """Row ``i`` done: kept in the cache (where it was not read from it) and named in a progress line."""
        if i not in self.cached:
            _probe_cache(self.jobs[i], self.verify, out[i])
        spec, inp, fmt, _ = self.jobs[i]
        took = "cached" if i in self.cached else f"{out[i]['seconds']:.1f} s"
        self.say(f"probed {spec} {inp}->{fmt} ({sum(r is not None for r in out)} of {len(self.jobs)}): "
                 f"{out[i]['summary']} ({took})")

    def rows(self) -> list[dict[str, Any]]:
        """Every job's row, in the jobs' order; a progress line as each ends, and every 30 s of waiting."""
        import queue

        out: list[Any] = [None] * len(self.jobs)
        try:
            for i, row in self.cached.items():
                out[i] = row
                self._said(i, out)
            while any(out[i] is None for i in self.remote):
                try:
                    i, out[i], exc = self.done.get(timeout=30)
                except queue.Empty:
                    left = [" ".join(self.jobs[j][:2]) for j in self.remote if out[j] is None]
                    self.say(f"probes not done yet: {', '.join(left)}")
                    continue
                if exc is not None:
                    raise exc
                self._said(i, out)
            for i, job in enumerate(self.jobs):
                if out[i] is None:
                    self.say(f"probing {job[0]} {job[1]}->{job[2]} ({sum(r is not None for r in out) + 1} of "
                             f"{len(self.jobs)}) ...")
                    out[i] = probe_row(*job, self.verify)
                    self._said(i, out)
        finally:
            self.close()
        return out


def probe_rows(devices: Iterable[str | Device] | None = None, *, verify: int = 2000,
               gpu: bool = True, progress: Any = None, workers: int | None = None) -> list[dict[str, Any]]:
    """The probe suite on presets it treats as black boxes (``priors="none"``: it infers them from the
    generic families alone), one row each: what it inferred, whether that verified, and whether the
    inferred model gives the preset's bits on fresh random rows with k three times the instruction's.  With
    ``gpu`` and a CUDA GPU that CuPy sees, this GPU's fp16 -> fp32 ``mma.sync`` too.  Some seconds a target,
    ``workers`` at a time (spawned processes; default: two where the machine has two cores, 1: all here);
    ``progress`` (:func:`blockfma.progress.reporter`: None prints on a terminal) names each as it ends."""
    return _ProbeRun(devices, verify, gpu, workers, reporter(progress)).rows()


# --- the verdict: recorded hardware outputs replayed --------------------------------------------------------
VERDICT_COLUMNS = ["source", "dataset", "device", "paths", "rows", "mismatches", "skipped", "verdict"]
_SOURCES = {"golden": "Khattak & Mikaitis (arXiv:2512.07004), model-validation rows",
            "record": "The project's H100 records (data/hardware)",
            "probe record": "Rows blockfma.probe sent to the H100 (data/hardware)"}


def verdict_rows(replays: Sequence[Any]) -> list[dict[str, Any]]:
    """The replays (:mod:`blockfma.replay`) summed per source, data set and device: paths, rows compared,
    mismatches, rows that could not be rebuilt, and the verdict in words."""
    groups: dict[tuple[str, str, str], list[Any]] = {}
    for r in replays:
        groups.setdefault((r.source, r.dataset, r.device), []).append(r)
    rows = []
    for (source, dataset, dev), rs in groups.items():
        n, bad = sum(r.rows for r in rs), sum(r.mismatches for r in rs)
        differ = [r.path for r in rs if r.mismatches]
        rows.append({"source": source, "dataset": dataset, "device": dev, "paths": len(rs), "rows": n,
                     "mismatches": bad, "skipped": sum(r.skipped for r in rs),
                     "verdict": "bit for bit" if not bad and n else
                     f"{bad} rows differ in {len(differ)} paths: {', '.join(differ[:3])}" if bad else "no rows"})
    return rows


def verdict_lines(replays: Sequence[Any], devices: Sequence[Device], questions: Sequence[dict[str, Any]],
                  golden_note: str | None = None) -> list[str]:
    """The verdict in sentences: which presets agree bit for bit with which hardware data, how many rows,
    what differs, which presets no hardware data here checks, and what is open."""
    out = []
    for source, label in _SOURCES.items():
        rs = [r for r in replays if r.source == source]
        if not rs:
            continue
        devs = list(dict.fromkeys(r.device for r in rs))
        n, bad = sum(r.rows for r in rs), sum(r.mismatches for r in rs)
        verdict = ("all bit for bit" if not bad else
                   f"{bad:,} rows differ, in {', '.join(f'{r.device} {r.path}' for r in rs if r.mismatches)}")
        out.append(f"{label}: {len(devs)} preset{'s' if len(devs) > 1 else ''} ({', '.join(devs)}), {len(rs)} "
                   f"sets, {n:,} rows: {verdict}.")
    if golden_note:
        out.append(f"Not replayed: {golden_note}.")
    skipped = sum(r.skipped for r in replays)
    if skipped:
        out.append(f"{skipped} recorded rows not rebuilt (NaN inputs whose codes the record did not keep: "
                   f"{', '.join(sorted({r.dataset for r in replays if r.skipped}))}).")
    checked = {r.device for r in replays}
    rest = [d.name for d in devices if d.name not in checked and not d.variant_of]
    if rest:
        out.append(f"No hardware data here for {', '.join(rest)}: their presets rest on the papers and manuals "
                   "they cite (blockfma devices NAME).")
    if questions:
        out.append(f"Open: {len(questions)} questions ({', '.join(q['question'] for q in questions)}); each says "
                   "how to settle it below.")
    return out


# --- SMT: an input that tells neighbouring generations apart --------------------------------------------------
#: neighbouring generations, the formats and the k of the query (None: the instructions'), side conditions
NEIGHBOURS = (("V100", "A100", "fp16", "fp32", 4, None), ("A100", "H100", "fp16", "fp32", 4, None),
              ("H100", "B200", "e5m2", "fp32", None, (-4, 4)), ("MI250X", "MI300X", "fp16", "fp32", 2, (-4, 4)))
DISCRIMINATE_COLUMNS = ["pair", "formats", "k", "result", "d (older)", "d (newer)", "solver", "seconds"]


def discriminate_rows(devices: Iterable[str | Device] | None = None, *, timeout: float = 10.0,
                      progress: Any = None) -> list[dict[str, Any]]:
    """For each pair of :data:`NEIGHBOURS` among ``devices``: finite inputs (``blockfma.smt.discriminate``,
    ``timeout`` seconds each, nothing cached) on which the older generation's preset and the newer's give
    different bits, with the inputs and both outputs in exact hex, or "same bits (proved)" or "unknown"."""
    from . import smt
    from .literals import bits_hex, hex_float

    say = reporter(progress)
    names = None if devices is None else {d.name for d in resolve(devices, [])}
    rows = []
    for old, new, inp, out, k, exps in NEIGHBOURS:
        if names is not None and not {old, new} <= names:
            continue
        if say:
            say(f"smt: an input that tells {old} from {new} ({inp}->{out}) ...")
        cons = smt.constraints.finite()
        if exps is not None:
            cons = smt.constraints.all_of(cons, smt.constraints.exponents(*exps))
        t0 = time.perf_counter()
        w = smt.discriminate(old, new, input_format=inp, output_format=out, k=k, timeout=timeout, constraints=cons)
        row: dict[str, Any] = {"pair": f"{old} -> {new}", "formats": f"{inp}->{out}", "k": k}
        if isinstance(w, smt.Witness):
            row.update(k=len(w.a), result="differ", a=[hex_float(x) for x in w.a], b=[hex_float(x) for x in w.b],
                       c=hex_float(w.c), **{"d (older)": f"{hex_float(w.d_a)} {bits_hex(w.d_a, out)}",
                                            "d (newer)": f"{hex_float(w.d_b)} {bits_hex(w.d_b, out)}"},
                       solver=w.solver)
        elif w is None:
            row.update(result="same bits (proved)")
        else:
            row.update(k=w.k, result=f"unknown ({w.reason})", solver=w.solver)
        row["seconds"] = round(time.perf_counter() - t0, 2)
        rows.append(row)
    return rows


# --- provenance ---------------------------------------------------------------------------------------------
def provenance() -> dict[str, Any]:
    """Where and from what the report was made (:func:`blockfma.provenance.provenance`: the date, versions,
    commit, machine) and the GPU torch sees (None without one or without torch)."""
    from . import provenance as _provenance

    gpu = None
    try:
        import torch

        if torch.cuda.is_available():
            gpu = torch.cuda.get_device_name(0)
    except Exception:  # noqa: BLE001 - provenance only: no torch, or a broken CUDA install, means no GPU here
        gpu = None
    return {**_provenance.provenance(), "gpu": gpu}


def sections(devices: Iterable[str | Device] | None = None,
             fttn_inputs: Sequence[str] = ("fp16", "bf16"), probes: bool = True, *,
             progress: Any = None, verdict: bool = True, smt_timeout: float | None = 10.0,
             workers: int | None = None) -> list[Section]:
    """The report's sections, in order: the verdict (recorded hardware outputs replayed through the presets,
    :mod:`blockfma.replay`), features, FTTN porting example, one SMT-found input per pair of neighbouring
    generations (``smt_timeout`` seconds each; None: left out), open questions, probes (presets as black
    boxes, and this GPU where there is one; ``workers`` processes, see :func:`probe_rows`), confidence.
    ``progress`` (:func:`blockfma.progress.reporter`) says what it is doing, section by section, each line
    after the seconds since the start; the simulated targets' probe rows are kept on disk (:func:`_probe_cache`)."""
    from . import replay as _replay

    t0, said = time.perf_counter(), reporter(progress)
    say = said and (lambda line: said(f"[{time.perf_counter() - t0:4.0f} s] {line}"))  # each line: when it began
    devs = None if devices is None else resolve(devices, [])
    hw = None if devs is None else [d for d in devs if d.vendor != "reference"]
    fttn_inputs = _fttn_inputs(fttn_inputs)
    if smt_timeout is not None:
        from .arguments import seconds

        smt_timeout = seconds("smt_timeout", smt_timeout, none=False)
    run = _ProbeRun(hw, 2000, True, workers, say) if probes else None
    try:
        out = _sections(devs, hw, fttn_inputs, run, say, verdict, smt_timeout, _replay)
    finally:
        if run is not None:
            run.close()
    if say:
        say(f"report: done in {time.perf_counter() - t0:.1f} s")
    return out


def _verdict_section(hw: list[Device] | None, questions: list[dict[str, Any]], say: Any, _replay: Any) -> Section:
    """The recorded hardware outputs replayed through the presets."""
    if say:
        say("report: replaying the recorded hardware outputs through the presets ...")
    replays = _replay.replay_all(say or False, devices=None if hw is None else {d.name for d in hw})
    missing = _replay.golden_missing() and ("the golden data of Khattak & Mikaitis, not found here (BLOCKFMA_GOLDEN: "
                                            "the folder that holds khattak-mikaitis/)")  # no path of this machine
    lines = verdict_lines(replays, hw if hw is not None else hardware(), questions, missing)
    n, bad = sum(r.rows for r in replays), sum(r.mismatches for r in replays)
    head = (f"{n:,} recorded hardware rows of {', '.join(sorted({r.device for r in replays}))} replayed through the "
            f"presets: {f'{bad:,} of them differ' if bad else 'all bit for bit'}." if n else "No hardware rows here.")
    return Section(
        "verdict", "Verdict: the presets against recorded hardware outputs", VERDICT_COLUMNS,
        verdict_rows(replays), intro=head,
        notes=(*lines, "Every recorded row was rerun through the current preset and compared bit for bit; "
               "differing rows, with their inputs in exact hex, are in the JSON and HTML forms (details)."),
        details=[r.row() for r in replays])


def _fttn_section(devs: list[Device] | None, fttn_inputs: Sequence[str], say: Any) -> Section:
    """FTTN's porting GEMM on each preset, with notes on the rows that differ from FTTN's for a known reason."""
    if say:
        say(f"report: feature table and FTTN porting GEMM (K = {_fttn.K}) on "
            f"{'every preset' if devs is None else ', '.join(d.name for d in devs)} ...")
    fttn = fttn_rows(devs, fttn_inputs)
    shown = {r["device"] for r in fttn}
    fttn_notes = []
    if "MI250X" in shown:
        fttn_notes.append("MI250X: the preset follows AMD's note and two models (255.875); FTTN's 0 is the "
                          "variant MI250X-fttn.")
    if "exact" in shown:
        fttn_notes.append(f"exact: even the correctly rounded A·B is an fp32 accumulator (quantum 2^-4 just "
                          f"below 2^20), so D = 192.0 rather than {_fttn.EXACT!r}.")
    return Section("fttn", "FTTN porting example", FTTN_COLUMNS, fttn,
                   intro=f"D = C - A·B with C = 2^20 and K = {_fttn.K} (FTTN sec. V), accumulated tile by tile on "
                         f"the matrix unit: the exact answer is {_fttn.EXACT!r}; each device loses a different "
                         "part of it. FTTN: value FTTN published; match: D_fp16 equals it.",
                   notes=tuple(fttn_notes))


def _discriminate_section(hw: list[Device] | None, smt_timeout: float, say: Any) -> Section | None:
    """Inputs that tell neighbouring generations apart, found by the SMT solver (None: no pair)."""
    t = time.perf_counter()
    pairs = discriminate_rows(hw, timeout=smt_timeout, progress=say or False)
    if not pairs:
        return None
    return Section(
        "discriminate", "Neighbouring generations told apart (SMT)", DISCRIMINATE_COLUMNS, pairs,
        intro=f"For each pair, finite inputs on which the older generation's preset and the newer's give "
              f"different bits, found by blockfma.smt.discriminate ({smt_timeout:g} s at most each, nothing "
              f"cached; {time.perf_counter() - t:.1f} s in all) and checked by the engine. Rerun one with "
              "blockfma smt diff OLD NEW --input FORMAT --k K.",
        notes=tuple(f"{r['pair']} ({r['formats']}): a = [{', '.join(r['a'])}], b = [{', '.join(r['b'])}], "
                    f"c = {r['c']}" for r in pairs if "a" in r))


def _sections(devs: list[Device] | None, hw: list[Device] | None, fttn_inputs: Sequence[str], run: Any, say: Any,
              verdict: bool, smt_timeout: float | None, _replay: Any) -> list[Section]:
    questions = question_rows(hw)
    out = [_verdict_section(hw, questions, say, _replay)] if verdict else []
    fttn = _fttn_section(devs, fttn_inputs, say)
    out += [
        Section("features", "Feature table", FEATURE_COLUMNS, feature_rows(hw),
                intro="One row per device, format pair and model (instructions sharing a model share a row). "
                      "L: block width; F: fraction bits kept after alignment; e_zero: exponent of zero terms; "
                      "rounding: output rounding (@n b: fraction bits kept).",
                notes=("References: 'exact' (correctly rounded dot product) and 'ieee-sequential' (IEEE FMA "
                       "loop) take every pair.",),
                group=("device", "confidence", "sources")),
        fttn,
    ]
    pairs = None if smt_timeout is None else _discriminate_section(hw, smt_timeout, say)
    if pairs is not None:
        out.append(pairs)
    out.append(Section(
        "questions", "Open questions", QUESTION_COLUMNS, questions,
        intro="Readings no hardware data settle yet: the preset keeps one; where the other is a Model "
              "parameter, the variant '<device>~<question>' runs it (bf.device('MI100~all-zero-block-sign')).",
        notes=tuple(f"{r['question']}: {r['text']} Preset: {r['preset']}. Other: {r['other reading']}. "
                    f"To settle: {r['to settle']}" for r in questions)))
    if run is not None:
        out.append(Section(
            "probes", "Probes: presets inferred as black boxes", PROBE_COLUMNS, run.rows(),
            intro="blockfma.probe measured each target through its outputs alone (feature tests built from the "
                  "formats, candidate models narrowed and separated by simulated inputs, then verified on "
                  "random and adversarial rows), with no preset among its candidates. same as preset: the "
                  "inferred model gives the preset's bits on 2000 fresh rows with k three times the target's. "
                  f"{len(run.cached)} of these rows were read from the cache of earlier runs of this same code "
                  "(BLOCKFMA_CACHE=off probes again; seconds: the run that made the row).",
            notes=("Real hardware: data/hardware/h100-probe-cuda.json.gz holds the same inference on 22 of an "
                   "H100's mma.sync paths, each verified on 10^6 rows (blockfma probe cuda --all on a GPU); "
                   "the verdict above replays their rows.",)))
    out.append(Section("confidence", "Presets resting on thin evidence", CONFIDENCE_COLUMNS, confidence_rows(hw),
                       intro="Presets resting on one source, on a vendor manual only, or with confidence below high."))
    return out


def report(json: bool = False, *, devices: Iterable[str | Device] | None = None,
           fttn_inputs: Sequence[str] = ("fp16", "bf16"), probes: bool = True,
           progress: Any = None, **options: Any) -> str | dict[str, Any]:
    """The cross-device report (the sections of :func:`sections`).

    ``json=True`` returns a JSON-ready dict (``{"blockfma": version, "data_path": ..., "provenance": ...,
    "sections": {key: section}}``) instead of text.  ``devices`` restricts every section to those presets;
    ``fttn_inputs`` chooses the input formats of the FTTN GEMM; ``probes`` runs the probe section
    (:func:`probe_rows`).  ``options``: :func:`sections`' ``verdict``, ``smt_timeout`` and ``workers``.
    ``progress``: see :func:`sections`.  :mod:`blockfma.report_html` renders the same sections as one HTML page.
    """
    secs = sections(devices, fttn_inputs, probes, progress=progress, **options)
    return as_json(secs, provenance()) if json else as_text(secs)


def as_json(secs: Sequence[Section], provenance: dict[str, Any] | None = None) -> dict[str, Any]:
    """The report of these sections as a JSON-ready dict (with ``provenance`` where given: :func:`provenance`)."""
    out: dict[str, Any] = {"blockfma": __version__, "data_path": DATA_PATH}
    if provenance is not None:
        out["provenance"] = provenance
    out["sections"] = {s.key: s.to_json() for s in secs}
    return out


def as_text(secs: Sequence[Section]) -> str:
    """The report of these sections as text."""
    header = [f"blockfma {__version__}: bit-exact models of matrix accelerators", f"data path: {DATA_PATH}"]
    return "\n\n".join(["\n".join(header)] + [s.text() for s in secs]) + "\n"
