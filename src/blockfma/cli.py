"""The ``blockfma`` command: a thin layer over the Python API.

Commands: ``devices``, ``dot``, ``compare``, ``report``, ``probe``, ``smt diff|prove|worst|list|query``,
``multiword`` and ``reproduce``; each one's synopsis is in docs/cli.md and its ``--help``.

Numbers take the exact forms of :mod:`blockfma.literals` (``2^-24``, ``1-2^-11``, ``0x1.8p-3``,
``3*2^-5``); ``--a``/``--b`` take comma-separated lists and may be repeated.

Every command takes ``--json [FILE|-]``: the same data as the text, as JSON, written to FILE (checked
before the work starts; the text is printed first) or, with ``-`` or no FILE, printed instead of the text.
The long ones (report, probe, smt worst and query, multiword) take ``--progress``/``--quiet``.

Exit status (:data:`EXIT`): 0 the answer is the one asked for (a result, a proof, a verified model, a witness found); 1
it is not (a refuted proof, a probe that did not verify, no witness where one was sought); 2 no answer (a solver's
"unknown", a time-out) or bad usage, which prints one line naming the option, the value and the fix; 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import __version__
from . import formats as _formats
from . import files, literals, progress as _progress, report as _report
from .arguments import ArgumentError
from .devices import SOURCES, Device, device as _device, devices as _devices, open_questions as _questions
from .engine import dot as _dot
from .evidence import weakest
from .formats import RoundingMode
from .model import Model

__all__ = ["main", "build_parser", "Answer", "EXIT"]

EXIT = {"as asked": 0, "not as asked": 1, "unknown or usage": 2, "interrupted": 130}
"""The exit statuses (see the module docstring)."""

_VALUE_OPTIONS = ("--a", "--b", "--c", "--scale-a", "--scale-b")
_MODES = "rne, rz, ru, rd, rna, ro or device"
_LONG_DECIMAL = 80  # exact decimal expansions up to this many characters are printed in text output


class _Usage(Exception):
    """A user error: printed as one line, exit status 2."""


@dataclass
class Answer:
    """What a command returns: ``text`` for a person, ``data`` for ``--json`` (plain values; None: the command has no
    JSON form yet and ``--json`` prints ``{"text": text}``), ``status`` the exit status (:data:`EXIT`)."""

    text: str
    data: Any = None
    status: int = 0
    then: Any = None  # a function of no arguments run after the results are printed (e.g. a --record writer)


# --- operands --------------------------------------------------------------------------------------------
def _split(values: Sequence[str] | None, option: str) -> list[str]:
    """Repeated options and comma-separated lists, flattened: ['1,2', '3'] -> ['1', '2', '3']; an empty
    value is refused, naming ``option``."""
    out = [part.strip() for v in values or () for part in v.split(",")]
    if any(not p for p in out):
        raise _Usage(f"{option} {','.join(values or ())!r}: empty value; separate values with single commas")
    return out


def _modes(model: Model, round_inputs: str | None) -> tuple[RoundingMode | None, RoundingMode | None]:
    """Rounding modes for (a and b, c): none, the one given, or the device's ('device')."""
    if round_inputs is None:
        return None, None
    if round_inputs.strip().lower() == "device":
        return model.input_rounding or RoundingMode.TiesToEven, RoundingMode.TiesToEven
    mode = RoundingMode.parse(round_inputs)
    return mode, mode


def _values(texts: list[str], fmt: _formats.Format, mode: RoundingMode | None, what: str,
            hint: str = f"pass --round-inputs MODE to round it (MODE: {_MODES})") -> list[float]:
    out = []
    for i, text in enumerate(texts):
        try:
            out.append(literals.to_float(text, fmt, mode))
        except literals.NotRepresentable as exc:
            raise exc.with_hint(f"{what}[{i}] = ", hint) from None
        except ValueError as exc:  # not a number: the option that gave it first
            raise _Usage(f"{what}[{i}]: {exc}") from None
    return out


def _operands(model: Model, a: list[str], b: list[str], c: str, round_inputs: str | None
              ) -> tuple[list[float], list[float], float]:
    if not a or not b:
        raise _Usage("give both --a and --b (comma-separated values, e.g. --a 1,1 --b 2^-24,2^-24)")
    if len(a) != len(b):
        raise _Usage(f"--a has {len(a)} values and --b has {len(b)}; they must have the same length k")
    mode_ab, mode_c = _modes(model, round_inputs)
    return (_values(a, model.input_format, mode_ab, "--a"), _values(b, model.b_format, mode_ab, "--b"),
            _values([c], model.c_format, mode_c, "--c")[0])


def _result(d: np.ndarray, model: Model) -> dict[str, Any]:
    """Every exact view of one result: shortest repr in the output dtype, exact decimal, binary, hex, bits."""
    x = float(d)
    fmt = model.output_format
    return {"value": x, "shortest": str(np.asarray(d).reshape(())[()]), "decimal": literals.exact_decimal(x),
            "binary": literals.exact_binary(x, fmt), "hex": literals.hex_float(x),
            "bits": literals.bits_hex(np.asarray(d), fmt)}


def _run(dev: Device, args: argparse.Namespace) -> dict[str, Any]:
    """One device's d = a·b + c with its model; a dict of plain values."""
    model = dev.model(args.input, args.output, args.instruction)
    ins = dev.instruction(args.instruction) if args.instruction else dev.instruction_for(args.input, args.output)
    a, b, c = _operands(model, _split(args.a, '--a'), _split(args.b, '--b'), args.c, args.round_inputs)
    scales = {s: _values(_split(getattr(args, s), o), _formats.fp64, None, o, "write a value of the scale format")
              for s, o in (("scale_a", "--scale-a"), ("scale_b", "--scale-b")) if getattr(args, s, None)}
    d = _dot(a, b, c, model=model, **scales)  # bf.dot checks the scales (errors name --scale-a / --scale-b)
    return {"device": dev.name, "instruction": ins.name, "model": model.name, "summary": model.summary(),
            "input": model.input_name, "output": model.output_format.name, "k": len(a),
            "a": a, "b": b, "c": c, **scales, "result": _result(d, model)}


# --- commands --------------------------------------------------------------------------------------------
def _wrap(label: str, text: str, indent: int = 2) -> list[str]:
    pad = " " * indent
    return textwrap.wrap(text, 100, initial_indent=f"{pad}{label}", subsequent_indent=pad + " " * len(label))


def _pairs_text(pairs: list[tuple[str, str]]) -> str:
    """'fp16->fp32, bf16->fp32', or '{fp16,bf16}->{fp32,fp64}' when the pairs are a full product."""
    ins, outs = list(dict.fromkeys(i for i, _ in pairs)), list(dict.fromkeys(o for _, o in pairs))
    if len(ins) > 1 and len(outs) > 1 and len(pairs) == len(ins) * len(outs):
        return f"{{{','.join(ins)}}}->{{{','.join(outs)}}}"
    return ", ".join(f"{i}->{o}" for i, o in pairs)


