"""What backs an answer: :class:`Evidence` for a model, an instruction or a library plan, and its :class:`Basis`.

Every claim an emulation makes (this instruction computes so, this GEMM is split so, this epilogue rounds so)
rests on one of four kinds of evidence, strongest first: the project's own hardware records
(``data/hardware``, with the number of rows or shapes checked), published hardware outputs (Khattak and
Mikaitis' data, ``../shared/golden``), a peer simulator's reading (MMA-Sim), or a stated assumption.
``bf.torch.emulate`` shows the weakest of an op's claims in its log and report and, with ``strict=True``,
refuses an op that rests on anything but hardware records (:func:`require_backed`).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Basis", "Evidence", "strongest", "weakest", "require_backed", "Unbacked"]


class Basis(enum.Enum):
    """How a claim is backed, strongest first."""

    RECORDED = "recorded"  # the project's own records on the card (data/hardware)
    PUBLISHED = "published"  # hardware outputs others published (Khattak & Mikaitis' validation data)
    PEER = "peer"  # a peer simulator's reading (MMA-Sim), not checked on hardware
    ASSUMED = "assumed"  # a stated assumption

    @property
    def backed(self) -> bool:
        """Whether hardware outputs back it (our records or published ones)."""
        return self in (Basis.RECORDED, Basis.PUBLISHED)


@dataclass(frozen=True)
class Evidence:
    """One claim and what backs it: ``basis``, ``source`` (a record file, a dataset, a paper or the
    assumption's statement) and ``count`` (rows or shapes checked; None where nothing was counted); ``part_of``: the
    claim this one details (a seed paper's features of a model), which stands for it where it has evidence."""

    claim: str
    basis: Basis
    source: str
    count: int | None = None
    part_of: str = ""

    @property
    def label(self) -> str:
        """``"recorded: h100-mma-wgmma.json, 983,040 rows"`` (the count only where one was made)."""
        count = "" if self.count is None else f", {self.count:,} row{'s' * (self.count != 1)}"
        return f"{self.basis.value}: {self.source}{count}"


def strongest(evidence: Iterable[Evidence]) -> dict[str, Evidence]:
    """Each claim of ``evidence`` with its strongest evidence: a claim is as well backed as its best source, an
    answer as its worst-backed claim (:func:`weakest`, :func:`require_backed`)."""
    best: dict[str, Evidence] = {}
    for e in evidence:
        if e.claim not in best or list(Basis).index(e.basis) < list(Basis).index(best[e.claim].basis):
            best[e.claim] = e
    return {c: e for c, e in best.items() if e.part_of not in best}


def weakest(evidence: Iterable[Evidence]) -> Basis:
    """The weakest basis among the claims of ``evidence``, each claim at its strongest (ASSUMED where there is
    none: a claim without evidence is assumed)."""
    return max((e.basis for e in strongest(evidence).values()), key=list(Basis).index, default=Basis.ASSUMED)


class Unbacked(ValueError):
    """An answer refused by a strict switch: a claim it rests on is not backed by hardware outputs."""


def require_backed(evidence: Iterable[Evidence], what: str, switch: str = "strict=True") -> None:
    """Raise :class:`Unbacked` naming the first claim of ``evidence`` not backed by hardware outputs (by any of its
    sources), and ``what`` needed it; an empty ``evidence`` counts as assumed."""
    evidence = tuple(evidence)
    weak = next((e for e in strongest(evidence).values() if not e.basis.backed), None)
    if weak is None and evidence:
        return
    why = (f"{weak.claim} is {weak.label}" if weak is not None else "no evidence is recorded for it")
    raise Unbacked(f"{what} under {switch}: {why}, not backed by hardware records; pass strict=False to run it "
                   "anyway (the log and report show the evidence), or record it on the card (../shared/GPU.md)")
