"""Device presets as data: device -> instruction -> (input, output) -> Model, each with its sources.

The presets live in declarative tables beside this module, one file per vendor, and the publications they
rest on in ``sources.json``; each device says which sources it rests on and how well they agree
(``confidence``), and where sources conflict keeps the other reading as a named variant (``variants``).
A measured device uses the same schema, ``blockfma-devices/1``; ``bf.device("my-gpu.json")`` and
``BLOCKFMA_DEVICE_PATH`` load such files (docs/presets.md).

    >>> import blockfma as bf
    >>> bf.device("H200").name
    'H100'
    >>> bf.device("A100").model("fp16", "fp32").block_width
    8
"""

from __future__ import annotations

import difflib
import fnmatch
import itertools
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import formats as _formats
from ..evidence import Basis, Evidence
from ..files import write_text
from ..model import Model, params

__all__ = ["Source", "Instruction", "Device", "OpenQuestion", "SOURCES", "SCHEMA", "device", "devices", "names",
           "load", "save", "open_questions", "input_key", "rule_evidence"]

SCHEMA = "blockfma-devices/1"
_HERE = Path(__file__).resolve().parent
_VENDOR_FILES = ("nvidia.json", "amd.json", "cpu.json", "reference.json")


@dataclass(frozen=True)
class Source:
    """A publication or dataset a preset rests on."""

    key: str
    citation: str
    kind: str  # "hardware study", "simulator", "vendor manual", "vendor note", "hardware data"


def _load_sources(path: Path) -> dict[str, Source]:
    doc = json.loads(path.read_text())
    return {e["key"]: Source(e["key"], e["citation"], e["kind"]) for e in doc["sources"]}


SOURCES: dict[str, Source] = _load_sources(_HERE / "sources.json")


def input_key(input_format: Any) -> str:
    """The inputs' name as models are filed: ``"fp16"``, or ``"e4m3fn*e5m2"`` for A and B in different
    formats (given as that name, as a pair of names or Formats): :func:`blockfma.formats.pair_name`."""
    return _formats.pair_name(*_formats.pair(input_format))


@dataclass(frozen=True)
class OpenQuestion:
    """A reading of a device that no evidence settles yet (or that evidence settled, kept for the record):
    the preset's reading, the other one, the Model fields that turn the first into the second (empty where
    the other reading is not a parameter yet), the evidence so far and how to settle it on hardware."""

    id: str
    devices: tuple[str, ...]
    question: str
    preset: str
    other: str
    change: Mapping[str, Any] = field(hash=False)
    evidence: str
    settle: str
    formats: tuple[str, ...] = ()  # input formats it concerns; empty: every model of the devices
    settled: bool = False

    def variant(self, device_name: str) -> str | None:
        """The name of the preset variant with the other reading (``"MI100~all-zero-sign"``), or None."""
        return f"{device_name}~{self.id}" if self.change else None


def _load_questions(path: Path) -> tuple[OpenQuestion, ...]:
    doc = json.loads(path.read_text())
    return tuple(OpenQuestion(q["id"], tuple(q["devices"]), q["question"], q["preset"], q["other"],
                              dict(q.get("change", {})), q["evidence"], q["settle"], tuple(q.get("formats", ())),
                              bool(q.get("settled", False))) for q in doc["questions"])


OPEN_QUESTIONS: tuple[OpenQuestion, ...] = _load_questions(_HERE / "open_questions.json")
EVIDENCE: dict[str, Any] = json.loads((_HERE / "evidence.json").read_text())  # what backs each model and rule


def _evidence(entries: Iterable[dict], claim: str, pair: str = "") -> tuple[Evidence, ...]:
    """Evidence of the table's ``entries`` that take ``pair`` (the keys of ``rows``, or ``pairs``: every pair)."""
    out = [Evidence(e.get("claim", claim).format(model=claim), Basis(e["basis"]), e["source"],
                    e.get("rows", {}).get(pair, e.get("count")), claim if "claim" in e else "")
           for e in entries if any(fnmatch.fnmatchcase(pair, p) for p in e.get("rows") or e.get("pairs", ["*"]))]
    return tuple(sorted(out, key=lambda e: list(Basis).index(e.basis)))