def _grouped_summaries(models: Any) -> list[str]:
    """Model summaries, pairs whose models differ only in the formats sharing one line."""
    groups: dict[str, list[tuple[str, str]]] = {}
    for (i, o), m in models.items():
        groups.setdefault(m.summary().replace(f"{i}->{o}", "{pairs}", 1), []).append((i, o))
    return [template.replace("{pairs}", _pairs_text(pairs)) for template, pairs in groups.items()]


def _device_lines(dev: Device, detail: bool) -> list[str]:
    head = f"{dev.name}  {dev.vendor} {dev.arch}  (confidence {dev.confidence}"
    head += ", vendor manual only)" if dev.specification_only else ")"
    lines = [head]
    if dev.aliases:
        lines += _wrap("aliases: ", ", ".join(dev.aliases))
    if dev.variant_of:
        lines.append(f"  variant of: {dev.variant_of}")
    for n, ins in enumerate(dev.instructions):
        label = f"{ins.name}{' (default)' if n == 0 else ''}: "
        if detail and ins.ptx:
            lines += _wrap(label, ins.ptx)
            label = " " * len(label)
        if detail:
            entries = [f"{m.summary()}{f'  k={ins.k[i]}' if i in ins.k else ''}" for (i, o), m in ins.models.items()]
        else:
            entries = _grouped_summaries(ins.models)
        for i, entry in enumerate(entries):
            lines.append(f"  {label if i == 0 else ' ' * len(label)}{entry}")
            if detail:  # what backs the model: the weakest of its claims, then every source
                ev = dev.evidence(*list(ins.models)[i], ins.name)
                lines += _wrap(f"evidence ({weakest(ev).value}): ", "; ".join(e.label for e in ev), len(label) + 4)
    if dev.variants:
        lines.append(f"  variants: {', '.join(dev.variants)}")
    if detail:
        lines.append("  sources:")
        lines += [ln for s in dev.sources for ln in _wrap(f"{s}: ", SOURCES[s].citation, 4)]
    else:
        lines.append(f"  sources: {', '.join(dev.sources)}")
    if dev.notes:
        lines += _wrap("notes: ", dev.notes)
    questions = _questions(dev.name) if dev.variant_of is None else []
    if questions and not detail:
        listed = [f"{q.id}{' (settled)' if q.settled else ''}" for q in questions]
        lines += _wrap("open questions: ", ", ".join(listed) + f" (blockfma devices {dev.name!r} explains)")
    for q in questions if detail else []:
        lines += _wrap(f"{'settled' if q.settled else 'open'} question {q.id}: ", q.question)
        lines += _wrap("preset: ", q.preset, 4) + _wrap("other: ", q.other, 4)
        variant = q.variant(dev.name)
        lines += _wrap("variant: ", f"{variant!r} runs the other reading" if variant else
                       "none (the other reading is not one value of a Model parameter)", 4)
        lines += _wrap("evidence: ", q.evidence, 4) + _wrap("to settle: ", q.settle, 4)
    return lines


def _device_json(dev: Device) -> dict[str, Any]:
    d = dev.describe()
    d["source_keys"] = list(dev.sources)
    d["open_questions"] = [{"id": q.id, "settled": q.settled, "question": q.question, "preset": q.preset,
                            "other": q.other, "variant": q.variant(dev.name), "evidence": q.evidence,
                            "settle": q.settle} for q in _questions(dev.name)] if dev.variant_of is None else []
    d["default_instruction"] = dev.default_instruction.name
    for ins, entry in zip(dev.instructions, d["instructions"]):
        entry["summaries"] = {f"{i}->{o}": m.summary() for (i, o), m in ins.models.items()}
        entry["evidence"] = {f"{i}->{o}": [{**vars(e), "basis": e.basis.value} for e in dev.evidence(i, o, ins.name)]
                             for i, o in ins.models}
    return d


def cmd_devices(args: argparse.Namespace) -> Answer:
    if args.name:
        dev = _device(args.name)
        return Answer("\n".join(_device_lines(dev, True)), _device_json(dev))
    devs = _devices()
    blocks = ["\n".join(_device_lines(d, False)) for d in devs]
    used = list(dict.fromkeys(s for d in devs for s in d.sources))
    legend = ["Sources:"] + [ln for s in used for ln in _wrap(f"{s}: ", SOURCES[s].citation)]
    text = "\n\n".join(blocks + ["\n".join(legend), "Details of one preset: blockfma devices NAME"])
    return Answer(text, [_device_json(d) for d in devs])


def _inputs_text(args: argparse.Namespace, run: dict[str, Any]) -> list[str]:
    a, b = _split(args.a, '--a'), _split(args.b, '--b')
    if args.round_inputs:  # show the values actually used
        a, b = [repr(v) for v in run["a"]], [repr(v) for v in run["b"]]
        c = repr(run["c"])
        tag = f", rounded {args.round_inputs}"
    else:
        c, tag = args.c, ""
    return [f"a ({run['input']}{tag})  {', '.join(a)}", f"b ({run['input']}{tag})  {', '.join(b)}",
            f"c ({run['output']}{tag})  {c}"] + [f"{s} ({len(run[s])}, one per block)  "
                                                  f"{', '.join(_split(vars(args)[s], s))}" for s in run if "scale" in s]


def cmd_dot(args: argparse.Namespace) -> Answer:
    run = _run(_device(args.device), args)
    r = run["result"]
    decimal = r["decimal"] if len(r["decimal"]) <= _LONG_DECIMAL else f"({len(r['decimal'])} characters; --json)"
    lines = [f"{run['device']}, instruction {run['instruction']}: {run['summary']}"]
    lines += _inputs_text(args, run)
    lines += [f"d = a·b + c, k = {run['k']}, in {run['output']}:",
              f"  value    {r['shortest']}",
              f"  exact    {decimal}",
              f"  binary   {r['binary']}",
              f"  hex      {r['hex']}",
              f"  bits     {r['bits']}"]
    return Answer("\n".join(lines), run)


def _compare_devices(names: list[str], inp: str, out: str) -> list[Device]:
    key = (_formats.get(inp).name, _formats.get(out).name)
    all_ = any(n.lower() == "all" for n in names)
    devs = [d for d in _devices() if key in d.pairs()] if all_ else _report.resolve(names, [])
    if "exact" not in [d.name for d in devs]:
        devs.append(_device("exact"))
    return devs


