"""Recorded hardware outputs replayed through the presets, bit for bit: the report's verdict.

Three kinds of data, each read where it lies (nothing is copied or cached; docs/cli.md, "The report"): the golden data
of Khattak & Mikaitis (:func:`golden_root`; absent on most machines, :func:`golden_missing` then says why), the
project's own H100 records (``data/hardware/*.json``) and the rows the probe suite sent to the H100
(``data/hardware/*probe*.json.gz``).  Each replay returns a :class:`Replay`: how many rows, how many differ, and the
first differing rows with their inputs in exact hex, so that a mismatch can be rerun by hand (``blockfma dot``).

    >>> from blockfma import replay
    >>> sum(r.rows for r in replay.records()) > 1000
    True
"""

from __future__ import annotations

import gzip
import json
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import formats as _formats
from .devices import device as _device
from .engine import dot
from .progress import reporter

__all__ = ["Replay", "REPO", "HARDWARE", "GOLDEN_DEFAULT", "golden_root", "golden_missing", "golden", "records",
           "probe_records", "replay_all", "EXAMPLES", "golden_sets", "golden_set", "record_files", "record_paths",
           "record_path", "record_preset", "nan_codes", "probe_preset", "probe_path", "PROBE_RECORDS"]

REPO = Path(__file__).resolve().parents[2]
"""The checkout this module runs from (src/blockfma/replay.py -> the repository)."""
HARDWARE = REPO / "data" / "hardware"
"""The project's GPU records."""
GOLDEN_DEFAULT = REPO.parent / "shared" / "golden"
"""Where the golden data lie when ``$BLOCKFMA_GOLDEN`` is unset: ``../shared/golden`` beside the checkout."""
GOLDEN_SOURCE = "khattak-mikaitis"
EXAMPLES = 5
"""Differing rows kept per replay (with their inputs in exact hex)."""

_GOLDEN_FORMATS = {"fp16": ("fp16", 16), "bf16": ("bf16", 16), "tf32": ("tf32", 8), "E4M3": ("e4m3fn", 32),
                   "E5M2": ("e5m2", 32)}  # folder name -> (format, k of the fragment the rows were run in)
_PAYLOAD_MATTERS = ("fp64", "tf32")  # input formats whose NaN codes change a result