def rule_evidence(dev: Device | str | None, *rules: str) -> tuple[Evidence, ...]:
    """What backs rules of ``bf.torch.emulate``'s routes (evidence.json's ``rules``) on a device (or its name): the
    entries of that device, else those of every device (``"*"``: also where there is none, for ``model=``)."""
    name, out = getattr(dev, "name", dev), ()
    for rule in rules:
        entries = EVIDENCE["rules"][rule]["evidence"]
        own = [e for e in entries if e["device"] == name] or [e for e in entries if e["device"] == "*"]
        out += _evidence(own, EVIDENCE["rules"][rule]["claim"])
    return out


def open_questions(device_name: str | None = None, *, settled: bool = True) -> list[OpenQuestion]:
    """The open questions (and, with ``settled``, the settled ones) of a device, or of every device."""
    name = None if device_name is None else device(device_name).name
    return [q for q in OPEN_QUESTIONS if (name is None or name in q.devices) and (settled or not q.settled)]


@dataclass(frozen=True)
class Instruction:
    """One instruction path of a device and the Model of each (input, output) format pair it takes.

    ``k`` is the instruction's inner dimension per input format (a multiple of the model's block width:
    A100's fp16 ``mma.m16n8k16`` is two chained blocks of 8)."""

    name: str
    models: Mapping[tuple[str, str], Model] = field(hash=False)
    k: Mapping[str, int] = field(default_factory=dict, hash=False)
    ptx: str = ""

    def pairs(self) -> list[tuple[str, str]]:
        return list(self.models)


