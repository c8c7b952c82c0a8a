"""Plain-text tables and JSON-ready rows: the feature table, the FTTN porting example, the cross-device report.

Every function here is pure: it takes presets (or names) and returns rows (lists of dicts of plain values)
or text.  :func:`report` assembles :class:`Section` objects; later versions add sections (probe findings,
GPU results) by appending to :func:`sections` without touching the rest.  Writing files (:func:`write_json`,
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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from . import __version__
from .devices import Device, device as _device, devices as _devices, open_questions as _questions
from .experiments import fttn as _fttn
from .files import atomic_path, dumps, write_json  # noqa: F401 (re-exported: their home is blockfma.files)
from .arguments import ArgumentError
from .progress import reporter

__all__ = ["table", "hardware", "feature_rows", "fttn_rows", "confidence_rows", "probe_rows", "Section", "sections",
           "report", "as_text", "as_json", "dumps", "write_json", "FEATURE_COLUMNS", "FTTN_COLUMNS", "CONFIDENCE_COLUMNS", "PROBE_COLUMNS"]

DATA_PATH = "formats -> Model -> engine (bit-exact simulation) -> devices (presets with sources) -> report"

FEATURE_COLUMNS = ["device", "instruction", "pair", "family", "L", "F", "e_zero", "alignment", "rounding",
                   "subnormals", "nan", "confidence", "sources"]
FTTN_COLUMNS = ["device", "D_fp16", "D_bf16", "FTTN", "match"]
CONFIDENCE_COLUMNS = ["device", "confidence", "sources", "why"]
QUESTION_COLUMNS = ["question", "devices", "variant"]  # the rows also carry preset, other reading, to settle


# --- tables ----------------------------------------------------------------------------------------------
def _cell(value: Any) -> str:
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
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
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
def _resolve(devs: Iterable[str | Device] | None, default: list[Device]) -> list[Device]:
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
    for dev in _resolve(devices, hardware()):
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
    """FTTN's porting GEMM (:mod:`blockfma.experiments.fttn`) on every preset with an fp16->fp32 model:
    D for each input format in ``inputs`` the preset takes (``D_fp16``, ``D_bf16``; None where it does not),
    FTTN's published value where FTTN measured the device (a variant shows the value of the device it
    reads), and whether the fp16 value matches it.  Each D is a full K = 8192 chain, computed once per
    process (cached; about a second for every preset)."""
    inputs = _fttn_inputs(inputs)
    rows: list[dict[str, Any]] = []
    for dev in _resolve(devices, _devices()):
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
    for dev in _resolve(devices, hardware()):
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

    def text(self) -> str:
        parts = [self.title, "=" * len(self.title)]
        if self.intro:
            parts.append(textwrap.fill(self.intro, 100))
        parts.append(table(self.rows, self.columns, group=self.group) if self.rows else "(none)")
        parts.extend(textwrap.fill(n, 100) for n in self.notes)
        return "\n".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {"title": self.title, "intro": self.intro, "columns": list(self.columns),
                "rows": self.rows, "notes": list(self.notes)}


def question_rows(devices: Iterable[str | Device] | None = None) -> list[dict[str, Any]]:
    """The open questions of these devices (default: every hardware preset), one row each; settled ones
    are left out (``blockfma devices NAME`` shows them with their evidence)."""
    names = {d.name for d in _resolve(devices, hardware())}
    rows = []
    for q in _questions(settled=False):
        shown = [d for d in q.devices if d in names]
        if shown:
            rows.append({"question": q.id, "text": q.question, "devices": shown, "preset": q.preset,
                         "other reading": q.other,
                         "variant": q.variant(shown[0]).replace(shown[0], "<device>") if q.change else "not yet",
                         "to settle": q.settle})
    return rows


#: presets the report probes as black boxes (one or two per family), with the pair and instruction
PROBED = (("V100", "fp16", "fp32", None), ("A100", "bf16", "fp32", None), ("H100", "fp16", "fp16", None),
          ("H100", "e4m3fn", "fp32", "mma.m16n8k32.fp8"), ("B200", "e5m2", "fp32", None),
          ("MI100", "fp16", "fp32", None), ("MI250X", "bf16", "fp32", None), ("MI300X", "fp16", "fp32", None),
          ("Intel AMX", "bf16", "fp32", None), ("Arm BFDOT", "bf16", "fp32", None))
PROBE_COLUMNS = ["target", "pair", "k", "verified", "family", "L", "F", "e_zero", "rounding", "same as preset",
                 "calls", "rows", "seconds"]


def probe_rows(devices: Iterable[str | Device] | None = None, *, verify: int = 2000,
               gpu: bool = True, progress: Any = None) -> list[dict[str, Any]]:
    """The probe suite on presets it treats as black boxes (``priors="none"``: it infers them from the
    generic families alone), one row each: what it inferred, whether that verified, and whether the
    inferred model gives the preset's bits on fresh random rows with k three times the instruction's.  With
    ``gpu`` and a CUDA GPU that CuPy sees, this GPU's fp16 -> fp32 ``mma.sync`` too.  Some seconds a target;
    ``progress`` (:func:`blockfma.progress.reporter`: None prints on a terminal) names each as it starts."""
    from .probes import probe
    from .probes.infer import disagreements

    say = reporter(progress)

    names = None if devices is None else {d.name for d in _resolve(devices, [])}
    jobs: list[tuple[Any, Any, str, Any]] = []
    for name, inp, out, ins in PROBED:
        if names is None or name in names:
            m = _device(name).model(inp, out, ins) if ins else _device(name).model(inp, out)
            jobs.append((f"sim:{name}" + (f":{ins}" if ins else ""), inp, out, m))
    if gpu:
        from .probes import cuda

        if cuda.available():
            jobs.append(("cuda", "fp16", "fp32", None))
    rows = []
    for n, (spec, inp, out, preset) in enumerate(jobs, 1):
        if say:
            say(f"probing {spec} {inp}->{out} ({n} of {len(jobs)}) ...")
        f = probe(spec, inp, out, verify=verify, priors="none", progress=False)
        if say:
            found = f.model().summary() if f.verified else "no model verified"
            say(f"  {found} ({f.seconds:.1f} s)")
        found = f.row()
        row = {k: v for k, v in found.items() if k in PROBE_COLUMNS}
        row["rounding"] = found.get("output_rounding")
        row["same as preset"] = (disagreements(f.model(), preset, 3 * f.k, 2000, seed=1) == 0
                                 if f.verified and preset is not None else None)
        rows.append(row)
    return rows


def sections(devices: Iterable[str | Device] | None = None,
             fttn_inputs: Sequence[str] = ("fp16", "bf16"), probes: bool = True, *,
             progress: Any = None) -> list[Section]:
    """The report's sections, in order: features, FTTN porting example, probes (presets as black boxes,
    and this GPU where there is one), confidence, open questions.  About a minute and a half on two cores
    for every preset (the probes most of it; ``probes=False``: some seconds).  ``progress``
    (:func:`blockfma.progress.reporter`: None prints on stderr where it is a terminal, True always, False
    never, or a function of one line) says what it is doing, section by section and target by target."""
    say = reporter(progress)
    t0 = time.perf_counter()
    devs = None if devices is None else _resolve(devices, [])
    hw = None if devs is None else [d for d in devs if d.vendor != "reference"]
    if say:
        say(f"report: feature table and FTTN porting GEMM (K = {_fttn.K}) on "
            f"{'every preset' if devs is None else ', '.join(d.name for d in devs)} ...")
    fttn = fttn_rows(devs, fttn_inputs)
    questions = question_rows(hw)
    shown = {r["device"] for r in fttn}
    fttn_notes = []
    if "MI250X" in shown:
        fttn_notes.append("MI250X: the preset follows AMD's note and two models (255.875); FTTN's 0 is the "
                          "variant MI250X-fttn.")
    if "exact" in shown:
        fttn_notes.append(f"exact: even the correctly rounded A·B is an fp32 accumulator (quantum 2^-4 just "
                          f"below 2^20), so D = 192.0 rather than {_fttn.EXACT!r}.")
    out = [
        Section("features", "Feature table", FEATURE_COLUMNS, feature_rows(hw),
                intro="One row per device, format pair and model (instructions sharing a model share a row). "
                      "L: block width; F: fraction bits kept after alignment; e_zero: exponent of zero terms; "
                      "rounding: output rounding (@n b: fraction bits kept).",
                notes=("References: 'exact' (correctly rounded dot product) and 'ieee-sequential' (IEEE FMA "
                       "loop) take every pair.",),
                group=("device", "confidence", "sources")),
        Section("fttn", "FTTN porting example", FTTN_COLUMNS, fttn,
                intro=f"D = C - A·B with C = 2^20 and K = {_fttn.K} (FTTN sec. V), accumulated tile by tile on "
                      f"the matrix unit: the exact answer is {_fttn.EXACT!r}; each device loses a different part "
                      "of it. FTTN: value FTTN published; match: D_fp16 equals it.",
                notes=tuple(fttn_notes)),
    ]
    if probes:
        out.append(Section(
            "probes", "Probes: presets inferred as black boxes", PROBE_COLUMNS,
            probe_rows(hw, progress=say or False),
            intro="blockfma.probe measured each target through its outputs alone (feature tests built from the "
                  "formats, candidate models narrowed and separated by simulated inputs, then verified on "
                  "random and adversarial rows), with no preset among its candidates. same as preset: the "
                  "inferred model gives the preset's bits on 2000 fresh rows with k three times the target's.",
            notes=("Real hardware: data/hardware/h100-probe-cuda.json.gz holds the same inference on 22 of an "
                   "H100's mma.sync paths, each verified on 10^6 rows (blockfma probe cuda --all on a GPU).",)))
    out += [
        Section("confidence", "Presets resting on thin evidence", CONFIDENCE_COLUMNS, confidence_rows(hw),
                intro="Presets resting on one source, on a vendor manual only, or with confidence below high."),
        Section("questions", "Open questions", QUESTION_COLUMNS, questions,
                intro="Readings no hardware data settle yet: the preset keeps one; where the other is a Model "
                      "parameter, the variant '<device>~<question>' runs it (bf.device('MI100~all-zero-block-sign')).",
                notes=tuple(f"{r['question']}: {r['text']} Preset: {r['preset']}. Other: {r['other reading']}. "
                            f"To settle: {r['to settle']}" for r in questions)),
    ]
    if say:
        say(f"report: done in {time.perf_counter() - t0:.1f} s")
    return out


def report(json: bool = False, *, devices: Iterable[str | Device] | None = None,
           fttn_inputs: Sequence[str] = ("fp16", "bf16"), probes: bool = True,
           progress: Any = None) -> str | dict[str, Any]:
    """The cross-device report: header, feature table, FTTN porting example, confidence notes.

    ``json=True`` returns a JSON-ready dict (``{"blockfma": version, "data_path": ..., "sections": {key:
    section}}``) instead of text.  ``devices`` restricts every section to those presets; ``fttn_inputs``
    chooses the input formats of the FTTN GEMM (each full run takes up to seconds per device); ``probes``
    runs the probe section (:func:`probe_rows`, some seconds per target; about a minute and a half in all on
    two cores).  ``progress``: see :func:`sections` (None: progress lines on stderr where it is a terminal).
    """
    secs = sections(devices, fttn_inputs, probes, progress=progress)
    return as_json(secs) if json else as_text(secs)


def as_json(secs: Sequence[Section]) -> dict[str, Any]:
    """The report of these sections as a JSON-ready dict."""
    return {"blockfma": __version__, "data_path": DATA_PATH, "sections": {s.key: s.to_json() for s in secs}}


def as_text(secs: Sequence[Section]) -> str:
    """The report of these sections as text."""
    header = [f"blockfma {__version__}: bit-exact models of matrix accelerators", f"data path: {DATA_PATH}"]
    return "\n\n".join(["\n".join(header)] + [s.text() for s in secs]) + "\n"