def cmd_compare(args: argparse.Namespace) -> Answer:
    key = (_formats.get(args.input).name, _formats.get(args.output).name)
    runs: list[dict[str, Any]] = []
    for dev in _compare_devices(args.devices, args.input, args.output):
        if key not in dev.pairs():
            have = ", ".join(f"{i}->{o}" for i, o in dev.pairs())
            runs.append({"device": dev.name, "instruction": None, "summary": None, "result": None,
                         "note": f"no {key[0]}->{key[1]} model (has {have})"})
        else:
            runs.append(_run(dev, argparse.Namespace(**{**vars(args), "instruction": None})))
    rows = [{"device": r["device"], "instruction": r["instruction"],
             **({k: r["result"][k] for k in ("shortest", "bits", "binary")} if r["result"] else {}),
             "model": r["summary"] or r["note"]} for r in runs]
    head = f"d = a·b + c with {key[0]} inputs, {key[1]} output, k = {len(_split(args.a, '--a'))}"
    return Answer(head + "\n" + _report.table(rows, ["device", "instruction", "shortest", "bits", "binary", "model"]),
                  runs)


def cmd_report(args: argparse.Namespace) -> Answer:
    devs = _split([args.devices], '--devices') if args.devices is not None else None
    inputs = args.fttn_inputs  # checked by the report (fp16 and/or bf16)
    secs = _report.sections(devs, inputs, not args.no_probes, progress=args.progress,
                            smt_timeout=None if args.smt_timeout == 0 else args.smt_timeout)
    data = _report.as_json(secs, _report.provenance())
    return Answer(_report.as_text(secs).rstrip("\n"), data,
                  then=None if args.html is None else lambda: _write_html(args.html, data))


def _write_html(path: str, data: dict[str, Any]) -> None:
    """The report's page (--html FILE), after the text is printed; atomically, like every results file."""
    from . import report_html

    report_html.write(path, data)


def _probe_jobs(args: argparse.Namespace) -> list[tuple[str, Any, str, str | None]]:
    """(target, input format, output format, instruction) for one probe or for --all."""
    spec = args.target or "sim"
    if not args.all:
        if not args.target:
            raise _Usage("name a TARGET (sim:DEVICE, a devices file, cuda, torch) or pass --all")
        return [(spec, _input_arg(args.input), args.output, args.instruction)]
    given = [o for o, v in (("--input", args.input), ("--output", args.output)) if type(v) is str] + \
        [o for o, v in (("--instruction", args.instruction), ("--k", args.k), ("--record", args.record))
         if v is not None]
    if given:  # --all takes every pair of every target itself: these would be ignored
        raise _Usage(f"{given[0]} cannot be combined with --all, which probes every format pair and instruction of "
                     "its targets, each at its own k (to choose them, probe one target)")
    kind = spec.split(":")[0].lower()
    if kind == "sim":
        from .probes.targets import sim_jobs

        devs = [spec.split(":", 1)[1]] if ":" in spec else None
        # the block-scaled instructions take scales: probes.scaled.probe_scaled probes them, not --all
        return [(s, inp, out, None) for s, inp, out, _ in sim_jobs(devs, scaled=False)]
    if kind == "cuda":
        from .probes import cuda

        cc = cuda.compute_capability() if cuda.available() else 0
        return [(f"cuda:{p.name}", (p.a_format, p.b_format), p.d_format, None) for p in cuda.PATHS.values()
                if p.sm <= cc] or [("cuda", _input_arg(args.input), args.output, None)]
    if kind == "torch":
        return [(spec, f, f, None) for f in ("fp16", "bf16", "fp32")]
    raise _Usage(f"--all takes sim, sim:DEVICE, cuda or torch, not {spec!r}")


def _input_arg(text: Any) -> Any:
    """--input as given ("fp16"), or A's and B's names for "A*B" and "A,B" (:func:`blockfma.formats.pair`)."""
    if isinstance(text, str) and ("*" in text or "," in text):
        try:
            return tuple(f.name for f in _formats.pair(text.replace(",", "*")))
        except ValueError as exc:
            raise ArgumentError("input_format", text, str(exc).split(" (known")[0]) from None
    return text


def cmd_probe(args: argparse.Namespace) -> Answer:
    """Probe one target (or every one with --all).  --record and --json are checked before any probing; the
    text (or, for ``--json -``, the JSON) is printed first, then the record and the JSON file are written.
    Exit status 0 when every probe verified, 1 when one did not, 2 for bad usage."""
    from .probes import TargetError, probe

    jobs = _probe_jobs(args)
    record = None
    if args.record is not None:
        if args.record == files.STDOUT:
            raise ArgumentError("record", args.record, "must be a file: a record is written, not printed",
                                fix="--json - prints the findings")
        record = files.destination(args.record, name="record")
        if args.json not in (None, files.STDOUT) and files.destination(args.json, name="json") == record:
            raise ArgumentError("record", args.record, "is also the --json file; one would replace the other",
                                fix="name two files")
    say = _progress.reporter(args.progress)
    rows, docs, found = [], [], []
    for n, (spec, inp, out, ins) in enumerate(jobs, 1):
        if say and len(jobs) > 1:
            say(f"[{n}/{len(jobs)}] {spec} {inp}->{out}")
        try:
            f = probe(spec, inp, out, k=args.k, instruction=ins, verify=args.verify, priors=args.priors,
                      seed=args.seed, progress=say or False)
        except TargetError as exc:
            raise _Usage(str(exc)) from None
        found.append(f)
        rows.append(f.row())
        docs.append(f.to_json())
        if args.all and args.json not in (None, files.STDOUT):  # an interrupted --all keeps what it did
            files.write_json(args.json, docs)
    cols = ["target", "pair", "k", "verified", "family", "L", "F", "e_zero", "alignment", "output_rounding",
            "subnormals", "nan", "calls", "rows", "seconds"]
    text = _report.table(rows, cols)
    if not args.all:
        f_doc = docs[0]
        if f_doc["verified"]:
            text += "\n\nModel: " + Model.from_dict(f_doc["model"]).summary()
        else:
            last = f_doc["verification"][-1] if f_doc["verification"] else {}
            text += (f"\n\nNo Model passed verification ({last.get('mismatches')} of {last.get('rows')} rows "
                     f"differ); first counterexample: {last.get('first_counterexample')}")
        if record is not None:
            text += (f"\nRecord: {args.record}" if f_doc["verified"] else
                     f"\n(no record written to {args.record}: the run did not verify)")
    data = docs if args.all else docs[0]
    status = 0 if all(d["verified"] for d in docs) else 1
    save = (lambda: found[0].save(record)) if record is not None and found[0].verified else None
    return Answer(text, data, status, then=save)  # the record is written after the results are printed