@dataclass(frozen=True)
class Device:
    """A named preset: instruction paths with their models, sources and how far to trust them; ``variants``
    name the presets that read one of its open questions another way (each with ``variant_of`` this one)."""

    name: str
    vendor: str
    arch: str
    instructions: tuple[Instruction, ...]
    sources: tuple[str, ...]
    confidence: str  # "high", "medium", "low"
    notes: str = ""
    aliases: tuple[str, ...] = ()
    variants: tuple[str, ...] = ()
    variant_of: str | None = None
    specification_only: bool = False  # rests on vendor manuals, no public hardware study
    measured: Mapping[str, Any] | None = field(default=None, hash=False, compare=False)  # a probe run's metadata

    def __repr__(self) -> str:
        """One line: ``Device('V100': NVIDIA Volta sm_70, 1 instruction, 2 format pairs)``.  The full form:
        :meth:`describe` (metadata and every model's features) or :meth:`to_dict` (the devices-file entry).
        (Defined in the class body, so the dataclass keeps it; equality and hashing stay the dataclass's.)"""
        n, pairs = len(self.instructions), len(self.pairs())
        what = " ".join(x for x in (self.vendor, self.arch) if x) or "no vendor"
        return (f"Device({self.name!r}: {what}, {n} instruction{'s' if n != 1 else ''}, "
                f"{pairs} format pair{'s' if pairs != 1 else ''})")

    @property
    def default_instruction(self) -> Instruction:
        return self.instructions[0]

    def instruction(self, name: str | None = None) -> Instruction:
        if name is None:
            return self.default_instruction
        for ins in self.instructions:
            if ins.name == name or ins.ptx == name:
                return ins
        raise ValueError(f"{self.name} has no instruction {name!r}; it has "
                         f"{', '.join(i.name for i in self.instructions)}")

    def pairs(self) -> list[tuple[str, str]]:
        """Every (input, output) format pair some instruction of the device takes."""
        return list(dict.fromkeys(p for ins in self.instructions for p in ins.models))

    def model(self, input_format: Any = "fp16", output_format: str = "fp32",
              instruction: str | None = None) -> Model:
        """The Model for a format pair: from ``instruction`` if given, else from the default instruction,
        else from the first instruction that takes the pair.  A and B in different formats: a pair
        ``("e4m3fn", "e5m2")`` or the name ``"e4m3fn*e5m2"``."""
        key = (input_key(input_format), _formats.get(output_format).name)
        candidates = [self.instruction(instruction)] if instruction else list(self.instructions)
        for ins in candidates:
            if key in ins.models:
                return ins.models[key]
        where = f"instruction {instruction!r} of {self.name}" if instruction else self.name
        have = ", ".join(f"{i}->{o}" for i, o in (candidates[0].pairs() if instruction else self.pairs()))
        raise ValueError(f"{where} has no model for {key[0]} inputs with {key[1]} output; available: {have}")

    def reading(self, question: str) -> Device:
        """This device with an open question's other reading applied to the models it concerns: the preset
        variant ``"<device>~<question id>"``."""
        q = next((q for q in OPEN_QUESTIONS if q.id == question and self.name in q.devices), None)
        if q is None:
            ids = [q.id for q in OPEN_QUESTIONS if self.name in q.devices]
            raise ValueError(f"{self.name} has no open question {question!r}; it has {', '.join(ids) or 'none'}")
        if not q.change:
            raise ValueError(f"{self.name}: the other reading of {question!r} ({q.other}) is not one value of a "
                             "Model parameter, so there is no variant to run")
        instructions = []
        for ins in self.instructions:
            models = {}
            for key, m in ins.models.items():
                concerned = not q.formats or key[0] in q.formats
                try:
                    models[key] = m.replace(**q.change) if concerned else m
                except ValueError:  # the change does not apply to this family (e.g. late_cut on fma-chain)
                    models[key] = m
            instructions.append(Instruction(ins.name, models, dict(ins.k), ins.ptx))
        return Device(q.variant(self.name) or self.name, self.vendor, f"{self.arch} ({q.other})", tuple(instructions),
                      self.sources, "low", f"The other reading of '{q.id}': {q.other}. {q.evidence}",
                      variant_of=self.name)

    def evidence(self, input_format: Any = "fp16", output_format: str = "fp32",
                 instruction: str | None = None) -> tuple[Evidence, ...]:
        """What backs :meth:`model`'s model for the pair (evidence.json, docs/evidence.md): our hardware records
        with the rows each holds, published data, MMA-Sim's reading, assumptions; a variant adds its reading."""
        self.model(input_format, output_format, instruction)  # no such model: its ValueError
        ins = self.instruction(instruction) if instruction else self.instruction_for(input_format, output_format)
        pair = f"{input_key(input_format)}->{_formats.get(output_format).name}"
        if self.variant_of is not None:
            return device(self.variant_of).evidence(input_format, output_format, instruction) + (
                Evidence(f"{self.name}'s reading of an open question", Basis.ASSUMED, self.arch),)
        claim, gpu = f"{self.name} {ins.name} {pair} model", (self.measured or {}).get("gpu")
        if gpu:  # a device file blockfma.probe wrote from a GPU
            return (Evidence(claim, Basis.RECORDED, f"blockfma.probe on {gpu}",
                             self.measured.get("verification", {}).get("rows")),)
        entries = [e for e in EVIDENCE["models"] if fnmatch.fnmatchcase(self.name, e["device"])
                   and fnmatch.fnmatchcase(ins.name, e["instruction"])]
        return _evidence(entries, claim, pair)

    def instruction_for(self, input_format: Any, output_format: str) -> Instruction:
        """The instruction :meth:`model` would use for the pair."""
        key = (input_key(input_format), _formats.get(output_format).name)
        for ins in self.instructions:
            if key in ins.models:
                return ins
        raise ValueError(f"{self.name} has no instruction for {key[0]}->{key[1]}")

    def to_dict(self) -> dict[str, Any]:
        """The device in the ``blockfma-devices/1`` schema (what :func:`save` writes, :func:`load` reads)."""
        out: dict[str, Any] = {"name": self.name, "vendor": self.vendor, "arch": self.arch,
                               "confidence": self.confidence, "sources": list(self.sources)}
        for key, value in (("aliases", list(self.aliases)), ("variants", list(self.variants)),
                           ("variant_of", self.variant_of), ("specification_only", self.specification_only),
                           ("measured", dict(self.measured) if self.measured else None)):
            if value:
                out[key] = value
        out["notes"] = self.notes
        out["instructions"] = []
        for ins in self.instructions:
            entry: dict[str, Any] = {"name": ins.name}
            if ins.ptx:
                entry["ptx"] = ins.ptx
            if ins.k:
                entry["k"] = dict(ins.k)
            entry["models"] = [m.to_dict() for m in ins.models.values()]
            out["instructions"].append(entry)
        return out

    def describe(self) -> dict:
        """Metadata as plain values (for JSON and the ``devices`` command)."""
        return {
            "name": self.name,
            "vendor": self.vendor,
            "arch": self.arch,
            "aliases": list(self.aliases),
            "confidence": self.confidence,
            "specification_only": self.specification_only,
            "sources": [SOURCES[s].citation for s in self.sources],
            "notes": self.notes,
            "variants": list(self.variants),
            "variant_of": self.variant_of,
            "instructions": [
                {"name": ins.name, "ptx": ins.ptx, "k": dict(ins.k),
                 "models": {f"{i}->{o}": m.features() for (i, o), m in ins.models.items()}}
                for ins in self.instructions
            ],
        }


