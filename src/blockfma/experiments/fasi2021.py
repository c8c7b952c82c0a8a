"""Fasi, Higham, Mikaitis, Pranesh, "Numerical behavior of NVIDIA tensor cores", PeerJ Comput. Sci. 7:e330
(2021): the tests of its Table 2 (the subsections of "Results") on the V100, T4 and A100 presets.

The paper's test cases and the outputs it reports are data in :mod:`blockfma.probes.seeds` (each a
literal with the sentence it comes from); here every one of them runs on each of the three presets, test
by test, beside the paper's value.  The paper reports every value for the V100; for the T4 and the A100 it
reruns the whole suite but prints only what changed (the extra alignment bit, the next-bit constants), and
says the rest "remain valid": those cells read "not reported" and are no comparison.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .result import Comparison, Result, check_scale, result

__all__ = ["table_2", "SECTIONS"]

#: Table 2's subsections (p. 4 of the paper), in its order; each seed case's source names one of them
SECTIONS = ("Support for subnormal numbers", "Accuracy of the dot products", "Rounding modes in tensor core "
            "computations", "Features of the accumulator", "NVIDIA Turing tensor cores", "NVIDIA Ampere tensor cores")
DEVICES = ("V100", "T4", "A100")


def _section(source: str) -> str:
    for s in SECTIONS:
        if s in source:
            return s
    return "other"


def _show(x: float) -> str:
    """An output as exact hex (the bits decide)."""
    from ..literals import hex_float

    return hex_float(float(x))


def table_2(*, scale: str = "ci", progress: Any = None) -> Result:
    """Every test of Fasi et al. 2021 (the seed cases of :mod:`blockfma.probes.seeds` from that paper) on
    the V100, T4 and A100 presets: one row per test and device, the paper's output beside ours."""
    from .. import formats as _formats
    from ..devices import device as _device
    from ..engine import dot
    from ..probes import seeds

    check_scale(scale)
    rows: list[dict[str, Any]] = []
    comps: list[Comparison] = []
    cases = [c for c in seeds.SEED_CASES if c.source.startswith(seeds.FASI)]
    for n, case in enumerate(cases, 1):
        if progress is not None and n % 10 == 1:
            progress(f"fasi2021-table2: test {n} of {len(cases)}")
        fout = _formats.get(case.output_format)
        for dev in DEVICES:
            try:
                model = _device(dev).model(case.input_format, case.output_format)
            except ValueError:
                model = None
            if model is None:
                ours, ours_bits = None, None
            else:
                d = dot(np.array(case.a), np.array(case.b), case.c, model=model)
                ours_bits = int(_formats.encode(fout, np.float64(d)))
                ours = _show(d)
            if dev in case.expected:
                want_bits = seeds.expected_bits(case, dev)
                paper = _show(float(_formats.decode(fout, want_bits)))
                agrees = ours_bits == want_bits
                why = "" if agrees else (f"the {dev} preset has no {case.input_format}->{case.output_format} model"
                                         if model is None else "")
                comps.append(Comparison(f"{dev}: {case.id}", paper, ours, agrees, why))
            else:
                paper = "not reported"
            rows.append({"section": _section(case.source), "test": case.id, "title": case.title,
                         "formats": f"{case.input_format}->{case.output_format}", "device": dev,
                         "paper": paper, "ours": ours if ours is not None else "no such unit",
                         "agrees": (ours_bits == seeds.expected_bits(case, dev)) if dev in case.expected and
                         ours_bits is not None else None})
    notes = (
        "Table 2 of the paper lists the subsections of its Results; the outputs compared here are those its text "
        "reports in each subsection (p. 5-10), typed in with their quotes in blockfma/probes/seeds.py.",
        "T4 and A100: the paper reran every test but reports only those whose constants had to change for the "
        "extra alignment bit ('all the conclusions ... remain valid'); the other cells read 'not reported', and "
        "ours are shown for them without a comparison (e.g. V100-only constants such as 1 + 2^-24 + 2^-24 give "
        "1 + 2^-23 on the T4 and A100 presets, as the paper says they must).",
        "A100 binary64 and TensorFloat-32 rows are the paper's A100 paragraph; its bfloat16 subnormal test is the "
        "one bf16 case.",
    )
    return result("fasi2021-table2", "Fasi et al. 2021, Table 2: tests per device", rows,
                  columns=("section", "test", "device", "formats", "paper", "ours", "agrees", "title"),
                  comparisons=tuple(comps), notes=notes, scale=scale)
