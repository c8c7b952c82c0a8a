"""Differential test against MMA-Sim (PyPI ``mmasim``, Ma et al.): an independent model whose authors hold it
bit for bit to real GPUs on random-bit tiles, per instruction.  Optional: skipped with a reason where
``mmasim`` or torch is absent (``make test`` installs both where a CPU build of torch is available).

The census: every configuration MMA-Sim 2.1.1 lists (mma, wgmma, tcgen05.mma, their block-scaled kinds and
AMD's MFMA, per architecture; a tile's m and n aside, which only repeat the dot product) is answered by a
preset model, or is an open question in ``OPEN`` with its reason; test_census_every_mmasim_configuration_is_run_or_open
fails on any other.  Each answered configuration runs the rows of ``helpers.draw_rows`` (random codes, ties,
wide spreads, cancellation, subnormals, signed zeros, overflow, C dominating; specials in some rows) at its
k and at 2k (two chained instructions); a block-scaled one runs ``helpers.block_scaled_rows`` (extreme, zero
and NaN scales) through ``helpers.mmasim_d``.  The bit patterns are compared and a mismatch is counted by
kind: ``zero sign`` (both zero), ``nan bits`` (both NaN), ``special inputs`` (a NaN or infinity among the
row's inputs) or ``value``.  The first two are the open questions of docs/semantics.md and the device notes
(MMA-Sim makes every zero +0 and keeps NaN payloads on some AMD paths); value mismatches must be zero except
where a preset deliberately departs from MMA-Sim (listed in ``DEPARTURES`` with the evidence).  Under
-m "not slow" a representative subset runs (see :func:`_configs`); the rest under -m slow.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import numpy as np
import pytest

import blockfma as bf
from blockfma import formats as F

from helpers import block_scaled_rows, draw_rows, mmasim_d

torch = pytest.importorskip("torch", reason="MMA-Sim needs torch: pip install 'blockfma[torch]'")
mmasim = pytest.importorskip("mmasim", reason="the differential test needs MMA-Sim: pip install --no-deps "
                                              "mmasim==2.1.1 (torch >= 2.9 installed)")
from mmasim.amd import isa_mfma  # noqa: E402
from mmasim.amd.sim import MFMA  # noqa: E402
from mmasim.nv_ptx import isa_mma, isa_tcgen05mma, isa_wgmma  # noqa: E402
from mmasim.nv_ptx import sim as nv  # noqa: E402

TORCH_DTYPE = {"fp16": torch.float16, "bf16": torch.bfloat16, "tf32": torch.float32, "fp32": torch.float32,
               "fp64": torch.float64, "e4m3fn": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2,
               "e4m3fnuz": torch.float8_e4m3fnuz, "e5m2fnuz": torch.float8_e5m2fnuz}
NV_ARCH = {"V100": "Volta", "T4": "Turing", "A100": "Ampere", "Ada": "Ada Lovelace", "H100": "Hopper",
           "B200": "Blackwell", "RTX 5090": "RTX Blackwell"}
PTX = {"fp16": "f16", "bf16": "bf16", "tf32": "tf32", "e4m3fn": "e4m3", "e5m2": "e5m2", "fp32": "f32",
       "fp64": "f64", "e3m2fn": "e3m2", "e2m3fn": "e2m3", "e2m1fn": "e2m1"}


def _operand(x: np.ndarray, name: str) -> torch.Tensor:
    """Values of a format as MMA-Sim takes them: a torch dtype where torch has one; fp6 and fp4 (no torch
    dtype) as one code a byte, fp6 in bits 5:0 and fp4 in bits 5:2 (MMA-Sim's decode_uint8_to_fp6_fp4, the
    unpacked 8-bit container of kind::f8f6f4)."""
    if name in TORCH_DTYPE:
        return torch.from_numpy(x).to(TORCH_DTYPE[name])
    fmt = F.get(name)
    return torch.from_numpy(F.encode(fmt, x).astype(np.uint8) << np.uint8(6 - fmt.bits))


def _formats(fin: str) -> tuple[str, str]:
    """A's and B's format names of an input name ("e4m3fn" or "e4m3fn*e5m2")."""
    a, _, b = fin.partition("*")
    return a, b or a


# --- the census: every configuration MMA-Sim lists, and the preset that answers it ------------------------------
OPS = {"MMA": nv.MMA, "WGMMA": nv.WGMMA, "TCGen05MMA": nv.TCGen05MMA, "MMABlockScale": nv.MMABlockScale,
       "TCGen05MMABlockScale": nv.TCGen05MMABlockScale, "MFMA": MFMA}
LISTS = {"MMA": isa_mma.mma_shape_and_type, "WGMMA": isa_wgmma.wgmma_shape_and_type,
         "TCGen05MMA": isa_tcgen05mma.tcgen05mma_shape_and_type,
         "MMABlockScale": isa_mma.mma_block_scale_shape_and_type,
         "TCGen05MMABlockScale": isa_tcgen05mma.tcgen05mma_block_scale_shape_and_type,
         "MFMA": isa_mfma.arch_mfma_suffix}
DEVICE = {**{arch: device for device, arch in NV_ARCH.items()}, "CDNA1": "MI100", "CDNA2": "MI250X", "CDNA3": "MI300X"}
TORCH_NAME = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32", torch.float64: "fp64",
              torch.float8_e4m3fnuz: "e4m3fnuz", torch.float8_e5m2fnuz: "e5m2fnuz"}
FROM_PTX = {ptx: name for name, ptx in PTX.items()}
SCALE_FORMAT = {"ue8m0": "e8m0fnu", "ue4m3": "ue4m3"}  # PTX's scale formats, ours


@dataclass(frozen=True)
class Sim:
    """One configuration MMA-Sim 2.1.1 lists: its operation (``OPS``), architecture and shape_and_type (an
    MFMA's suffix), as in mmasim/nv_ptx/isa_*.py and mmasim/amd/isa_mfma.py."""

    op: str
    arch: str
    shape: str

    def build(self):
        return _built(self)

    @property
    def key(self) -> str:
        """The configuration without the tile's m and n (and an MFMA's block count), which only repeat the
        dot product over the tile (test_the_census_drops_only_the_tile checks that MMA-Sim builds the same
        arithmetic across them): ``TCGen05MMA Blackwell k32.kind::f8f6f4.f32.e2m1.e4m3``,
        ``MFMA CDNA2 k8.fp32.bf16.bf16.1k``."""
        if self.op != "MFMA":
            return f"{self.op} {self.arch} {re.sub(r'^m[0-9]+n[0-9]+', '', self.shape)}"
        fa, fb, _, fd, k = formats(self)
        return f"MFMA {self.arch} k{k}.{fd}.{fa}.{fb}" + (".1k" if self.shape.endswith("_1k") else "")

    def __str__(self) -> str:
        return f"{self.op}({self.arch!r}, {self.shape!r})"


@functools.lru_cache(maxsize=None)
def _built(sim: Sim):
    return OPS[sim.op](sim.arch, sim.shape)


@functools.lru_cache(maxsize=None)
def formats(sim: Sim) -> tuple[str, str, str, str, int]:
    """A's, B's, C's and D's formats (our names) and k of a configuration, as MMA-Sim's own parser reads it."""
    op = sim.build()
    if sim.op == "MFMA":
        fa, fb = ("tf32", "tf32") if sim.shape.endswith("xf32") else (TORCH_NAME[op.a_type], TORCH_NAME[op.b_type])
    else:
        fa, fb = FROM_PTX[op.a_type_ptx], FROM_PTX[op.b_type_ptx]
    return fa, fb, TORCH_NAME[op.c_type], TORCH_NAME[op.d_type], op.k


def listed() -> list[Sim]:
    """Every configuration MMA-Sim lists, in its order."""
    return [Sim(op, arch, shape) for op, table in LISTS.items() for arch, shapes in table.items() for shape in shapes]


@functools.lru_cache(maxsize=None)
def census() -> dict[str, Sim]:
    """MMA-Sim's configurations by :attr:`Sim.key`, each the first of its tiles MMA-Sim lists."""
    out: dict[str, Sim] = {}
    for sim in listed():
        out.setdefault(sim.key, sim)
    return out


def _instruction(sim: Sim, fa: str) -> str:
    """The name of our instruction that answers a configuration: PTX's mma.sync ``mma`` (on Turing the legacy
    m8n8k4 is ``mma.m8n8k4``), ``wgmma``, ``tcgen05``, the block-scaled ``<mma|tcgen05>.<kind>.block<n>``
    (``.<scale>`` for mxf4nvf4.block16), AMD's ``mfma`` (CDNA2's bf16 without _1k: ``mfma.bf16``)."""
    if sim.op == "MMA":
        return "mma.m8n8k4" if sim.arch == "Turing" and sim.shape.startswith("m8n8k4") else "mma"
    if sim.op in ("WGMMA", "TCGen05MMA"):
        return {"WGMMA": "wgmma", "TCGen05MMA": "tcgen05"}[sim.op]
    if sim.op == "MFMA":
        return "mfma.bf16" if sim.arch == "CDNA2" and fa == "bf16" and not sim.shape.endswith("_1k") else "mfma"
    op = sim.build()
    scale = sim.shape.rsplit(".", 1)[1]
    name = f"{'mma' if sim.op == 'MMABlockScale' else 'tcgen05'}.{op.kind}.block{op.block_size}"
    return name + (f".{scale}" if (op.kind, op.block_size) == ("mxf4nvf4", 16) else "")


@functools.lru_cache(maxsize=None)
def preset(sim: Sim) -> tuple[str, str, str, str] | None:
    """(device, instruction, input, output) of the preset model that answers ``sim``; None where there is none
    (then ``OPEN`` must say why).  C narrower than D (Volta's and Turing's m8n8k4.f32.f16.f16.f16) is
    answered by the instruction named with C's PTX type (``mma.f16c``), whose model reads C in that format
    (``Model.c_format``)."""
    fa, fb, fc, fd, _ = formats(sim)
    device, name, fin = DEVICE[sim.arch], _instruction(sim, fa), F.pair_name(fa, fb)
    if fc != fd:
        name = f"{name}.{PTX[fc]}c"
    try:
        models = bf.device(device).instruction(name).models
    except ValueError:
        return None
    model = models.get((fin, fd))
    return (device, name, fin, fd) if model is not None and model.c_format.name == fc else None


# MMA-Sim's configurations that no preset answers, each with the reason (the census fails on any other)
OPEN: dict[str, str] = {}

# Our presets compared with an MMA-Sim configuration of another instruction: B200's mma.sync fp8 (MMA-Sim lists
# no mma.sync fp8 on Blackwell) against its tcgen05.mma kind::f8f6f4
EXTRA = [(Sim("TCGen05MMA", "Blackwell", f"m64n8k32.kind::f8f6f4.f32.{PTX[a]}.{PTX[b]}"),
          ("B200", "mma", F.pair_name(a, b), "fp32")) for a in ("e4m3fn", "e5m2") for b in ("e4m3fn", "e5m2")]

# Presets that depart from MMA-Sim on purpose, with the evidence (value mismatches allowed there).
DEPARTURES = {
    **{("B200", "mma", fin, "fp32"): "K&M's B200 hardware rows fit C added after the block (golden tests)"
       for fin in ("e4m3fn", "e5m2", "e4m3fn*e5m2", "e5m2*e4m3fn")},
}

# Presets that MMA-Sim does not model (so no census entry asks for them): Ampere's m8n8k4 (CUDA-core FMAs
# there: Valpey sec. 3.1), Hopper's mma.sync fp8 (fp16 HMMAs there: our H100 record's SASS) and library paths
# (H100 cublas: torch.matmul's epilogue); each is held to its own evidence elsewhere
# (tests/test_hardware_records.py, tests/test_probe_records.py).

FP6_FP4 = ("e3m2fn", "e2m3fn", "e2m1fn")
# every fp6/fp4 and block-scaled configuration runs under -m slow; these stand for them in the quick run (each
# fp6/fp4 format as A and as B, fp8 mixed in, both outputs, both devices; block-scaled: k = 32 with fp8 x fp4, the
# k = 64 kinds with ue8m0 and ue4m3; tests/test_mx_scaled.py runs every block-scaled configuration on a few rows)
FP6_FP4_QUICK = {("e2m1fn", "fp32"), ("e3m2fn", "fp16"), ("e2m3fn*e2m1fn", "fp32"), ("e4m3fn*e3m2fn", "fp16"),
                 ("e2m1fn*e5m2", "fp16"), ("e3m2fn*e2m3fn", "fp32")}
BLOCK_SCALED_QUICK = {("B200", "tcgen05.mxf8f6f4.block32", "e4m3fn*e2m1fn"), ("RTX 5090", "mma.mxf4.block32", "e2m1fn"),
                      ("B200", "tcgen05.mxf4nvf4.block16.ue4m3", "e2m1fn")}


def _configs() -> list:
    """One test per configuration MMA-Sim lists that a preset answers (and the ``EXTRA`` ones).  Under -m "not
    slow" a representative few: of a preset's configurations the one at the k our instruction names (else the
    first: the others are the same arithmetic at another k, m16n8k8 bf16 beside m16n8k16, MFMA's other tiles),
    and of the fp6/fp4 and block-scaled ones those in ``FP6_FP4_QUICK`` and ``BLOCK_SCALED_QUICK``."""
    runs = [(sim, preset(sim)) for sim in census().values() if preset(sim) is not None] + EXTRA
    by_preset: dict[tuple, list[Sim]] = {}
    for sim, target in runs:
        by_preset.setdefault(target, []).append(sim)
    quick = set()
    for (device, ins, fin, _fout), sims in by_preset.items():
        k = bf.device(device).instruction(ins).k[fin]
        quick.add(next((sim for sim in sims if formats(sim)[4] == k), sims[0]))
    out = []
    for sim, (device, ins, fin, fout) in runs:
        if sim.op.endswith("BlockScale"):
            slow = (device, ins, fin) not in BLOCK_SCALED_QUICK
        elif any(f in FP6_FP4 for f in _formats(fin)):
            slow = (fin, fout) not in FP6_FP4_QUICK
        else:
            slow = sim not in quick
        out.append(pytest.param(sim, device, ins, fin, fout, id=f"{device}-{ins}-{fin}-{fout}-{sim.key.split()[-1]}",
                                marks=(pytest.mark.slow,) if slow else ()))
    return out


def classify(fmt: F.Format, got: np.ndarray, want: np.ndarray, special_inputs: np.ndarray) -> dict[str, int]:
    """Mismatching rows by kind: both zero (the sign of zero), both NaN (NaN bits), a NaN or infinity among
    the row's inputs (special inputs: MMA-Sim's bf8 alignment reads such an exponent as -1 and can drop
    it), or a value."""
    g, w = F.decode(fmt, got), F.decode(fmt, want)
    differ = got != want
    both_zero = (g == 0) & (w == 0)
    both_nan = np.isnan(g) & np.isnan(w)
    special = differ & ~both_zero & ~both_nan & special_inputs
    return {"zero sign": int((differ & both_zero).sum()), "nan bits": int((differ & both_nan).sum()),
            "special inputs": int(special.sum()), "value": int((differ & ~both_zero & ~both_nan & ~special).sum())}


RESULTS: dict[str, dict[str, int]] = {}  # per configuration; conftest prints a one-line summary at the end


def _unscaled(sim: Sim, model, kk: int, seed: int):
    """(ours, MMA-Sim's, special-input rows) on the rows of draw_rows at k = kk, as bit patterns."""
    fa, fb = _formats(model.input_name)
    a, b, c = draw_rows(model, 400, kk, seed)  # C drawn in the model's C format, and given to MMA-Sim in it
    uint = {2: np.uint16, 4: np.uint32, 8: np.uint64}[model.output_format.dtype.itemsize]
    want = sim.build().dpa(_operand(a, fa), _operand(b, fb), torch.from_numpy(c).to(TORCH_DTYPE[model.c_format.name]))
    got = bf.dot(a, b, c, model=model).view(uint)
    special = ~(np.isfinite(a).all(axis=1) & np.isfinite(b).all(axis=1) & np.isfinite(c))
    return got, want.numpy().view(uint), special, lambda r: f"a={a[r].tolist()} b={b[r].tolist()} c={c[r]!r}"


def _block_scaled(sim: Sim, model, kk: int, seed: int):
    """The same for a block-scaled configuration: 64 rows of A against the 8 columns of B with their scales
    (helpers.block_scaled_rows: extreme, zero and NaN scales), MMA-Sim over the K of kk one instruction after
    another (helpers.mmasim_d), ours by bf.dot with scale_a and scale_b."""
    op = sim.build()
    fa, fb = _formats(model.input_name)
    cfg = (op.kind, fa, fb, op.block_size, SCALE_FORMAT[sim.shape.rsplit(".", 1)[1]])
    A, B, C, SA, SB = block_scaled_rows(cfg, 64, kk, seed)
    want = mmasim_d(DEVICE[sim.arch], cfg, A, B, C, SA, SB)
    got = bf.dot(A[:, None, :], B.T[None], C, model=model, scale_a=SA[:, None, :], scale_b=SB.T[None]).view(np.uint32)
    special = ~(np.isfinite(A).all(axis=1)[:, None] & np.isfinite(B).all(axis=0)[None, :] & np.isfinite(C)
                & ~np.isnan(SA).any(axis=1)[:, None] & ~np.isnan(SB).any(axis=0)[None, :])
    return (got.ravel(), want.ravel(), special.ravel(),
            lambda r: f"a={A[r // 8].tolist()} b={B[:, r % 8].tolist()} c={C.flat[r]!r} scale_a={SA[r // 8].tolist()} "
                      f"scale_b={SB[:, r % 8].tolist()}")


@pytest.mark.parametrize("sim,device,instruction,fin,fout", _configs())
def test_presets_agree_with_mmasim(sim, device, instruction, fin, fout):
    """Our preset against MMA-Sim's configuration at its k and at 2k (two instructions chained)."""
    model = bf.device(device).instruction(instruction).models[(fin, fout)]
    k = formats(sim)[4]
    counts = dict.fromkeys(("zero sign", "nan bits", "special inputs", "value"), 0)
    first, rows = [], 0
    scaled = sim.op.endswith("BlockScale")
    # block_scaled_rows: even seeds have fp8 specials, every third a NaN scale
    runs = ((k, 6), (k, 7), (2 * k, 1), (2 * k, 2)) if scaled else ((k, 1), (2 * k, 2))
    for kk, seed in runs:
        got, want, special, show = (_block_scaled if scaled else _unscaled)(sim, model, kk, seed)
        rows += got.size
        for key, n in classify(model.output_format, got, want, special).items():
            counts[key] += n
        for r in np.flatnonzero(got != want)[:2]:
            first.append(f"k={kk} row {r}: {show(r)} ours {int(got[r]):#x} MMA-Sim {int(want[r]):#x}")
    departure = (device, instruction, fin, fout) in DEPARTURES
    RESULTS[f"{device} {instruction} {fin}->{fout} ({sim})"] = dict(counts, rows=rows, departure=departure)
    if departure:  # the departure is real, or the entry is stale
        assert counts["value"] > 0, f"{DEPARTURES[device, instruction, fin, fout]}, yet MMA-Sim agrees: " \
                                    "drop the DEPARTURES entry"
        return
    assert counts["value"] == 0, (counts, first)


def test_census_every_mmasim_configuration_is_run_or_open():
    """Every configuration MMA-Sim lists (its tiles' m and n aside) is answered by a preset that
    test_presets_agree_with_mmasim runs, or is an open question (``OPEN``) with its reason; an open question a
    preset now answers is stale.  Among them the 84 unscaled fp6/fp4 kind::f8f6f4 configurations (21 input pairs
    with an fp6 or fp4 operand, fp16 and fp32 D, RTX 5090 mma and B200 tcgen05) and the 58 block-scaled ones
    (29 on each device: kind::mxf8f6f4 with 25 input pairs, mxf4, mxf4nvf4 block32, block16 with ue8m0 and
    with ue4m3)."""
    run = {p.values[0].key for p in _configs()}
    missing = [key for key in census() if key not in run and key not in OPEN]
    assert not missing, f"MMA-Sim lists configurations that no preset answers and OPEN does not explain: {missing}"
    stale = [key for key in OPEN if key in run or key not in census()]
    assert not stale, f"OPEN entries that a preset now answers, or that MMA-Sim no longer lists: {stale}"
    assert all(len(reason) > 40 for reason in OPEN.values())
    fp6_fp4 = [k for k in run if k.startswith(("MMA ", "TCGen05MMA ")) and re.search(r"\.e3m2|\.e2m3|\.e2m1", k)]
    scaled = [k for k in run if "BlockScale" in k]
    assert (len(fp6_fp4), len(scaled)) == (84, 58), (len(fp6_fp4), len(scaled))


def test_the_census_drops_only_the_tile():
    """The configurations one census key stands for (tcgen05's 64 tiles, wgmma's 32, MFMA's tiles and block
    counts of one k) build the same arithmetic in MMA-Sim: the same operation with the same parameters (the
    first, middle and last of each group compared)."""
    groups: dict[str, list[Sim]] = {}
    for sim in listed():
        groups.setdefault(sim.key, []).append(sim)

    def arithmetic(sim: Sim):
        op = sim.build().arithmetic_op
        return type(op).__name__, sorted(vars(op).items())

    for key, sims in groups.items():
        for sim in {sims[0], sims[len(sims) // 2], sims[-1]}:
            assert arithmetic(sim) == arithmetic(sims[0]), (key, str(sim), str(sims[0]))
    assert sum(map(len, groups.values())) == len(listed()) and len(groups) == len(census())


# --- Volta's and Turing's m8n8k4 with fp16 C and fp32 D: C read in fp16 (c_input_format) --------------------------
M8N8K4 = {"Volta": ("V100", "mma"), "Turing": ("T4", "mma.m8n8k4")}  # the fp32-C instruction; + ".f16c": fp16 C


def _small_rows(rows: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """fp16 A and B with exponents up to -7 (products below 2**-12) and an fp16 C up to 2**-10, about one
    in six of them subnormal: rows where C's exponent can decide the block's."""
    rng = np.random.default_rng(seed)

    def codes(shape, top):  # random sign and fraction, exponent field 0..top
        return rng.integers(0, 1 << 16, shape) & 0x83FF | (rng.integers(0, top + 1, shape) << 10)
    return (F.decode(F.fp16, codes((rows, k), 8)), F.decode(F.fp16, codes((rows, k), 8)),
            F.decode(F.fp16, codes(rows, 5)))


@pytest.mark.parametrize("arch", list(M8N8K4))
def test_fp16_c_fp32_d_agrees_with_mmasim(arch):
    """MMA-Sim's m8n8k4.f32.f16.f16.f16 (MMA_T_FDPA, the given C read as fp16, the chained results as fp32)
    against the preset of the instruction's ``.f16c`` path (``c_input_format="fp16"``), at k = 4, 8 and 12
    (one to three blocks): the same bits on every row of draw_rows and of the rows of small products whose
    C is often subnormal in fp16, and those rows do tell the readings apart (the fp32-C model with
    ``c_format="fp16"`` differs from MMA-Sim on some of them, each with a C subnormal in fp16)."""
    device, instruction = M8N8K4[arch]
    dev = bf.device(device)
    model = dev.instruction(f"{instruction}.f16c").models[("fp16", "fp32")]
    wide_c = dev.instruction(instruction).models[("fp16", "fp32")]
    assert model.c_format is F.fp16 and wide_c.c_format is F.fp32
    peer = nv.MMA(arch, "m8n8k4.f32.f16.f16.f16")
    rows = mismatches = wide_c_mismatches = 0
    for kk, seed in ((4, 1), (8, 2), (12, 3)):
        for a, b, c in (draw_rows(model, 400, kk, seed), _small_rows(1000, kk, seed)):
            want = peer.dpa(_operand(a, "fp16"), _operand(b, "fp16"), _operand(c, "fp16")).numpy().view(np.uint32)
            got = bf.dot(a, b, c, model=model).view(np.uint32)
            rows += got.size
            mismatches += int((got != want).sum())
            other = bf.dot(a, b, c, model=wide_c, c_format="fp16").view(np.uint32)
            subnormal = (c != 0) & (np.abs(c) < 2.0**-14)
            assert not np.any((other != want) & ~subnormal)
            wide_c_mismatches += int((other != want).sum())
    assert rows == 3 * (400 + 1000) and mismatches == 0
    assert wide_c_mismatches > 0


@pytest.mark.parametrize("arch", list(M8N8K4))
def test_fp16_c_fp32_d_subnormal_c_pinned(arch):
    """The row that separates the readings: a = b = (1 + 2**-10) 2**-10, C = 2**-20 (subnormal in fp16).  Read
    in fp16 (MMA-Sim, and the ``.f16c`` preset), C's exponent is -14, the block's quantum 2**(-14 - 23) and
    the product's last bit (2**-40) is cut: 0x1.004p-19.  At its own exponent -20 (the fp32-C model, C only
    checked against fp16 by ``c_format``) nothing is cut and the exact sum 2**-19 (1 + 2**-10 + 2**-21) is D:
    0x1.004008p-19."""
    device, instruction = M8N8K4[arch]
    dev = bf.device(device)
    model = dev.instruction(f"{instruction}.f16c").models[("fp16", "fp32")]
    wide_c = dev.instruction(instruction).models[("fp16", "fp32")]
    x = (1 + 2**-10) * 2**-10
    a = np.array([[x, 0.0, 0.0, 0.0]])
    c = np.array([2.0**-20])
    want = nv.MMA(arch, "m8n8k4.f32.f16.f16.f16").dpa(_operand(a, "fp16"), _operand(a, "fp16"), _operand(c, "fp16"))
    assert float(want[0]) == float.fromhex("0x1.004p-19")
    assert float(bf.dot(a, a, c, model=model)[0]) == float.fromhex("0x1.004p-19")
    assert float(bf.dot(a, a, c, model=wide_c, c_format="fp16")[0]) == float.fromhex("0x1.004008p-19")


@pytest.mark.parametrize("device,instruction,fin,suffix", [
    ("MI100", "mfma", "bf16", "f32_16x16x8bf16"), ("MI100", "mfma", "fp16", "f32_16x16x16f16"),
    ("MI250X", "mfma", "fp16", "f32_16x16x16f16"), ("MI250X", "mfma", "bf16", "f32_16x16x16bf16_1k"),
    ("MI250X", "mfma.bf16", "bf16", "f32_16x16x8bf16"), ("MI300X", "mfma", "bf16", "f32_16x16x16_bf16")])
def test_the_open_zero_sign_question_is_the_whole_zero_sign_difference(device, instruction, fin, suffix):
    """The variant '<device>~all-zero-block-sign' (+0 where every term is a zero) agrees with MMA-Sim on
    every zero sign: that one reading is all that separates the AMD presets' zeros from MMA-Sim's."""
    model = bf.device(f"{device}~all-zero-block-sign").instruction(instruction).models[(fin, "fp32")]
    k = bf.device(device).instruction(instruction).k[fin]
    arch = {"MI100": "CDNA1", "MI250X": "CDNA2", "MI300X": "CDNA3"}[device]
    peer = Sim("MFMA", arch, suffix).build()
    for kk, seed in ((k, 1), (2 * k, 2)):
        a, b, c = draw_rows(model, 400, kk, seed)
        want = peer.dpa(torch.from_numpy(a).to(TORCH_DTYPE[fin]), torch.from_numpy(b).to(TORCH_DTYPE[fin]),
                        torch.from_numpy(c).float()).numpy().view(np.uint32)
        got = bf.dot(a, b, c, model=model).view(np.uint32)
        special = ~(np.isfinite(a).all(axis=1) & np.isfinite(b).all(axis=1) & np.isfinite(c))
        counts = classify(F.fp32, got, want, special)
        assert counts["zero sign"] == 0 and counts["value"] == 0, counts