# --- the schema: files of devices ---------------------------------------------------------------------------
_DEVICE_FIELDS = {"name", "vendor", "arch", "confidence", "sources", "aliases", "variants", "variant_of",
                  "specification_only", "notes", "instructions", "measured"}
_INSTRUCTION_FIELDS = {"name", "ptx", "k", "template", "models", "mixed", "store"}
_MODEL_FIELDS = {p.key or f.name for f, p in params()} | {"name"}  # a model's keys (Model.to_dict)


class DeviceFileError(ValueError):
    """A devices file that does not follow the schema; the message names the file, the place and the fix."""


def _unknown(where: str, given: Iterable[str], known: set[str]) -> None:
    extra = sorted(set(given) - known)
    if extra:
        raise DeviceFileError(f"{where}: unknown field {extra[0]!r} (known: {', '.join(sorted(known))})")


def _models(entry: dict, templates: dict, template: str | None, where: str) -> list[Model]:
    """One table entry -> Models: the template's fields, then the entry's; ``each`` expands a grid, its
    values filling ``{input}``-style places in the name."""
    entry = dict(entry)
    each = entry.pop("each", {})
    template = entry.pop("template", template)
    _unknown(where, entry, _MODEL_FIELDS | {"input", "output"})
    if template is not None and template not in templates:
        raise DeviceFileError(f"{where}: unknown template {template!r} (the file defines "
                              f"{', '.join(templates) or 'none'})")
    base = {**templates.get(template, {}), **entry}
    keys = list(each)
    out = []
    for combo in itertools.product(*(each[k] for k in keys)) if keys else [()]:
        fields = {**base, **dict(zip(keys, combo))}
        fields["name"] = str(fields.get("name", "")).format(**dict(zip(keys, combo)))
        if "family" not in fields or "input" not in fields or "output" not in fields:
            raise DeviceFileError(f"{where}: a model needs 'family', 'input' and 'output' (directly or from a "
                                  "template)")
        try:
            out.append(Model.from_dict(fields))
        except (ValueError, KeyError) as exc:
            raise DeviceFileError(f"{where}: {exc}") from None
    return out


def _device(entry: dict, templates: dict, where: str) -> Device:
    _unknown(where, entry, _DEVICE_FIELDS)
    name = entry.get("name")
    if not name:
        raise DeviceFileError(f"{where}: a device needs a 'name'")
    where = f"{where}: device {name!r}"
    for src in entry.get("sources", []):
        if src not in SOURCES:
            raise DeviceFileError(f"{where}: unknown source {src!r}; cite one of sources.json or add it to the "
                                  "file's own 'sources' list")
    instructions = []
    for ins in entry.get("instructions", []):
        iwhere = f"{where}, instruction {ins.get('name')!r}"
        _unknown(iwhere, ins, _INSTRUCTION_FIELDS)
        if not ins.get("name"):
            raise DeviceFileError(f"{iwhere}: an instruction needs a 'name'")
        models: dict[tuple[str, str], Model] = {}
        for m in ins.get("models", []):
            for model in _models(m, templates, ins.get("template"), iwhere):
                models[(model.input_name, model.output_format.name)] = model
        k = dict(ins.get("k", {}))
        # "mixed": [[A's format, B's format], ...]: the instruction also takes A and B in different formats,
        # through the datapath of A's format (MMA-Sim's reading of every mixed fp8 path)
        for pair in ins.get("mixed", []):
            a, b = (_formats.get(f).name for f in pair)
            for (i, o), model in list(models.items()):
                if i == a:
                    mixed = model.replace(b_input_format=b, name=f"{model.name} ({a}*{b})" if model.name else "")
                    models[(mixed.input_name, o)] = mixed
                    if a in k:
                        k.setdefault(mixed.input_name, k[a])
        # "store": {input: output}: results also stored in a narrower output (AMD MFMA through rocWMMA with
        # fp16/bf16 D, FTTN's Table IV): each block as the fp32 model, then rounded to nearest even
        for inp, out in ins.get("store", {}).items():
            inp, out = _formats.get(inp).name, _formats.get(out).name
            for (i, o), model in list(models.items()):
                if _formats.pair(i)[0].name == inp and o == "fp32":
                    stored = model.replace(output_format=out, accumulator_format=o,
                                           name=f"{model.name} stored as {out}" if model.name else "")
                    models[(i, out)] = stored
        instructions.append(Instruction(ins["name"], models, k, ins.get("ptx", "")))
    if not instructions:
        raise DeviceFileError(f"{where}: a device needs at least one instruction with models")
    return Device(name, entry.get("vendor", ""), entry.get("arch", ""), tuple(instructions),
                  tuple(entry.get("sources", ())), entry.get("confidence", "low"), entry.get("notes", ""),
                  tuple(entry.get("aliases", ())), tuple(entry.get("variants", ())), entry.get("variant_of"),
                  bool(entry.get("specification_only", False)), entry.get("measured"))