# --- smt ---------------------------------------------------------------------------------------------------
SMT_EXIT = {"diff": "0 a witness found, 1 proved equal (no witness exists), 2 unknown or vacuous",
            "prove": "0 proved, 1 refuted (a counterexample), 2 unknown or vacuous",
            "worst": "0 the bound is proved (status exact), 2 the search stopped first (a lower bound only)",
            "query": "0 the expected answer, 1 another answer, 2 no answer (unknown)",
            "list": "0"}
"""The exit statuses of ``blockfma smt ACTION`` (bad usage is 2 everywhere)."""


# smt.TOTAL_TIMEOUT for --total-timeout's help, without importing z3 (a test holds them equal)
_SMT_TOTAL_TIMEOUT = 600.0


def _seconds(text: str) -> float:
    """--timeout S and --total-timeout S: positive seconds, or inf (or none) for no limit."""
    if text.strip().lower() in ("none", "inf", "infinity"):
        return float("inf")
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text}: must be a positive number of seconds (inf: no limit)")
    return value


def _setting(text: str) -> tuple[str, Any]:
    name, sep, v = (part.strip() for part in text.partition("="))
    if not sep or not name:
        raise _Usage(f"--set {text}: takes PARAM=VALUE (e.g. --set carry_bits=3)")
    if v.lower() in ("none", "true", "false"):
        return name, None if v.lower() == "none" else v.lower() == "true"
    try:
        return name, int(v)
    except ValueError:
        return name, v


def _smt_models(args: argparse.Namespace) -> list[Model]:
    import dataclasses
    import difflib

    from . import smt

    names = [args.dev1] + ([args.dev2] if getattr(args, "dev2", None) else [])
    models = [smt.api.resolve(n, _input_arg(args.input), args.output) for n in names]
    if getattr(args, "set", None):
        settings = [(t, *_setting(t)) for t in args.set]
        fields = [f.name for f in dataclasses.fields(Model) if f.name != "name"]
        last = models[-1]
        for text, key, value in settings:  # each alone first, so that the error names the one at fault
            if key not in fields:
                close = difflib.get_close_matches(key, fields, n=1)
                raise _Usage(f"--set {text}: the model has no parameter {key!r}"
                             + (f"; did you mean --set {close[0]}={text.partition('=')[2]}?" if close else "")
                             + f" (parameters: {', '.join(fields)})")
            try:
                last.replace(**{key: value})
            except (ValueError, TypeError) as exc:
                raise _Usage(f"--set {text}: {exc}") from None
        try:
            models[-1] = last.replace(**{k: v for _, k, v in settings}, name=f"{last.name} with " + ", ".join(args.set))
        except (ValueError, TypeError) as exc:
            raise _Usage(f"--set {' --set '.join(args.set)}: {exc}") from None
    return models


def _smt_worst(args: argparse.Namespace, model: Model) -> Answer:
    from . import smt

    total = smt.TOTAL_TIMEOUT if args.total_timeout is None else args.total_timeout
    w = smt.worst_error(model, k=args.k, relative=not args.absolute, timeout=args.timeout, total_timeout=total,
                        solver=args.solver, progress=args.progress)
    k = args.k or smt.default_k(model)
    text = f"{model.name}, k = {k}\n{w}"
    if w.status != "exact":
        text += ("\n(the search stopped before proving a bound: the error above is a lower bound; "
                 "pass a longer --timeout/--total-timeout, or inf, for a proof)")
    return Answer(text, {"action": "worst", "model": model.name, "k": k, **w.to_json()},
                  0 if w.status == "exact" else 2)


def _smt_pair(args: argparse.Namespace, ma: Model, mb: Model) -> Answer:
    from . import smt

    v = smt.equivalent(ma, mb, k=args.k, timeout=args.timeout, solver=args.solver)
    head = f"{ma.name} vs {mb.name}"
    if args.action == "diff" and v.status == "proved":
        text = f"{head}: no input of length {v.k} tells them apart (proved by {v.solver} in {v.seconds:.3f} s)"
    else:
        text = f"{head}\n{v}"
    asked = ("refuted", "proved") if args.action == "diff" else ("proved", "refuted")  # status 0, status 1
    status = asked.index(v.status) if v.status in asked else 2
    return Answer(text, {"action": args.action, "models": [ma.name, mb.name], **v.to_json()}, status)


def cmd_smt(args: argparse.Namespace) -> Answer:
    """``blockfma smt diff|prove|worst|list|query``: exit statuses in :data:`SMT_EXIT`."""
    from .smt import queries

    try:
        if args.action == "list":
            rows = [{"query": q.name, "expects": "witness" if q.expected == "sat" else "proof",
                     "ci": "slow" if q.slow else "yes", "source": q.source, "what": q.title,
                     "bitwuzla_seconds": q.expected_seconds} for q in queries.queries()]
            return Answer(_report.table(rows, ["query", "expects", "ci", "source", "what"]), rows, 0)
        if args.action == "query":
            names = [q.name for q in queries.queries()] if args.name == "all" else [args.name]
            results = [queries.run(n, solver=args.solver, timeout=args.timeout, progress=args.progress) for n in names]
            answered = [r for r in results if r.status != "unknown"]
            status = 1 if any(not r.ok for r in answered) else 2 if len(answered) < len(results) else 0
            data = [r.to_json() for r in results]
            return Answer("\n".join(map(str, results)), data if args.name == "all" else data[0], status)
        models = _smt_models(args)
        if args.action == "worst":
            return _smt_worst(args, models[0])
        return _smt_pair(args, *models)
    except (NotImplementedError, ImportError) as exc:
        raise _Usage(str(exc)) from None


# --- multiword ---------------------------------------------------------------------------------------------
_MW_DEVICE_FOR = {"fp16": "V100", "bf16": "A100", "tf32": "A100"}
"""The preset each word format runs on when --device is not given (V100 has no bf16 or tf32 unit)."""


def _mw_data(m: int, n: int, q: int, dist: str, seed: int, fp64: bool) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    if dist == "uniform01":
        A, B = 1.0 - rng.random((m, n)), 1.0 - rng.random((n, q))  # (0, 1]
    else:
        A, B = 0.5 - rng.random((m, n)), 0.5 - rng.random((n, q))  # (-0.5, 0.5]
    if not fp64:  # the seeds' data are fp32 matrices
        A, B = A.astype(np.float32).astype(np.float64), B.astype(np.float32).astype(np.float64)
    return A, B


def _mw_device(mw: Any, name: str, given: str | None, compare: bool) -> str | None:
    """The preset a method runs on: --device where given (in --compare only for methods whose words it
    has a unit for), else the default preset of the words' format; None for methods without one."""
    low = mw.METHODS[name].low if name in mw.METHODS else None
    if low is None or low not in _MW_DEVICE_FOR:
        return None if compare else given  # one method: matmul refuses a --device it does not use
    if given is not None and compare:
        try:
            _device(given).model(low, mw.METHODS[name].high)
            return given
        except ValueError:
            return _MW_DEVICE_FOR[low]
    return given if given is not None else _MW_DEVICE_FOR[low]