@dataclass(frozen=True)
class Replay:
    """One data set replayed through one preset model: ``rows`` compared, ``mismatches`` of them differ;
    ``examples``: the first differing rows (``a``, ``b``, ``c`` in exact hex, ``hardware`` and ``preset``
    bits); ``skipped``: rows that could not be rebuilt (a NaN input whose code the record did not keep)."""

    source: str
    dataset: str
    device: str
    path: str
    model: str
    rows: int
    mismatches: int
    examples: tuple[dict[str, Any], ...] = field(default=())
    skipped: int = 0
    seconds: float = 0.0
    note: str = ""

    @property
    def agrees(self) -> bool:
        return self.rows > 0 and self.mismatches == 0

    def row(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        return {"source": self.source, "dataset": self.dataset, "device": self.device, "path": self.path,
                "model": self.model, "rows": self.rows, "mismatches": self.mismatches, "skipped": self.skipped,
                "agrees": self.agrees, "note": self.note,
                "examples": list(self.examples)}


def _hex(x: Any) -> str:
    x = float(x)
    return "nan" if x != x else x.hex()


def _bits_hex(bits: Any, width: int) -> str:
    return f"0x{int(bits):0{width // 4}x}"


def _compare(source: str, dataset: str, device: str, path: str, model: Any, A: np.ndarray, B: np.ndarray,
             C: np.ndarray, got: np.ndarray, want: np.ndarray, width: int, t0: float, *, skipped: int = 0,
             note: str = "", same: np.ndarray | None = None) -> Replay:
    """A Replay from the preset's bits ``got`` and the hardware's ``want`` (``same``: a row-wise verdict
    given instead of bit equality)."""
    bad = np.flatnonzero(~same if same is not None else got != want)
    examples = tuple({"row": int(i), "a": [_hex(x) for x in A[i]], "b": [_hex(x) for x in B[i]], "c": _hex(C[i]),
                      "hardware": _bits_hex(want[i], width), "preset": _bits_hex(got[i], width)}
                     for i in bad[:EXAMPLES])
    return Replay(source, dataset, device, path, model.summary(), int(len(want)), int(bad.size), examples,
                  skipped, time.perf_counter() - t0, note)


# --- golden data ---------------------------------------------------------------------------------------------
def golden_root() -> Path:
    """The golden data's folder: ``$BLOCKFMA_GOLDEN`` where set and not empty, else :data:`GOLDEN_DEFAULT`."""
    env = os.environ.get("BLOCKFMA_GOLDEN")
    return Path(env) if env else GOLDEN_DEFAULT


def golden_missing() -> str | None:
    """Why the golden data are not replayed (None where they are present)."""
    folder = golden_root() / GOLDEN_SOURCE
    if folder.is_dir():
        return None
    env = os.environ.get("BLOCKFMA_GOLDEN")
    where = f"BLOCKFMA_GOLDEN={env}" if env else "BLOCKFMA_GOLDEN unset"
    return (f"golden data not found at {folder} ({where}); set BLOCKFMA_GOLDEN to the folder that holds "
            f"{GOLDEN_SOURCE}/ to replay them")


def _golden_d(folder: Path, device: str, out: str) -> Path | None:
    """The recorded outputs ``d_<device>_<out>.txt`` (or ``..._open.txt``: rows the golden README calls open)."""
    for name in (f"d_{device}_{out}.txt", f"d_{device}_{out}_open.txt"):
        if (folder / name).exists():
            return folder / name
    return None


def _hex_rows(path: Path) -> np.ndarray:
    rows = [[int(t, 16) for t in line.split()] for line in path.read_text().splitlines() if line.strip()]
    return np.array(rows, dtype=np.uint32).view(np.float32).astype(np.float64)


def _bin_rows(path: Path) -> np.ndarray:
    return np.array([int(line, 2) for line in path.read_text().split()], dtype=np.uint32)


def golden_sets(root: Path | None = None) -> list[tuple[str, str, str]]:
    """(device folder, format folder, output format) of every golden set under ``root`` (default
    :func:`golden_root`); empty where the data are absent."""
    base = (golden_root() if root is None else Path(root)) / GOLDEN_SOURCE
    if not base.is_dir():
        return []
    return [(d.name, f.name, out) for d in sorted(p for p in base.iterdir() if p.is_dir())
            for f in sorted(p for p in d.iterdir() if p.is_dir()) for out in ("fp32", "fp16")
            if f.name in _GOLDEN_FORMATS and _golden_d(f, d.name, out) is not None]


def golden_set(device: str, fmt: str, out: str, root: Path | None = None, *, model: Any = None) -> Replay:
    """One golden set replayed through the device's preset (or ``model``): the rows zero-padded to the
    fragment's k as the kernels ran them, C = 0 for the H100 fp8 runs and C rounded to binary16 for fp16
    outputs (the README of the data says why)."""
    t0 = time.perf_counter()
    folder = (golden_root() if root is None else Path(root)) / GOLDEN_SOURCE / device / fmt
    a = _hex_rows(folder / f"a_{device}_{fmt}.txt")
    b = _hex_rows(folder / f"b_{device}_{fmt}.txt")
    c = _bin_rows(folder / f"c_{device}_fp32.txt").view(np.float32).astype(np.float64)
    d_file = _golden_d(folder, device, out)
    want = _bin_rows(d_file)
    input_format, kernel_k = _GOLDEN_FORMATS[fmt]
    rows, k = a.shape
    A, B = np.zeros((rows, kernel_k)), np.zeros((rows, kernel_k))
    A[:, :k], B[:, :k] = a, b
    if fmt in ("E4M3", "E5M2") and device == "H100":
        c = np.zeros(rows)
    if out == "fp16":
        c = c.astype(np.float16).astype(np.float64)
    model = _device(device).model(input_format, out) if model is None else model
    got = dot(A, B, c, model=model)
    if out == "fp16":
        want, got, width = want.view(np.float32).astype(np.float16).view(np.uint16), got.view(np.uint16), 16
    else:
        got, width = got.view(np.uint32), 32
    note = "rows the golden README calls open" if d_file.name.endswith("_open.txt") else ""
    return _compare("golden", GOLDEN_SOURCE, device, f"{input_format}->{out}", model, A, B, c, got, want, width,
                    t0, note=note)


def golden(root: Path | None = None, devices: Iterable[str] | None = None) -> list[Replay]:
    """Every golden set (of ``devices``, preset names; default all) replayed (:func:`golden_set`); empty where
    the data are absent."""
    names = None if devices is None else set(devices)
    return [golden_set(d, f, o, root) for d, f, o in golden_sets(root) if names is None or d in names]


# --- the project's records (data/hardware/*.json) ------------------------------------------------------------
def nan_codes(folder: Path | None = None) -> dict[tuple[str, str], dict[tuple, tuple[list[str], list[str]]]]:
    """(record file, path) -> {(a, b, c) as recorded: (A's codes, B's codes)} from the ``*-nan-inputs.json``
    files of ``folder`` (default :data:`HARDWARE`): the codes of the NaN inputs a record wrote as ``nan``."""
    folder = HARDWARE if folder is None else Path(folder)
    out: dict = {}
    for f in sorted(folder.glob("*-nan-inputs.json")):
        doc = json.loads(f.read_text())
        for path, rows in doc["paths"].items():
            out[(doc["record"], path)] = {(tuple(r["a"]), tuple(r["b"]), r["c"]): (r["a_codes"], r["b_codes"])
                                          for r in rows}
    return out


def _storage(fmt: str) -> _formats.Format:
    """The format whose codes a register holds (tf32 travels in binary32)."""
    return _formats.fp32 if fmt == "tf32" else _formats.get(fmt)


def _value(h: str) -> float:
    return float("nan") if h == "nan" else float.fromhex(h)


def _operand(fmt: str, values: list[str], codes: list[str] | None) -> np.ndarray:
    """A recorded operand as the register held it, in its storage dtype: from its codes where known, else from
    its exact values (a NaN without codes: the default quiet NaN, as the targeted rows were encoded)."""
    st = _storage(fmt)
    if codes is None:
        return np.array([_value(x) for x in values]).astype(st.dtype)
    uint = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[st.bits]
    return np.array([int(x, 16) for x in codes], dtype=uint).view(st.dtype)


def record_preset(name: str, formats: dict[str, str]) -> Any:
    """The H100 preset model of a recorded path (``mma...``, ``wgmma...``; fp8 ``mma.sync``: the fp16 HMMAs
    the SASS shows, per shape)."""
    fa, fb, fd = formats["a"], formats["b"], formats["d"]
    instruction = "wgmma" if name.startswith("wgmma") else "mma"
    if instruction == "mma" and fa in ("e4m3fn", "e5m2"):
        instruction = "mma.m16n8k16.fp8" if ".m16n8k16." in name else "mma.m16n8k32.fp8"
    return _device("H100").model((fa, fb), fd, instruction)


def _record_rows(entry: dict) -> Iterator[tuple]:
    """(label, a, b, c, C's code or None, the GPU's bits, the row's own codes) of a path's rows, each once."""
    seen = set()
    for m in entry.get("models", []):
        for ex in m.get("examples", []):
            key = (tuple(ex["a"]), tuple(ex["b"]), ex["c"], ex["hardware"])
            if key not in seen:
                seen.add(key)
                codes = (ex["a_codes"], ex["b_codes"]) if "a_codes" in ex else None
                yield "example", ex["a"], ex["b"], ex["c"], ex.get("c_bits"), ex["hardware"], codes
    for t in entry.get("targeted", []):
        if "a" in t:
            yield t["case"], t["a"], t["b"], t["c"], None, t["hardware"], None


def record_files(folder: Path | None = None) -> list[Path]:
    """The dot-product records in ``folder`` (default :data:`HARDWARE`), the NaN-code files aside."""
    folder = HARDWARE if folder is None else Path(folder)
    return sorted(p for p in folder.glob("*.json") if not p.name.endswith("-nan-inputs.json"))


def record_paths(folder: Path | None = None) -> list[tuple[str, str, dict, bool]]:
    """(record file name, path name, path entry, whether the record kept its NaN codes) of every recorded
    instruction path with formats that no later path supersedes."""
    out = []
    for rec in record_files(folder):
        doc = json.loads(rec.read_text())
        kept = not str(doc.get("nan_inputs", "")).startswith("not recorded")
        for name, entry in doc.get("paths", {}).items():
            if "formats" in entry and "superseded_by" not in entry:
                out.append((rec.name, name, entry, kept))
    return out


def record_path(record: str, name: str, entry: dict, nan_codes: dict | None = None, *, model: Any = None) -> Replay:
    """One recorded path's rows replayed through its H100 preset (tf32 read from binary32 registers as the unit
    reads them).  ``nan_codes``: {(a, b, c): (A's codes, B's codes)} for the rows whose NaN inputs the record
    wrote as ``nan`` (from the ``*-nan-inputs.json`` beside it); a row that needs them and has none is skipped.
    ``model``: another model in the preset's place."""
    t0 = time.perf_counter()
    model = record_preset(name, entry["formats"]) if model is None else model
    fa, fb, fc, fd = (entry["formats"][x] for x in "abcd")
    kw = {"round_inputs": "device"} if fa == "tf32" else {}
    width = _formats.get(fd).bits
    uint = {16: np.uint16, 32: np.uint32, 64: np.uint64}[width]
    codes = nan_codes or {}
    groups: dict[int, list[tuple]] = {}
    skipped = 0
    for label, a, b, c, c_bits, hw, own in _record_rows(entry):
        a_codes, b_codes = own or codes.get((tuple(a), tuple(b), c), (None, None))
        if label == "example" and "nan" in a + b and a_codes is None and (fa in _PAYLOAD_MATTERS or
                                                                          fb in _PAYLOAD_MATTERS):
            skipped += 1
            continue
        row = (_operand(fa, a, a_codes), _operand(fb, b, b_codes),
               _operand(fc, [c], None if c_bits is None else [c_bits])[0], int(hw, 16))
        groups.setdefault(len(a), []).append(row)
    A_all, B_all, C_all, got_all, want_all = [], [], [], [], []
    for rows in groups.values():
        A, B = np.stack([r[0] for r in rows]), np.stack([r[1] for r in rows])
        C = np.array([r[2] for r in rows])
        got = np.asarray(dot(A, B, C, model=model, **kw)).view(uint).astype(np.uint64)
        with np.errstate(invalid="ignore"):  # NaN codes of the narrow formats, shown as nan
            A_all += list(A.astype(np.float64))
            B_all += list(B.astype(np.float64))
            C_all += list(C.astype(np.float64))
        got_all.append(got)
        want_all.append(np.array([r[3] for r in rows], dtype=np.uint64))
    got = np.concatenate(got_all) if got_all else np.zeros(0, np.uint64)
    want = np.concatenate(want_all) if want_all else np.zeros(0, np.uint64)
    note = f"{entry['dot_products']:,} dot products run; the record keeps the rows some model missed and " \
           "the targeted ones" if "dot_products" in entry else ""
    return _compare("record", record, "H100", name, model, A_all, B_all, C_all, got, want, width, t0,
                    skipped=skipped, note=note)


def records(folder: Path | None = None) -> list[Replay]:
    """Every recorded path of ``folder`` (default :data:`HARDWARE`) replayed (:func:`record_path`)."""
    folder = HARDWARE if folder is None else Path(folder)
    codes = nan_codes(folder)
    return [record_path(rec, name, entry, codes.get((rec, name))) for rec, name, entry, _ in record_paths(folder)]


# --- the probe suite's records (data/hardware/*probe*.json.gz) ------------------------------------------------
PROBE_RECORDS = ("h100-probe-cuda.json.gz", "h100-probe-cuda-wgmma-fp8.json.gz",
                 "h100-probe-cuda-wgmma-fp8-1e6.json.gz", "h100-probe-torch.json.gz",
                 "h200-probe-cuda-wgmma-fp8-f16.json.gz")
"""The probe records whose rows are kept (h100-torch-order.json.gz keeps readings, not rows).  The H200's
record is replayed with the H100 presets: the same Hopper chip (sm_90), same instructions."""


def probe_preset(record: str, p: dict) -> Any:
    """The H100 preset of one probed path: ``mma``, ``wgmma``, the fp8 ``mma.sync`` per shape, or cuBLAS."""
    m = p["model"]
    fa, fb, fd = m["input"], m["input_b"] or m["input"], m["output"]
    t = p["target"]
    if t.startswith("torch"):
        ins = "cublas"
    elif t.startswith("cuda:wgmma"):
        ins = "wgmma"
    elif fa in ("e4m3fn", "e5m2"):
        ins = "mma.m16n8k16.fp8" if ".m16n8k16." in t or record != PROBE_RECORDS[0] else "mma.m16n8k32.fp8"
    else:
        ins = "mma"
    return _device("H100").model((fa, fb) if fa != fb else fa, fd, ins)


def probe_path(record: str, p: dict) -> Replay:
    """Every row one probe sent to the GPU, through the preset: the same value with the same sign, or NaN
    for NaN (the record keeps values, not codes)."""
    t0 = time.perf_counter()
    model = probe_preset(record, p)
    k = p["k"]
    rows = [r for obs in p["observations"].values() for r in obs]
    A, B = np.zeros((len(rows), k)), np.zeros((len(rows), k))
    for i, r in enumerate(rows):
        for j, h in r["a"].items():
            A[i, int(j)] = _value(h)
        for j, h in r["b"].items():
            B[i, int(j)] = _value(h)
    C = np.array([_value(r["c"]) for r in rows])
    want = np.array([_value(r["d"]) for r in rows])
    got = np.asarray(dot(A, B, C, model=model)).astype(np.float64)
    same = ((got == want) & (np.signbit(got) == np.signbit(want))) | (np.isnan(got) & np.isnan(want))
    last = p["verification"][-1] if p.get("verification") else {}
    note = f"verified on {last['rows']:,} rows by the probe" if "rows" in last else ""
    return _compare("probe record", record, "H100", f"{p['target']} {p['formats']}", model, A, B, C,
                    got.view(np.uint64), want.view(np.uint64), 64, t0, note=note, same=same)


def probe_records(folder: Path | None = None) -> list[Replay]:
    """Every probe record's rows replayed (:func:`probe_path`)."""
    folder = HARDWARE if folder is None else Path(folder)
    out = []
    for name in PROBE_RECORDS:
        path = folder / name
        if path.exists():
            doc = json.loads(gzip.open(path).read())
            out += [probe_path(name, p) for p in doc.get("paths", doc.get("runs", [])) if p.get("observations")]
    return out


def replay_all(progress: Any = None, parts: Iterable[str] = ("golden", "records", "probes"),
               devices: Iterable[str] | None = None) -> list[Replay]:
    """Every replay of ``parts`` (golden data where present, the project's records, the probe records), in
    that order, of ``devices`` (preset names; default all: the records are the H100's); ``progress``:
    :func:`blockfma.progress.reporter`'s argument."""
    say = reporter(progress)
    names = None if devices is None else set(devices)
    out: list[Replay] = []
    for part in parts:
        if part != "golden" and names is not None and "H100" not in names:
            continue
        if say:
            say(f"replaying the {part} data through the presets ...")
        out += golden(devices=names) if part == "golden" else records() if part == "records" else probe_records()
    return out