def load(path: str | os.PathLike) -> list[Device]:
    """The devices of one ``blockfma-devices/1`` file (a file's own ``sources`` join the registry)."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise DeviceFileError(f"{path}: cannot read a devices file ({exc})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise DeviceFileError(f"{path}: not a devices file (it needs \"schema\": \"{SCHEMA}\")")
    for src in doc.get("sources", []):
        SOURCES.setdefault(src["key"], Source(src["key"], src["citation"], src.get("kind", "hardware data")))
    return [_device(e, doc.get("templates", {}), str(path)) for e in doc.get("devices", [])]


def save(path: str | os.PathLike, devs: Iterable[Device], *, sources: Iterable[Source] = ()) -> Path | None:
    """Write devices as a ``blockfma-devices/1`` file, every model written out in full, atomically through
    :func:`blockfma.files.write_text`: a regular file (a symbolic link is followed) in a folder that
    exists, or ``"-"`` for standard output (then None is returned, else the path)."""
    doc: dict[str, Any] = {"schema": SCHEMA}
    sources = list(sources)
    if sources:
        doc["sources"] = [{"key": s.key, "citation": s.citation, "kind": s.kind} for s in sources]
    doc["devices"] = [d.to_dict() for d in devs]
    return write_text(path, json.dumps(doc, indent=1, ensure_ascii=False) + "\n")


_DEVICES: dict[str, Device] = {}
_LOOKUP: dict[str, str] = {}


def _register(dev: Device) -> None:
    _DEVICES[dev.name] = dev
    for alias in (dev.name, *dev.aliases):
        _LOOKUP[_key(alias)] = dev.name


def _key(name: str) -> str:
    return str(name).strip().lower().replace(" ", "").replace("-", "").replace("_", "")


for _file in _VENDOR_FILES:
    for _d in load(_HERE / _file):
        _register(_d)
for _entry in filter(None, os.environ.get("BLOCKFMA_DEVICE_PATH", "").split(os.pathsep)):
    for _file in sorted(Path(_entry).glob("*.json")) if Path(_entry).is_dir() else [Path(_entry)]:
        for _d in load(_file):
            _register(_d)


def names() -> list[str]:
    """Names of the presets (variants included), in presentation order."""
    return list(_DEVICES)


def devices(*, variants: bool = True) -> list[Device]:
    """Every preset, optionally without the alternative readings."""
    return [d for d in _DEVICES.values() if variants or d.variant_of is None]


def device(name: str | os.PathLike | Device) -> Device:
    """Look up a preset by name or alias (case, spaces, '-' and '_' ignored), or load a devices file by its
    path (``.json``): its device is then known by name to every later call."""
    if isinstance(name, Device):
        return name
    if isinstance(name, os.PathLike) or str(name).endswith(".json"):
        found = load(name)
        if len(found) != 1:
            raise ValueError(f"{name}: the file holds {len(found)} devices "
                             f"({', '.join(d.name for d in found)}); pass one of their names after loading it")
        _register(found[0])
        return found[0]
    if "~" in str(name):  # a preset with an open question's other reading: "MI100~all-zero-sign"
        base, _, question = str(name).partition("~")
        return device(base).reading(question.strip())
    k = _key(name)
    if k in _LOOKUP:
        return _DEVICES[_LOOKUP[k]]
    every = list(_DEVICES) + [a for d in _DEVICES.values() for a in d.aliases]
    close = difflib.get_close_matches(str(name), every, n=4, cutoff=0.4)
    if not close:
        close = [n for n in every if _key(n).startswith(k[:2])][:4] if k else []
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise ValueError(f"unknown device {name!r}{hint} (presets: {', '.join(_DEVICES)})")
