"""The README's device table and open questions, generated from the presets (src/blockfma/devices/*.json).

    python scripts/device_table.py                 # print the table (Markdown)
    python scripts/device_table.py --write README.md   # replace the table between its markers
    python scripts/device_table.py --check README.md   # exit 1 if the README's table is stale

The table sits between ``<!-- device-table:begin -->`` and ``<!-- device-table:end -->``, the open questions
between ``<!-- open-questions:begin -->`` and ``<!-- open-questions:end -->``; ``tests/test_docs.py`` runs the
check, so a preset or question changed without the README fails the tests.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

BEGIN, END = "<!-- device-table:begin -->", "<!-- device-table:end -->"
Q_BEGIN, Q_END = "<!-- open-questions:begin -->", "<!-- open-questions:end -->"


def _inputs(dev) -> str:
    names = []
    for ins in dev.instructions:
        for model in ins.models.values():
            if model.b_input_format is not None:
                name = "mixed fp8"
            else:
                name = model.input_format.name
            if name not in names:
                names.append(name)
    return ", ".join(names)


def _block(dev) -> str:
    """L and F of the default instruction's first model: the unit's block width and fraction bits."""
    model = next(iter(dev.default_instruction.models.values()))
    parts = [f"{model.input_format.name}->{model.output_format.name}"]
    if model.block_width is not None:
        parts.append(f"L={model.block_width}")
    if model.fraction_bits is not None:
        parts.append(f"F={model.fraction_bits}")
    return " ".join(parts)


def table() -> str:
    """The Markdown table of every preset (variants named in their device's row) and the sources' key."""
    # blockfma.devices is shadowed on the package by the function bf.devices; import the module itself
    devices = importlib.import_module("blockfma.devices")
    rows = ["| device | architecture | families | input formats | first model | confidence | sources | "
            "open questions, variants |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    used: list[str] = []
    for dev in devices.devices(variants=False):
        families = sorted({m.family.name for ins in dev.instructions for m in ins.models.values()})
        questions = [q.id for q in devices.open_questions(dev.name, settled=False)]
        extra = ", ".join([f"`{q}`" for q in questions] + [f"`{v}`" for v in dev.variants]) or "-"
        confidence = dev.confidence + (" (manuals only)" if dev.specification_only else "")
        for key in dev.sources:
            if key not in used:
                used.append(key)
        rows.append(f"| {dev.name} | {dev.vendor} {dev.arch} | {', '.join(families)} | {_inputs(dev)} | "
                    f"{_block(dev)} | {confidence} | {', '.join(dev.sources)} | {extra} |")
    key = ["", "Sources (`src/blockfma/devices/sources.json`; the facts each preset takes from them, source by "
           "source, are in the project's `shared/DEVICE-FACTS.md` and the notes `blockfma devices NAME` prints):", ""]
    for name in used:
        src = devices.SOURCES[name]
        where = " ([data/hardware/README.md](data/hardware/README.md))" if src.kind == "hardware data" else ""
        key.append(f"* **{name}** ({src.kind}): {src.citation}{where}")
    return "\n".join(rows + key) + "\n"


def questions() -> str:
    """The open questions of src/blockfma/devices/open_questions.json (settled ones left out), a bullet each."""
    devices = importlib.import_module("blockfma.devices")
    lines = []
    for q in devices.open_questions(settled=False):
        variant = " (a variant runs the other reading)" if q.change else " (the other reading is not a parameter yet)"
        lines.append(f"* `{q.id}` ({', '.join(q.devices)}): {q.question}{variant}")
    return "\n".join(lines) + "\n"


def splice(text: str, body: str, begin: str = BEGIN, end_marker: str = END) -> str:
    """``text`` with the part between the markers replaced by ``body``."""
    start, end = text.find(begin), text.find(end_marker)
    if start < 0 or end < start:
        raise SystemExit(f"device_table: the markers {begin} ... {end_marker} are missing")
    return text[:start + len(begin)] + "\n" + body + text[end:]


def update(text: str) -> str:
    """``text`` with both generated parts (the device table, the open questions) brought up to date."""
    return splice(splice(text, table()), questions(), Q_BEGIN, Q_END)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", type=Path, metavar="FILE", help="replace the table in FILE")
    group.add_argument("--check", type=Path, metavar="FILE", help="exit 1 if FILE's table differs")
    args = parser.parse_args(argv)
    if args.write:
        args.write.write_text(update(args.write.read_text(encoding="utf-8")), encoding="utf-8")
        print(f"wrote the device table into {args.write}")
    elif args.check:
        text = args.check.read_text(encoding="utf-8")
        if update(text) != text:
            print(f"{args.check}: the device table is stale; run python scripts/device_table.py --write "
                  f"{args.check}", file=sys.stderr)
            return 1
        print(f"{args.check}: the device table is current")
    else:
        sys.stdout.write(table() + "\n" + questions())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