def _mw_names(args: argparse.Namespace, methods: list[str], check_method: Any) -> list[str]:
    """The methods to run: the METHOD given, or with --compare every method but "mmm"."""
    if not args.compare and args.method is None:
        raise _Usage("name a METHOD (one of: " + ", ".join(methods) + ") or pass --compare")
    if args.compare and args.method is not None:
        raise _Usage(f"pass a METHOD ({args.method}) or --compare, not both")
    names = [x for x in methods if x != "mmm"] if args.compare else [check_method(args.method)]
    if "mmm" in names:
        raise _Usage("method mmm needs p= and low= (the Python API: multiword.matmul(A, B, method='mmm', p=2, "
                     "low='bf16')); name another METHOD")
    return names


def _mw_row(mw: Any, name: str, args: argparse.Namespace, m: int, n: int, backend: str, hardware: bool,
            say: Any) -> dict[str, Any]:
    """One method run on its unit: its errors against the reference, its bound, its warnings, its time (or,
    with --compare, why it was skipped)."""
    import time
    import warnings

    from .multiword.registry import REGISTRY

    entry = REGISTRY[name]
    fp64 = entry.high == "fp64"  # its errors are against the exact product
    A, B = _mw_data(m, n, m, args.dist, args.seed, fp64)
    device = None if hardware else _mw_device(mw, name, args.device, args.compare)
    if say:
        say(f"{name} on {backend if hardware else device or 'numpy'}: {m}x{n} @ {n}x{m} ...")
    kw: dict[str, Any] = {"backend": backend, "progress": say or False}
    if entry.kind == "words" or not args.compare:  # a method refuses what it lacks
        kw.update({k: v for k, v in (("summation", args.summation), ("block", args.block),
                                     ("order", args.order), ("device", device)) if v is not None})
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", mw.RangeWarning)
        warnings.simplefilter("always", mw.OverflowWarning)
        try:
            C_hat, info = mw.matmul(A, B, method=name, return_info=True, **kw)
        except ValueError as exc:
            if not args.compare:
                raise
            return {"method": name, "device": device, "unit": None, "skipped": str(exc)}
    seconds = time.perf_counter() - t0
    e = mw.errors(C_hat, mw.reference(A, B, exact=fp64), A, B)
    try:
        b = mw.bound(name, n) if name in mw.bounds.METHODS else None
    except (TypeError, ValueError):
        b = None
    notes = [str(w.message) for w in caught if issubclass(w.category, (mw.RangeWarning, mw.OverflowWarning))]
    return {"method": name, "device": device, "unit": info.get("unit", ""), "calls": info.get("calls"),
            "componentwise": e["componentwise"], "normwise_2": e["normwise_2"], "bound": b,
            "underflow": any(issubclass(w.category, mw.RangeWarning) for w in caught),
            "overflow": any(issubclass(w.category, mw.OverflowWarning) for w in caught),
            "warnings": notes, "seconds": round(seconds, 3)}


def _mw_cell(r: dict[str, Any]) -> dict[str, Any]:
    """A row of ``blockfma multiword`` as the table shows it."""
    if "skipped" in r:
        return {"method": r["method"], "unit": f"skipped: {r['skipped']}"}
    flags = [w for w, on in (("words underflow", r["underflow"]), ("overflow", r["overflow"])) if on]
    return {"method": r["method"], "unit": r["unit"], "products": r["calls"] or "",
            "componentwise": f"{r['componentwise']:.3e}", "normwise l2": f"{r['normwise_2']:.3e}",
            "bound": "" if r["bound"] is None else f"{r['bound']:.3e}", "range": ", ".join(flags),
            "seconds": r["seconds"]}


def cmd_multiword(args: argparse.Namespace) -> Answer:
    from . import multiword as mw
    from .arguments import integer, memory, seed
    from .multiword.methods import check_backend, check_method, working_set

    names = _mw_names(args, mw.methods(), check_method)
    seed("seed", args.seed)
    n = integer("n", args.n, least=1)
    m = integer("m", args.m, least=1, none=True) or min(n, 256)
    backend, hardware = check_backend(args.backend)
    words = max(mw.METHODS[x].p if x in mw.METHODS else 16 for x in names)
    need = 8.0 * 4 * (m * n + n * m) + working_set("multiword" if words < 16 else "ozaki2", m, n, m, words)
    memory("m" if args.m is not None and args.m > n else "n", args.m if args.m is not None and args.m > n else n,
           need, f"{m}x{n} and {n}x{m} matrices, their words and the reference product",
           fix="pass a smaller --n (or --m)")
    if hardware:
        try:
            mw.hardware.hardware_device(backend)
        except ImportError as exc:
            raise _Usage(str(exc)) from None
    say = _progress.reporter(args.progress)
    rows = [_mw_row(mw, name, args, m, n, backend, hardware, say) for name in names]
    dist = "(0, 1]" if args.dist == "uniform01" else "(-0.5, 0.5]"
    head = (f"A: {m}x{n}, B: {n}x{m}, entries uniform on {dist} (fp32 values; fp64 for tf64, fp64 and Ozaki, "
            f"whose errors are against the exact product), seed {args.seed}; componentwise = "
            "max |C - C_hat| / (|A||B|) (Fasi et al. eq. 3.1)\n")
    cols = ["method", "unit", "products", "componentwise", "normwise l2", "bound", "range", "seconds"]
    params = {"methods": names, "device": args.device, "backend": backend, "m": m, "n": n, "q": m,
              "dist": args.dist, "seed": args.seed, "summation": args.summation, "block": args.block,
              "order": args.order}
    return Answer(head + _report.table([_mw_cell(r) for r in rows], cols), {"parameters": params, "rows": rows})


