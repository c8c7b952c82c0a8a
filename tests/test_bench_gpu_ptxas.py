"""benchmarks/bench_gpu.py --ptxas: the SASS and PTX loop parsing (pure functions, on hand-written text) and,
where Triton and its nvidia tools are installed, one real compilation for sm_90 (no GPU needed)."""

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def bench():
    """benchmarks/bench_gpu.py as a module (it is a script, not part of the package)."""
    spec = importlib.util.spec_from_file_location("bench_gpu", ROOT / "benchmarks" / "bench_gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# two passes over lanes inside a loop over blocks, as cuobjdump -sass prints them (encodings cut short), and a
# branch to itself at the end (no loop)
SASS = """
        Function : gemm_kernel
        /*0000*/                   IMAD.MOV.U32 R1, RZ, RZ, c[0x0][0x28] ;   /* 0x00000a0000017a02 */
        /*0010*/                   MOV R2, RZ ;                                /* 0x000000ff00027202 */
        /*0020*/                   LDG.E R4, desc[UR4][R2.64] ;                /* 0x0000000402047981 */
        /*0030*/               @P0 LDG.E R5, desc[UR4][R6.64] ;                /* 0x0000000406050981 */
        /*0040*/                   VIADDMNMX R7, R4, R5, R7, !PT ;             /* 0x0000000504077246 */
        /*0050*/                   IADD3 R2, R2, 0x1, RZ ;                     /* 0x0000000102027810 */
        /*0060*/                   ISETP.NE.AND P1, PT, R2, 0x20, PT ;         /* 0x0000002002007c0c */
        /*0070*/               @P1 BRA 0x20 ;                                  /* 0xfffffffc00e01947 */
        /*0080*/                   LDG.E.128 R8, desc[UR4][R2.64] ;            /* 0x0000000402087981 */
        /*0090*/                   FMUL R9, R8, R10 ;                          /* 0x0000000a08097220 */
        /*00a0*/                   FMUL R9, R9, R11 ;                          /* 0x0000000b09097220 */
        /*00b0*/                   F2I.TRUNC.NTZ R12, R9 ;                     /* 0x00000009000c7305 */
        /*00c0*/                   IMAD.IADD R13, R13, 0x1, R12 ;              /* 0x00000001130d7824 */
        /*00d0*/                   LDG.E R14, desc[UR4][R2.64] ;               /* 0x0000000402147981 */
        /*00e0*/              @!P1 BRA 0x80 ;                                  /* 0xfffffffc00e09947 */
        /*00f0*/               @P2 BRA 0x10 ;                                  /* 0xfffffffc00e02947 */
        /*0100*/                   EXIT ;                                      /* 0x000000000000794d */
        /*0110*/                   BRA 0x110;                                  /* 0xfffffffc00fc7947 */
"""

# the same loops in PTX, the second one's loads half of the SASS's (ptxas unrolled it twice), and a branch
# back to a label that is no loop header (LLVM places some exits before their branch)
PTX = """
$L__BB0_9:                              // %._crit_edge
	add.s32 	%r1, %r1, 1;
	bra.uni 	$L__BB0_10;
$L__BB0_2:                              // %.preheader
                                        // =>This Loop Header: Depth=1
	@%p46 bra 	$L__BB0_9;
$L__BB0_5:                              //   Parent Loop BB0_2 Depth=1
                                        // =>  This Inner Loop Header: Depth=2
	@%p47 ld.global.b32 { %r278 }, [ %rd95 + 0 ];
	ld.global.b32 { %r279 }, [ %rd96 + 0 ];
	max.s32 	%r3, %r3, %r2;
	@%p49 bra 	$L__BB0_5;
$L__BB0_7:                              //   Parent Loop BB0_2 Depth=1
                                        // =>  This Inner Loop Header: Depth=2
	ld.global.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd95 + 0 ];
	mul.f32 	%f1, %f2, %f3;
	@%p50 bra 	$L__BB0_7;
	@%p51 bra 	$L__BB0_2;
$L__BB0_10:
	ret;
"""


def test_sass_loops():
    loops = bench().sass_loops(SASS)
    spans = [(lp["start"], lp["end"], lp["innermost"]) for lp in loops]
    assert spans == [(0x10, 0xF0, False), (0x20, 0x70, True), (0x80, 0xE0, True)]
    first, second = loops[1], loops[2]
    assert first["instructions"] == 6 and first["loads"] == 2
    assert first["opcodes"] == {"LDG": 2, "BRA": 1, "IADD3": 1, "ISETP": 1, "VIADDMNMX": 1}
    assert second["instructions"] == 7 and second["loads"] == 2
    assert list(second["opcodes"].items())[:2] == [("FMUL", 2), ("LDG", 2)]  # most first, then by name
    passes = bench().lane_passes(loops)
    assert [(p["loop"]["start"], p["outer"]) for p in passes] == [(0x20, None), (0x80, None)]


def test_ptx_loops():
    loops = bench().ptx_loops(PTX)
    inner = [lp for lp in loops if lp["innermost"]]
    assert [(lp["instructions"], lp["loads"]) for lp in inner] == [(4, 2), (3, 1)]
    assert len(loops) == 3  # the blocks' loop around them; the branch back to BB0_9 is none


def test_mac_cost():
    cost = bench().mac_cost(SASS, PTX, per_thread=4)
    exp, total = cost["passes"]
    assert exp["name"] == "exponent pass" and total["name"] == "sum pass"
    assert (exp["unroll"], exp["products_per_iteration"], exp["per_mac"]) == (1, 4, 6 / 4)
    assert (total["unroll"], total["products_per_iteration"], total["per_mac"]) == (2, 8, 7 / 8)
    assert cost["instructions_per_mac"] == 6 / 4 + 7 / 8
    assert (exp["bytes_per_mac"], total["bytes_per_mac"]) == (8 / 4, (16 + 4) / 8)  # LDG.E 4 bytes, .128 16
    assert bench().mac_cost(SASS, None, per_thread=4)["passes"][1]["unroll"] is None  # no PTX: counted as 1


def test_load_bytes_by_width():
    """The bytes a loop's global loads read per thread, by their width modifiers (fp8 and fp16 operands)."""
    sass = """
        /*0000*/                   LDG.E.U8 R3, desc[UR4][R2.64] ;
        /*0010*/               @P0 LDG.E.U16.CONSTANT R4, desc[UR4][R2.64] ;
        /*0020*/                   LDG.E.64 R6, desc[UR4][R2.64] ;
        /*0030*/                   F2FP.F16.E4M3.UNPACK_B R5, R3 ;
        /*0040*/               @P1 BRA 0x0 ;
        /*0050*/                   EXIT ;
"""
    (p,) = bench().mac_cost(sass, None, per_thread=2)["passes"]
    assert p["bytes_per_mac"] == (1 + 2 + 8) / 2


def test_unit_loop():
    """A pass whose innermost loop lies in a loop over units of lanes: the outer loop's own instructions
    count once per unit."""
    sass = """
        /*0000*/                   MOV R2, RZ ;
        /*0010*/                   LDG.E R3, desc[UR4][R2.64] ;
        /*0020*/                   FFMA R4, R5, R6, R4 ;
        /*0030*/               @P1 BRA 0x20 ;
        /*0040*/                   F2I.TRUNC.NTZ R12, R4 ;
        /*0050*/               @P2 BRA 0x10 ;
        /*0060*/                   EXIT ;
"""
    (p,) = bench().mac_cost(sass, None, per_thread=2, unit_lanes=4)["passes"]
    assert (p["loop_instructions"], p["unit_instructions"]) == (2, 3)  # LDG, F2I and the unit loop's BRA
    assert p["per_mac"] == 2 / 2 + 3 / (2 * 4)


def _nvidia_tools() -> str | None:
    """Why the compile test cannot run here, or None."""
    try:
        import triton
    except ImportError:
        return "triton is not installed"
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    return None if tool.exists() else f"Triton's nvidia tools are absent ({tool})"


def test_ptxas_h100_e4m3fn():
    """(About 10 s.)  The H100 e4m3fn model's fast path compiled for sm_90 by the installed Triton (a fresh process,
    interpreter off): a line with a positive number of instructions per simulated MAC."""
    why = _nvidia_tools()
    if why:
        pytest.skip(why)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9's default, said aloud (it warns otherwise)
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_gpu.py"), "--ptxas", "--cases",
                          "H100 e4m3fn->fp32", "--tiles", "128x64x8"], capture_output=True, text=True, env=env,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    found = re.findall(r"H100 e4m3fn->fp32 .*= ([0-9.]+) instructions per simulated MAC$", out.stdout, re.M)
    assert len(found) == 1 and float(found[0]) > 0, out.stdout
    assert "exponent pass:" in out.stdout and "sum pass:" in out.stdout
