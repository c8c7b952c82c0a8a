"""Device presets: device -> instruction -> (input, output) -> Model, each with its sources.

Every number here comes from shared/DEVICE-FACTS.md, which digests the published studies; each preset says
which sources it rests on and how well they agree (``confidence``).  Where sources conflict the preset
chooses, says why in ``notes``, and keeps the other reading as a named variant (``variants``).

    >>> import blockfma as bf
    >>> bf.device("H200").name
    'H100'
    >>> bf.device("A100").model("fp16", "fp32").block_width
    8
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field

from . import formats as _formats
from .formats import RoundingMode
from .model import Family, Model, NaNStyle

__all__ = ["Source", "Instruction", "Device", "SOURCES", "device", "devices", "names"]


@dataclass(frozen=True)
class Source:
    """A publication or dataset a preset rests on."""

    key: str
    citation: str
    kind: str  # "hardware study", "simulator", "vendor manual", "vendor note", "hardware data"


SOURCES: dict[str, Source] = {s.key: s for s in (
    Source("Fasi2021", "M. Fasi, N. J. Higham, M. Mikaitis, S. Pranesh, Numerical behavior of NVIDIA tensor cores, "
           "PeerJ Comput. Sci. 7:e330 (2021)", "hardware study"),
    Source("FTTN", "X. Li, A. Li, B. Fang, K. Swirydowicz, I. Laguna, G. Gopalakrishnan, FTTN: Feature-targeted "
           "testing for numerical properties of NVIDIA & AMD matrix accelerators (2024)", "hardware study"),
    Source("Valpey", "B. Valpey, X. Li, S. Pai, G. Gopalakrishnan, An SMT formalization of mixed-precision matrix "
           "multiplication: modeling three generations of tensor cores", "hardware study"),
    Source("KM", "F. A. Khattak, M. Mikaitis, Accurate models of NVIDIA tensor cores, arXiv:2512.07004; and "
           "Generalized methodology for determining numerical features of hardware floating-point matrix "
           "multipliers, IEEE HPEC 2025 (models checked bit for bit against recorded GPU outputs)", "hardware study"),
    Source("MMA-Sim", "P. Xie et al., MMA-Sim: bit-accurate reference model of tensor cores and matrix cores, "
           "arXiv:2511.10909", "simulator"),
    Source("Hawkeye", "Badash et al., Hawkeye, arXiv:2603.20421", "hardware study"),
    Source("blockfma-H100", "blockfma's own record: 21 million dot products through mma.sync and wgmma on an H100 80GB "
           "HBM3, 2026-11-22 (data/hardware/h100-mma-wgmma.json, h100-mma-fp8.json)", "hardware data"),
    Source("DeepSeek-V3", "DeepSeek-AI, DeepSeek-V3 technical report, sec. 3.5.2 (fp8 accumulation 'about 14 bits')",
           "hardware study"),
    Source("mmaemu", "mmaemu tensor-core emulator (fp8 accumulation)", "simulator"),
    Source("DeepGEMM-176", "DeepGEMM issue 176 (Blackwell fp8 accumulation)", "hardware study"),
    Source("AMD-MIOpen", "AMD, MIOpen note 'MI200 matrix fused multiply-add behavior specifics'", "vendor note"),
    Source("Intel-SDM", "Intel 64 and IA-32 Architectures Software Developer's Manual, TDPBF16PS pseudocode",
           "vendor manual"),
    Source("Arm-ARM", "Arm Architecture Reference Manual, BFDOT/BFMMLA/BFMOPA with FPCR.EBF", "vendor manual"),
    Source("IEEE754", "IEEE Std 754-2019, fusedMultiplyAdd and correctly rounded operations", "vendor manual"),
)}


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
    """A named preset: instruction paths with their models, sources and how far to trust them."""

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

    def model(self, input_format: str = "fp16", output_format: str = "fp32",
              instruction: str | None = None) -> Model:
        """The Model for a format pair: from ``instruction`` if given, else from the default instruction,
        else from the first instruction that takes the pair."""
        key = (_formats.get(input_format).name, _formats.get(output_format).name)
        candidates = [self.instruction(instruction)] if instruction else list(self.instructions)
        for ins in candidates:
            if key in ins.models:
                return ins.models[key]
        where = f"instruction {instruction!r} of {self.name}" if instruction else self.name
        have = ", ".join(f"{i}->{o}" for i, o in (candidates[0].pairs() if instruction else self.pairs()))
        raise ValueError(f"{where} has no model for {key[0]} inputs with {key[1]} output; available: {have}")

    def instruction_for(self, input_format: str, output_format: str) -> Instruction:
        """The instruction :meth:`model` would use for the pair."""
        key = (_formats.get(input_format).name, _formats.get(output_format).name)
        for ins in self.instructions:
            if key in ins.models:
                return ins
        raise ValueError(f"{self.name} has no instruction for {key[0]}->{key[1]}")

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


# --- model builders -------------------------------------------------------------------------------------
def _nvidia(inp: str, out: str, L: int, F: int, e_zero: int, *, out_bits: int | None = None, name: str = "") -> Model:
    """The truncated fused dot-add of NVIDIA tensor cores (DEVICE-FACTS, 'The common NVIDIA algorithm')."""
    fp32_out = out == "fp32"
    return Model(
        Family.TRUNCATED_FUSED, inp, out, block_width=L, fraction_bits=F, e_zero=e_zero,
        output_rounding=RoundingMode.TowardZero if fp32_out else RoundingMode.TiesToEven,
        output_fraction_bits=out_bits if fp32_out else None,
        input_rounding=RoundingMode.TowardZero if inp == "tf32" else None,
        overflow="inf", nan=NaNStyle.CANONICAL, exact_zero="positive", rounded_zero="positive", name=name)


def _fma(fmt: str, *, subnormals: bool = True, nan: NaNStyle = NaNStyle.DEFAULT, name: str = "") -> Model:
    return Model(Family.FMA_CHAIN, fmt, fmt, block_width=1, subnormals=subnormals, nan=nan, name=name)


def _nv_fp16_family(L: int, F: int, ez32: int, ez16: int, tag: str, *, bf16: bool = True) -> dict:
    models = {("fp16", "fp32"): _nvidia("fp16", "fp32", L, F, ez32, name=f"{tag} fp16->fp32"),
              ("fp16", "fp16"): _nvidia("fp16", "fp16", L, F, ez16, name=f"{tag} fp16->fp16")}
    if bf16:
        models[("bf16", "fp32")] = _nvidia("bf16", "fp32", L, F, ez32, name=f"{tag} bf16->fp32")
    return models


def _nv_fp8(L: int, F: int, ez32: int, ez16: int, tag: str, out_bits: int | None) -> dict:
    models = {}
    for fmt in ("e4m3fn", "e5m2"):
        models[(fmt, "fp32")] = _nvidia(fmt, "fp32", L, F, ez32, out_bits=out_bits, name=f"{tag} {fmt}->fp32")
        models[(fmt, "fp16")] = _nvidia(fmt, "fp16", L, F, ez16, name=f"{tag} {fmt}->fp16")
    return models


def _build() -> dict[str, Device]:
    devs: list[Device] = []
    V100 = _nv_fp16_family(4, 23, -131, -19, "V100", bf16=False)
    devs.append(Device(
        "V100", "NVIDIA", "Volta sm_70",
        (Instruction("mma", V100, {"fp16": 4}, ptx="mma.sync.m8n8k4 / wmma.m16n16k16 (HMMA.884)"),),
        ("Fasi2021", "FTTN", "Valpey", "KM", "MMA-Sim"), "high",
        notes="4-term truncated fused dot-add, F = 23 (no extra alignment bit), truncation of each aligned term "
              "(Valpey: not IEEE RZ), 3 carry bits (Valpey; Fasi observed 2); RNE to fp16 inside the unit.",
        aliases=("Volta", "Titan V", "sm_70")))

    T4 = _nv_fp16_family(8, 24, -132, -20, "T4", bf16=False)
    devs.append(Device(
        "T4", "NVIDIA", "Turing sm_75",
        (Instruction("mma", T4, {"fp16": 8}, ptx="mma.sync.m16n8k8 (HMMA.1688)"),
         Instruction("mma.m8n8k4", V100, {"fp16": 4}, ptx="mma.sync.m8n8k4 (legacy, behaves as V100)")),
        ("MMA-Sim", "Fasi2021"), "medium",
        notes="Rests on one modern source (MMA-Sim: L = 8, F = 24); Fasi et al. 2021 found one extra alignment bit "
              "on T4, consistent with F = 24. The legacy m8n8k4 path behaves as V100.",
        aliases=("Turing", "RTX 2080 Ti", "RTX 20", "sm_75")))

    A100 = _nv_fp16_family(8, 24, -132, -20, "A100")
    A100[("tf32", "fp32")] = _nvidia("tf32", "fp32", 4, 24, -132, name="A100 tf32->fp32")
    A100[("fp64", "fp64")] = _fma("fp64", name="A100 DMMA fp64")
    devs.append(Device(
        "A100", "NVIDIA", "Ampere sm_80/sm_86",
        (Instruction("mma", A100, {"fp16": 16, "bf16": 16, "tf32": 8, "fp64": 4},
                     ptx="mma.sync.m16n8k16 / m16n8k8 (tf32) / m8n8k4 (f64), wmma"),),
        ("KM", "MMA-Sim", "Hawkeye", "FTTN", "Fasi2021"), "high",
        notes="fp16/bf16: blocks of 8 (k = 16 is two chained 8-blocks), F = 24; tf32: blocks of 4, inputs read from "
              "fp32 registers by truncation; fp64 DMMA is a chain of IEEE FMAs (RNE).",
        aliases=("A30", "A2", "A10", "A40", "RTX A6000", "RTX 3090", "RTX 3080", "RTX 3060", "RTX 30", "Ampere",
                 "sm_80", "sm_86")))

    Ada = _nv_fp16_family(8, 24, -132, -20, "Ada")
    Ada[("tf32", "fp32")] = _nvidia("tf32", "fp32", 4, 24, -132, name="Ada tf32->fp32")
    Ada.update(_nv_fp8(16, 13, -132, -20, "Ada", out_bits=13))
    devs.append(Device(
        "Ada", "NVIDIA", "Ada Lovelace sm_89",
        (Instruction("mma", Ada, {"fp16": 16, "bf16": 16, "tf32": 8, "e4m3fn": 32, "e5m2": 32},
                     ptx="mma.sync.m16n8k16 / m16n8k8 (tf32) / m16n8k32 (fp8)"),),
        ("KM", "MMA-Sim", "mmaemu"), "high",
        notes="As A100 for fp16/bf16/tf32. fp8: blocks of 16 (k = 32 is two chained 16-blocks), F = 13, fp32 "
              "output truncated to 13 fraction bits ('e8m13', also between the two blocks), RNE for fp16 output.",
        aliases=("L40S", "L40", "L4", "RTX 4090", "RTX 4080", "RTX 40", "sm_89")))

    H100 = _nv_fp16_family(16, 25, -133, -21, "H100")
    H100[("tf32", "fp32")] = _nvidia("tf32", "fp32", 8, 25, -133, name="H100 tf32->fp32")
    H100_wgmma = dict(H100)
    H100_wgmma.update(_nv_fp8(32, 13, -133, -21, "H100", out_bits=13))
    H100[("fp64", "fp64")] = _fma("fp64", name="H100 DMMA fp64")
    devs.append(Device(
        "H100", "NVIDIA", "Hopper sm_90",
        (Instruction("mma", H100, {"fp16": 16, "bf16": 16, "tf32": 8, "fp64": 4},
                     ptx="mma.sync.m16n8k16 / m16n8k8 (tf32) / m8n8k4 (f64), wmma"),
         Instruction("wgmma", H100_wgmma, {"fp16": 16, "bf16": 16, "tf32": 8, "e4m3fn": 32, "e5m2": 32},
                     ptx="wgmma.mma_async.m64nNk16 / k8 (tf32) / k32 (fp8)")),
        ("KM", "MMA-Sim", "Hawkeye", "FTTN", "DeepSeek-V3", "mmaemu", "blockfma-H100"), "high",
        notes="fp16/bf16: one 16-wide block, F = 25 (FTTN: >= 2 extra bits, >= 16 wide); tf32: blocks of 8; "
              "fp8 (wgmma only): one 32-wide block, F = 13 and the fp32 result keeps 13 fraction bits "
              "(DeepSeek-V3: 'about 14 bits'). fp64 DMMA: chain of IEEE FMAs. Our own H100 record "
              "(data/hardware, 2026-11-22) matches fp16/bf16/tf32/fp8 wgmma and mma bit for bit, shows every "
              "zero result is +0, and shows mma.sync fp8 runs as two fp16 HMMAs plus an IEEE add of C "
              "(not modelled here).",
        aliases=("H200", "H800", "H20", "GH200", "Hopper", "sm_90")))

    B200 = _nv_fp16_family(16, 25, -133, -21, "B200")
    B200[("tf32", "fp32")] = _nvidia("tf32", "fp32", 8, 25, -133, name="B200 tf32->fp32")
    B200_tc = dict(B200)
    for fmt in ("e4m3fn", "e5m2"):
        B200_tc[(fmt, "fp32")] = _nvidia(fmt, "fp32", 32, 25, -133, name=f"B200 {fmt}->fp32")
    B200[("fp64", "fp64")] = _fma("fp64", name="B200 DMMA fp64")
    devs.append(Device(
        "B200", "NVIDIA", "Blackwell sm_100",
        (Instruction("mma", B200, {"fp16": 16, "bf16": 16, "tf32": 8, "fp64": 4}, ptx="mma.sync"),
         Instruction("tcgen05", B200_tc, {"fp16": 16, "bf16": 16, "tf32": 8, "e4m3fn": 32, "e5m2": 32},
                     ptx="tcgen05.mma")),
        ("KM", "MMA-Sim", "DeepGEMM-176"), "high",
        notes="fp16/bf16/tf32 as Hopper. fp8 (tcgen05): one 32-wide block with F = 25, RZ fp32 output (Blackwell "
              "drops Hopper's 13-bit limit); confidence for fp8 is only medium: K&M's own B200 fp8 hardware data "
              "do not fit this row on about a third of random cases (mma.sync fp8 may be rewritten to fp16 HMMA).",
        aliases=("B100", "GB200", "Blackwell", "sm_100")))

    RTX50 = _nv_fp16_family(16, 25, -133, -21, "RTX 5090")
    devs.append(Device(
        "RTX 5090", "NVIDIA", "Blackwell sm_120",
        (Instruction("mma", RTX50, {"fp16": 16, "bf16": 16}, ptx="mma.sync.m16n8k16"),),
        ("KM", "MMA-Sim"), "high",
        notes="fp16/bf16 as B200 (DEVICE-FACTS); other formats are not published for sm_120 and left out.",
        aliases=("RTX PRO 6000", "RTX 50", "sm_120")))

    # --- AMD -------------------------------------------------------------------------------------------
    def exact(inp: str, L: int | None, name: str, out: str = "fp32") -> Model:
        return Model(Family.EXACT_FUSED, inp, out, block_width=L, nan=NaNStyle.DEFAULT, name=name)

    devs.append(Device(
        "MI100", "AMD", "CDNA1 gfx908",
        (Instruction("mfma", {("fp16", "fp32"): exact("fp16", 4, "MI100 fp16"),
                              ("bf16", "fp32"): exact("bf16", 2, "MI100 bf16"),
                              ("fp32", "fp32"): _fma("fp32", name="MI100 fp32 MFMA")},
                     {"fp16": 4, "bf16": 2, "fp32": 1}, ptx="v_mfma_f32_*"),),
        ("MMA-Sim", "KM", "FTTN"), "high",
        notes="Exact sum of L products and C, one rounding to nearest even (L = 4 fp16, 2 bf16); fp32 MFMA is a "
              "chain of FMAs. FTTN's porting GEMM gives 255.875.",
        aliases=("CDNA1", "gfx908")))

    def pairwise(inp: str, L: int, name: str) -> Model:
        return Model(Family.PAIRWISE, inp, "fp32", block_width=L, subnormals=False, nan=NaNStyle.DEFAULT, name=name)

    cdna2 = {("fp16", "fp32"): pairwise("fp16", 4, "MI250X fp16"),
             ("bf16", "fp32"): pairwise("bf16", 4, "MI250X bf16_1k"),
             ("fp32", "fp32"): _fma("fp32", name="MI250X fp32 MFMA"),
             ("fp64", "fp64"): _fma("fp64", name="MI250X fp64 MFMA")}
    devs.append(Device(
        "MI250X", "AMD", "CDNA2 gfx90a",
        (Instruction("mfma", cdna2, {"fp16": 4, "bf16": 4, "fp32": 1, "fp64": 1}, ptx="v_mfma_f32_*_f16 / *_bf16_1k"),
         Instruction("mfma.bf16", {("bf16", "fp32"): pairwise("bf16", 2, "MI250X bf16 (legacy)")}, {"bf16": 2},
                     ptx="v_mfma_f32_*_bf16 (without _1k)")),
        ("AMD-MIOpen", "MMA-Sim", "KM", "FTTN"), "high",
        notes="Exact fp32 products, IEEE fp32 adds (p0+p1)+(p2+p3), then C + that, RNE; subnormal inputs, products, "
              "sums and C flushed to zero. Sources conflict: AMD's MIOpen note, MMA-Sim and K&M model pairwise adds "
              "(three sources, one the vendor), which give 255.875 on FTTN's porting GEMM, whereas FTTN reports a "
              "block width of 1 and 0 on that GEMM without saying which instruction its HIP code reached. This "
              "preset follows the vendor and the two models; FTTN's reading is the variant 'MI250X-fttn'.",
        aliases=("MI250", "MI210", "CDNA2", "gfx90a"), variants=("MI250X-fttn",)))
    fttn_chain = {(f, "fp32"): Model(Family.FMA_CHAIN, f, "fp32", block_width=1, subnormals=False,
                                     nan=NaNStyle.DEFAULT, name=f"MI250X (FTTN reading) {f}")
                  for f in ("fp16", "bf16")}
    devs.append(Device(
        "MI250X-fttn", "AMD", "CDNA2 gfx90a (FTTN's reading)",
        (Instruction("mfma", fttn_chain, {"fp16": 1, "bf16": 1}),),
        ("FTTN",), "low",
        notes="FTTN's observation on MI250X: block FMA width 1 (each product added with its own RNE fp32 rounding) "
              "and no subnormals; reproduces FTTN's 0 on the porting GEMM. Kept as the alternative to the MI250X "
              "preset.",
        variant_of="MI250X"))

    def late(inp: str, L: int, name: str, groups: int = 1) -> Model:
        return Model(Family.LATE_C, inp, "fp32", block_width=L, fraction_bits=24, late_fraction_bits=31,
                     groups=groups, input_rounding=RoundingMode.TowardZero if inp == "tf32" else None,
                     nan=NaNStyle.CANONICAL, name=name)

    cdna3 = {("fp16", "fp32"): late("fp16", 8, "MI300X fp16"),
             ("bf16", "fp32"): late("bf16", 8, "MI300X bf16"),
             ("tf32", "fp32"): late("tf32", 4, "MI300X xf32"),
             ("e4m3fnuz", "fp32"): late("e4m3fnuz", 16, "MI300X fp8", groups=2),
             ("e5m2fnuz", "fp32"): late("e5m2fnuz", 16, "MI300X bf8", groups=2),
             ("fp32", "fp32"): _fma("fp32", name="MI300X fp32 MFMA"),
             ("fp64", "fp64"): _fma("fp64", name="MI300X fp64 MFMA")}
    devs.append(Device(
        "MI300X", "AMD", "CDNA3 gfx942",
        (Instruction("mfma", cdna3, {"fp16": 8, "bf16": 8, "tf32": 4, "e4m3fnuz": 16, "e5m2fnuz": 16,
                                     "fp32": 1, "fp64": 1}, ptx="v_mfma_f32_*"),),
        ("MMA-Sim", "KM"), "high",
        notes="Products aligned to their own maximum and truncated at F = 24, summed exactly; C added afterwards: "
              "sum floored at 31 fraction bits and C at 24 relative to the common maximum, then RNE to fp32. fp8: "
              "even- and odd-indexed products summed separately first. xf32 inputs are truncated to tf32. Rests on "
              "one modern source family (MMA-Sim and K&M, which differ in details of the late-C step; this follows "
              "K&M and MMA-Sim's 2025 code).",
        aliases=("MI300A", "MI300", "MI325X", "CDNA3", "gfx942")))

    # --- CPUs (specification only) ---------------------------------------------------------------------
    devs.append(Device(
        "Intel AMX", "Intel", "AMX-BF16 (Sapphire Rapids and later)",
        (Instruction("tdpbf16ps", {("bf16", "fp32"): Model(Family.AMX, "bf16", "fp32", block_width=32,
                                                            subnormals=False, nan=NaNStyle.INDEFINITE,
                                                            name="AMX TDPBF16PS")},
                     {"bf16": 32}, ptx="TDPBF16PS"),),
        ("Intel-SDM",), "medium",
        notes="From the SDM pseudocode only (no public hardware study): two fp32 partial sums per element (even and "
              "odd bf16 of each pair) updated by fp32 FMAs with RNE, input and output subnormals flushed, then "
              "C + (even + odd). The older Intrinsics Guide describes sequential accumulation instead.",
        aliases=("AMX", "Sapphire Rapids", "TDPBF16PS"), specification_only=True))
    devs.append(Device(
        "Arm BFDOT", "Arm", "Armv8.6-A BF16 (FPCR.EBF = 0)",
        (Instruction("bfdot", {("bf16", "fp32"): Model(Family.BFDOT, "bf16", "fp32", block_width=2,
                                                        output_rounding=RoundingMode.ToOdd, subnormals=False,
                                                        nan=NaNStyle.DEFAULT, name="Arm BFDOT EBF=0")},
                     {"bf16": 2}, ptx="BFDOT / BFMMLA / BFMOPA"),),
        ("Arm-ARM",), "medium",
        notes="From the Arm ARM only: both products rounded to fp32, their sum rounded, then added to C, each "
              "step rounded to odd with subnormals flushed and the default NaN. FPCR.EBF = 1 is the variant "
              "'Arm BFDOT EBF=1'.",
        aliases=("BFDOT", "BFMMLA", "Arm", "Neoverse V1", "Graviton3"), specification_only=True,
        variants=("Arm BFDOT EBF=1",)))
    devs.append(Device(
        "Arm BFDOT EBF=1", "Arm", "Armv9.2 FEAT_EBF16 with FPCR.EBF = 1",
        (Instruction("bfdot", {("bf16", "fp32"): Model(Family.EXACT_FUSED, "bf16", "fp32", block_width=2,
                                                        nan=NaNStyle.DEFAULT, name="Arm BFDOT EBF=1")},
                     {"bf16": 2}),),
        ("Arm-ARM",), "medium",
        notes="Fused 2-way dot product with one rounding (to nearest even, subnormals kept) per the Arm ARM.",
        aliases=("BFDOT-EBF1",), specification_only=True, variant_of="Arm BFDOT"))

    # --- CPU references --------------------------------------------------------------------------------
    ins = ("fp64", "fp32", "tf32", "bf16", "fp16", "e4m3fn", "e5m2", "e4m3fnuz", "e5m2fnuz")
    exact_models = {(i, o): Model(Family.EXACT_FUSED, i, o, block_width=None, name=f"exact {i}->{o}")
                    for i in ins for o in ("fp32", "fp64", "fp16")}
    devs.append(Device(
        "exact", "reference", "correctly rounded dot product",
        (Instruction("dot", exact_models),), ("IEEE754",), "high",
        notes="The whole dot product a·b + c computed exactly and rounded once to nearest even: the most accurate "
              "answer any device could give.",
        aliases=("cpu-exact", "correctly-rounded")))
    seq = {(i, o): Model(Family.FMA_CHAIN, i, o, block_width=1, name=f"ieee-sequential {i}->{o}")
           for i in ins for o in ("fp32", "fp64", "fp16")}
    devs.append(Device(
        "ieee-sequential", "reference", "IEEE FMA loop",
        (Instruction("fma", seq),), ("IEEE754",), "high",
        notes="d = c; d = fma(a_i, b_i, d) for i = 0..k-1 in the output format, round to nearest even: what a "
              "plain loop on a CPU or on GPU CUDA cores computes.",
        aliases=("cpu", "sequential", "fma-loop", "cuda-cores")))
    return {d.name: d for d in devs}


_DEVICES = _build()
_LOOKUP: dict[str, str] = {}
for _d in _DEVICES.values():
    for _key in (_d.name, *_d.aliases):
        _LOOKUP[_key.lower().replace(" ", "").replace("-", "").replace("_", "")] = _d.name


def _key(name: str) -> str:
    return str(name).strip().lower().replace(" ", "").replace("-", "").replace("_", "")


def names() -> list[str]:
    """Names of the presets (variants included), in presentation order."""
    return list(_DEVICES)


def devices(*, variants: bool = True) -> list[Device]:
    """Every preset, optionally without the alternative readings."""
    return [d for d in _DEVICES.values() if variants or d.variant_of is None]


def device(name: str | Device) -> Device:
    """Look up a preset by name or alias (case, spaces, '-' and '_' ignored)."""
    if isinstance(name, Device):
        return name
    k = _key(name)
    if k in _LOOKUP:
        return _DEVICES[_LOOKUP[k]]
    every = list(_DEVICES) + [a for d in _DEVICES.values() for a in d.aliases]
    close = difflib.get_close_matches(str(name), every, n=4, cutoff=0.4)
    if not close:
        close = [n for n in every if _key(n).startswith(k[:2])][:4] if k else []
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise ValueError(f"unknown device {name!r}{hint} (presets: {', '.join(_DEVICES)})")