# --- reproduce ---------------------------------------------------------------------------------------------
def cmd_reproduce(args: argparse.Namespace) -> Answer:
    """``blockfma reproduce NAME|--list|--all``: exit 0 when every difference from the paper is explained, 1
    when one is not, 2 for bad usage; with --all each finished reproduction's files are written at once, so
    an interrupted run (130) keeps them."""
    import time

    from .experiments import reproduce as rp
    from .experiments.result import check_scale
    from .provenance import provenance

    chosen = [x for x, on in (("NAME", args.name is not None), ("--list", args.list), ("--all", args.all)) if on]
    if len(chosen) != 1:
        raise _Usage("name one reproduction (NAME), or pass --list or --all" if not chosen else
                     f"pass one of NAME, --list and --all, not {' and '.join(chosen)}")
    if args.list and (args.out is not None or args.scale is not None):
        raise _Usage("--list runs nothing, so --out and --scale would be ignored; pass them with NAME or --all")
    if args.list:
        rows = [{"name": r.name, "seed": r.seed, "table/figure": r.what, "seconds": r.seconds,
                 "ci": "yes" if r.ci else "slow", "function": r.function} for r in rp.reproductions()]
        text = _report.table(rows, ["name", "seed", "table/figure", "seconds", "ci"])
        return Answer(text + "\n\nseconds: at --scale ci on two cores. Run one: blockfma reproduce NAME "
                      "[--out DIR] [--scale ci|paper]", rows)
    scale = check_scale(args.scale or "ci")
    entries = rp.reproductions() if args.all else [rp.get(args.name)]
    out = files.folder(args.out, create=True, name="out") if args.out is not None else None
    if out is not None:  # every file of the run checked before the first one runs
        for e in entries:
            rp.files_for(e.name, out)
    say = _progress.reporter(args.progress)
    done: list[dict[str, Any]] = []
    texts: list[str] = []
    status = 0
    for i, e in enumerate(entries, 1):
        if say and args.all:
            say(f"[{i}/{len(entries)}] {e.name}: {e.seed}, {e.what} (about {e.seconds:g} s at ci) ...")
        t0 = time.perf_counter()
        try:
            res = rp.run(e, scale, progress=say or False)
        except rp.Missing as exc:
            if not args.all:
                raise _Usage(str(exc)) from None
            done.append({"name": e.name, "skipped": str(exc)})
            texts.append(f"{e.name}: skipped ({exc})")
            continue
        secs = time.perf_counter() - t0
        bad = rp.unexplained(res)
        status = max(status, 1 if bad else 0)
        written = [str(p) for p in rp.write(res, out, note=_progress.stderr)] if out is not None else []
        doc = {**res.to_dict(), "seconds": round(secs, 2), "verdict": rp.verdict(res), "unexplained": len(bad),
               "files": written, "provenance": provenance()}
        done.append(doc)
        if args.all:
            texts.append(f"{rp.verdict(res)} ({secs:.1f} s)" + (f"; {len(bad)} UNEXPLAINED" if bad else ""))
            if args.json not in (None, files.STDOUT):  # an interrupted --all keeps what finished
                files.write_json(args.json, done)
        else:
            texts.append(rp.text(res) + "".join(f"\nwrote {p}" for p in written))
    return Answer("\n".join(texts), done if args.all else done[0], status)


# --- parser ----------------------------------------------------------------------------------------------
def _operand_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--input", "-i", default="fp16", help="input format of a and b (default fp16)")
    p.add_argument("--output", "-o", default="fp32", help="output format, also that of c (default fp32)")
    p.add_argument("--a", action="append", metavar="VALUES", help="a: comma-separated exact values (repeatable)")
    p.add_argument("--b", action="append", metavar="VALUES", help="b: comma-separated exact values (repeatable)")
    p.add_argument("--c", default="0", metavar="VALUE", help="c: one exact value (default 0)")
    p.add_argument("--round-inputs", metavar="MODE",
                   help=f"round values the formats cannot hold, in MODE: {_MODES} (device: a and b read as the "
                        "unit reads registers, e.g. tf32 by truncation; c to nearest)")
    _json_option(p)


def _json_option(p: argparse.ArgumentParser) -> None:
    """``--json [FILE|-]``, the same on every command (see the module docstring)."""
    p.add_argument("--json", nargs="?", const=files.STDOUT, metavar="FILE",
                   help="the results as JSON: printed instead of the text (no FILE, or -), or written to FILE "
                        "after the text is printed (checked before the work starts)")


def _progress_options(p: argparse.ArgumentParser) -> None:
    """``--progress``/``--quiet``, the same on every long command: progress lines on stderr always, never,
    or (neither given) when stderr is a terminal (:mod:`blockfma.progress`)."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--progress", dest="progress", action="store_true", default=None,
                   help="progress lines on stderr (default: when stderr is a terminal)")
    g.add_argument("--quiet", "-q", dest="progress", action="store_false", help="no progress lines")


def _add_devices(sub: Any) -> None:
    """blockfma devices [NAME]."""
    p = sub.add_parser("devices", help="list the presets, or show one")
    p.add_argument("name", nargs="?", metavar="NAME", help="a preset name or alias")
    _json_option(p)
    p.set_defaults(func=cmd_devices)


def _add_dot_compare(sub: Any) -> None:
    """blockfma dot DEVICE and blockfma compare DEVICE...: one number format (--a, --b, --c)."""
    numbers = (f"Numbers: {literals.FORMS}. A value starting with '-' may follow --a/--b/--c directly. "
               "Example: blockfma dot V100 --a 1,1,1,1 --b 2^-24,2^-24,2^-24,2^-24 --c 1-2^-24")
    p = sub.add_parser("dot", help="compute d = a·b + c as a device does, printed exactly", epilog=numbers)
    p.add_argument("device", metavar="DEVICE", help="a preset name or alias (blockfma devices lists them)")
    p.add_argument("--instruction", help="instruction path (default: the device's default for the pair)")
    for x in "ab":
        p.add_argument(f"--scale-{x}", action="append", metavar="VALUES", help=f"a block-scaled instruction's "
                       f"scales of {x}: exact values of its scale format, one per scale block along k, in order, as "
                       f"bf.dot's scale_{x}= (docs/semantics.md); comma-separated, repeatable")
    _operand_options(p)
    p.set_defaults(func=cmd_dot)

    p = sub.add_parser("compare", help="d = a·b + c on several devices and the exact reference", epilog=numbers)
    p.add_argument("devices", nargs="+", metavar="DEVICE", help="preset names, or 'all'")
    _operand_options(p)
    p.set_defaults(func=cmd_compare, instruction=None)


def _add_report(sub: Any) -> None:
    """blockfma report."""
    p = sub.add_parser("report", help="feature table and FTTN porting example across the presets")
    _json_option(p)
    p.add_argument("--devices", metavar="NAMES", help="comma-separated presets (default: all)")
    p.add_argument("--fttn-inputs", default="fp16,bf16", metavar="FORMATS",
                   help="input formats of the FTTN GEMM (default fp16,bf16)")
    p.add_argument("--no-probes", action="store_true", help="leave out the probe section (some seconds a target)")
    p.add_argument("--html", metavar="FILE", help="also write the report as one self-contained HTML page (figures "
                                                  "inline, no network; checked before the work starts)")
    p.add_argument("--smt-timeout", type=float, default=10.0, metavar="S",
                   help="seconds for each SMT query telling neighbouring generations apart (default 10; 0: none)")
    _progress_options(p)
    p.set_defaults(func=cmd_report, results=("html",))


def _add_probe(sub: Any) -> None:
    """blockfma probe TARGET."""
    from .probes.targets import FP16, FP32, MAX_K

    p = sub.add_parser("probe", help="measure a target through its outputs and infer its model (verified)",
                       epilog="Targets: sim:DEVICE[:INSTRUCTION] (the simulator), a devices file (.json), cuda "
                              "(this GPU's mma.sync, needs CuPy), cuda:INSTRUCTION, torch[:cpu|:cuda] "
                              "(torch.baddbmm). Example: blockfma probe sim:A100 --input bf16 --output fp32")
    p.add_argument("target", nargs="?", metavar="TARGET", help="sim:DEVICE, cuda, torch, ...")
    p.add_argument("--input", "-i", default=FP16, help="input format of a and b, or A,B (default fp16; a cuda:PATH "
                                                       "target: the path's)")
    p.add_argument("--output", "-o", default=FP32, help="output format (default fp32; a cuda:PATH target: the path's)")
    p.add_argument("--instruction", help="instruction of a sim target (default: the device's for the pair)")
    p.add_argument("--k", type=int, help=f"products per call, 1 to {MAX_K} (default: the instruction's k)")
    p.add_argument("--verify", type=int, default=10_000, metavar="N", help="rows of each check, at least 100 "
                                                                          "(default 10000)")
    p.add_argument("--priors", choices=("presets", "none"), default="presets",
                   help="let the presets that take these formats join the candidates (default) or not")
    p.add_argument("--seed", type=int, default=0, help="random seed of the generated inputs (default 0)")
    p.add_argument("--all", action="store_true", help="every preset and pair (sim), mma.sync path (cuda) or dtype "
                                                      "(torch); exit status 0 only if every one verified")
    _json_option(p)
    p.add_argument("--record", metavar="FILE", help="write the verified model as a devices file (bf.device(FILE)); "
                                                   "checked before the probe, written after the text is printed")
    _progress_options(p)
    p.set_defaults(func=cmd_probe, spelling={"input_format": "--input", "output_format": "--output",
                                             "target": "TARGET"})


def _add_smt(sub: Any) -> None:
    """blockfma smt diff|prove|worst|list|query."""
    p = sub.add_parser("smt", help="formal questions about models: witnesses, proofs, worst errors (SMT)",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="Example: blockfma smt diff V100 T4 --input fp16 --output fp32 --k 8\n\n"
                              "--timeout S is seconds per solver query (default 60; inf for no limit); "
                              "smt worst's --total-timeout S\nbounds the whole search (default 600).\n\n"
                              "Exit status:\n" + "".join(f"  {a:6s} {t}\n" for a, t in SMT_EXIT.items())
                              + "  bad usage: 2 (one line naming the option, the value and the fix)")
    ssub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    smt_names = {"input_format": "--input", "output_format": "--output", "model_a": "DEV1", "model_b": "DEV2",
                 "model": "DEV", "name": "blockfma smt query"}

    def _solver_options(q: argparse.ArgumentParser) -> None:
        from .arguments import TIMEOUT

        q.add_argument("--timeout", type=_seconds, default=TIMEOUT, metavar="S",
                       help=f"seconds per solver query (default {TIMEOUT:g}; inf: no limit)")
        q.add_argument("--solver", default="auto", choices=("auto", "bitwuzla", "cvc5", "z3"),
                       help="SMT solver (default auto: the fastest installed)")
        q.set_defaults(spelling=smt_names)

    for action, text in (("diff", "inputs on which two models give different bits"),
                         ("prove", "prove two models equal on every input of length k")):
        q = ssub.add_parser(action, help=text, epilog=f"Exit status: {SMT_EXIT[action]}; bad usage 2.")
        q.add_argument("dev1", metavar="DEV1", help="device (or DEVICE:INSTRUCTION)")
        q.add_argument("dev2", metavar="DEV2", help="device (or DEVICE:INSTRUCTION)")
        q.add_argument("--input", "-i", default="fp16", help="input format (default fp16)")
        q.add_argument("--output", "-o", default="fp32", help="output format (default fp32)")
        q.add_argument("--k", type=int, help="products (default: one step of the wider model)")
        q.add_argument("--set", action="append", metavar="PARAM=VALUE",
                       help="change a parameter of DEV2's model (repeatable), e.g. --set carry_bits=3")
        _solver_options(q)
        _json_option(q)
    q = ssub.add_parser("worst", help="largest error against the exact a·b + c, with its input",
                        epilog=f"Exit status: {SMT_EXIT['worst']}; bad usage 2. With the defaults the search "
                               "takes up to 10 minutes (most queries run out of time); --timeout 2 "
                               "--total-timeout 10 gives a lower bound in about 10 s.")
    q.add_argument("dev1", metavar="DEV", help="device (or DEVICE:INSTRUCTION)")
    q.add_argument("--input", "-i", default="fp16", help="input format (default fp16)")
    q.add_argument("--output", "-o", default="fp32", help="output format (default fp32)")
    q.add_argument("--k", type=int, help="products (default: one step)")
    q.add_argument("--set", action="append", metavar="PARAM=VALUE", help="change a parameter of the model")
    q.add_argument("--absolute", action="store_true", help="absolute error (default: relative to sum|a_i b_i|+|c|)")
    q.add_argument("--total-timeout", type=_seconds, metavar="S",  # default: smt.TOTAL_TIMEOUT (z3 not imported)
                   help=f"seconds for the whole search (default {_SMT_TOTAL_TIMEOUT:g}; inf: no limit)")
    _progress_options(q)
    _solver_options(q)
    _json_option(q)
    q = ssub.add_parser("list", help="the named queries", epilog="Exit status: 0.")
    _json_option(q)
    q = ssub.add_parser("query", help="answer a named query (or 'all')",
                        epilog=f"Exit status: {SMT_EXIT['query']}; with 'all', 1 if any answer is another than "
                               "expected, else 2 if any is unknown; bad usage 2.")
    q.add_argument("name", metavar="NAME", help="a query name (blockfma smt list), or all")
    _progress_options(q)
    _solver_options(q)
    _json_option(q)
    p.set_defaults(func=cmd_smt)


def _add_reproduce(sub: Any) -> None:
    """blockfma reproduce NAME."""
    p = sub.add_parser("reproduce", help="reproduce a table or figure of the seed papers (--list names them)",
                       epilog="Example: blockfma reproduce fttn-table4 --out results. Exit status 0 when every "
                              "difference from the paper is explained, 1 when one is not, 2 for bad usage, 130 "
                              "interrupted (--all keeps the files of what finished).")
    p.add_argument("--list", action="store_true", help="every reproduction with its seed, table/figure, seconds")
    p.add_argument("name", nargs="?", metavar="NAME", help="a reproduction (blockfma reproduce --list)")
    p.add_argument("--all", action="store_true", help="run every reproduction, a progress line each")
    p.add_argument("--out", metavar="DIR", help="write NAME.csv, NAME.json (with provenance) and NAME.png into DIR "
                                                "(made if missing; checked before the work)")
    p.add_argument("--scale", metavar="ci|paper", help="problem sizes: ci (seconds, the default) or "
                                                                   "paper (the paper's sizes where practical)")
    _json_option(p)
    _progress_options(p)
    p.set_defaults(func=cmd_reproduce, spelling={"name": "NAME", "scale": "--scale", "out": "--out"})


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="blockfma", description="Bit-exact models of matrix accelerators (tensor cores, matrix cores, "
                                     "CPU matrix units).",
        epilog=f"Numbers: {literals.FORMS}. A value starting with '-' may follow --a/--b/--c directly.")
    parser.add_argument("--version", action="version", version=f"blockfma {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    for add in (_add_devices, _add_dot_compare, _add_report, _add_probe, _add_smt):
        add(sub)

    p = sub.add_parser("multiword", help="accurate GEMM from low-precision units (multiword, 3xTF32, Ozaki)",
                       epilog="Example: blockfma multiword double-fp16 --device V100 --n 1024 --dist uniform01. "
                              "Seconds on the simulator: about m*n*m*products / 3e8 (256 x 1024 x 256 in "
                              "double-fp16: under 1 s). Exit status 0; 2 for bad usage.")
    p.add_argument("method", nargs="?", metavar="METHOD", help="fp16, double-fp16, 3xtf32, ozaki2, ... (or --compare)")
    p.add_argument("--compare", action="store_true", help="every method, one table")
    p.add_argument("--device", help="the simulated unit's preset (default: V100 for fp16 words, A100 for bf16 and "
                                    "tf32 words, which V100 lacks; with --compare, methods whose words DEVICE has "
                                    "no unit for run on that default)")
    p.add_argument("--backend", metavar="NAME",
                   help="the simulator engine (auto, numpy, numba, cuda, cuda:N; default auto), or hardware, "
                        "hardware:cuda[:N], hardware:cpu: the word products on real units through torch "
                        "(--device unused)")
    p.add_argument("--n", type=int, default=1024, help="inner dimension (default 1024)")
    p.add_argument("--m", type=int, help="rows of A and columns of B (default min(n, 256))")
    p.add_argument("--dist", choices=("uniform01", "uniform-half"), default="uniform01",
                   help="entries uniform on (0, 1] or on (-0.5, 0.5] (the seeds' two distributions)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the data (default 0)")
    p.add_argument("--summation", choices=("fabsum-v1", "fabsum-v2"), help="FABsum on the leading product")
    p.add_argument("--block", type=int, help="FABsum block size (with --summation)")
    p.add_argument("--order", choices=("alg2.1", "cublas"), help="order of the word products")
    _progress_options(p)
    _json_option(p)
    p.set_defaults(func=cmd_multiword, spelling={"method": "METHOD"})

    _add_reproduce(sub)
    return parser


def _glue_values(argv: list[str]) -> list[str]:
    """'--c -2^-24' -> '--c=-2^-24', so values may start with '-' (argparse would read an option)."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] in _VALUE_OPTIONS and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out


def _options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, str]:
    """Python argument names -> this command's options (``{"k": "--k", "total_timeout": "--total-timeout"}``),
    so that an :class:`~blockfma.arguments.ArgumentError` from the API reads in the command line's spelling;
    a command adds its own with ``set_defaults(spelling={...})``."""
    names: dict[str, str] = {}
    p: Any = parser
    for key in ("command", "action"):
        sub = next((a for a in p._actions if isinstance(a, argparse._SubParsersAction)), None)
        if sub is None or getattr(args, key, None) not in sub.choices:
            break
        p = sub.choices[getattr(args, key)]
        for a in p._actions:
            longs = [o for o in a.option_strings if o.startswith("--")]
            if longs and a.dest not in ("help",):
                names[a.dest] = longs[0]
    names.update(getattr(args, "spelling", None) or {})
    return names


def _emit(answer: Answer, args: argparse.Namespace) -> None:
    """Print the text (or, for ``--json -``, the JSON), then write ``--json FILE`` and run ``answer.then``."""
    target = getattr(args, "json", None)
    data = answer.data if answer.data is not None else {"text": answer.text}
    if target == files.STDOUT:
        print(files.dumps(data))
    elif answer.text:
        print(answer.text)
    sys.stdout.flush()
    writes = [] if target in (None, files.STDOUT) else [(f"--json {target}", lambda: files.write_json(target, data))]
    for what, write in writes + ([("the results file", answer.then)] if answer.then is not None else []):
        try:
            write()
        except OSError as exc:  # checked before the work, so a full disk or a vanished folder
            raise _FileFailed(f"cannot write {what} ({exc.strerror or exc}); the results are printed above") from None


class _FileFailed(Exception):
    """The results file could not be written after all (printed as one line, exit status 1)."""


def _silence_stdout() -> None:
    """Point a broken standard output at /dev/null, so that the interpreter's last flush does not fail
    again (a replaced sys.stdout without a file descriptor is left alone)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (:data:`EXIT`: 0 as asked, 1 not, 2 unknown or bad
    usage, 130 interrupted)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(_glue_values(argv))
    except SystemExit as exc:  # --help, --version, usage errors
        return exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 2
    name = " ".join(str(x) for x in (args.command, getattr(args, "action", None)) if x)
    try:
        for dest in ("json", *getattr(args, "results", ())):  # a bad destination fails now, not after the work
            if getattr(args, dest, None) is not None:  # (a command names its other results files in
                files.destination(getattr(args, dest), name=dest)  # set_defaults(results=("record",)))
        answer = args.func(args)
        _emit(answer, args)
    except ArgumentError as exc:
        print(f"blockfma {name}: error: {exc.message(_options(parser, args))}", file=sys.stderr)
        return 2
    except (ValueError, _Usage) as exc:
        print(f"blockfma {name}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: a line, not a traceback (results files are written atomically)
        print(f"blockfma {name}: interrupted", file=sys.stderr)
        return 130
    except _FileFailed as exc:
        print(f"blockfma {name}: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # e.g. piped into head: stop quietly
        _silence_stdout()
        return 1
    except OSError as exc:  # a full disk or a closed terminal on stdout
        _silence_stdout()
        print(f"blockfma {name}: error: cannot write the output ({exc.strerror or exc})", file=sys.stderr)
        return 1
    return answer.status
