"""blockfma.evidence: the basis order, labels, and the strict refusal; emulate(strict=...) argument checks."""

import pytest

from blockfma.evidence import Basis, Evidence, Unbacked, require_backed, weakest

REC = Evidence("H100 wgmma e4m3fn->fp32 model", Basis.RECORDED, "h100-mma-wgmma.json", 983040)
KM = Evidence("H100 fp16->fp32 model", Basis.PUBLISHED, "Khattak & Mikaitis, H100/fp16", 5000)
SIM = Evidence("B200 mxf4 model", Basis.PEER, "MMA-Sim 2.1.1")
ASSUMED = Evidence("fp8 promotion every 128 products", Basis.ASSUMED, "DeepSeek-V3's interval, not probed")


def test_weakest_takes_the_weakest_basis():
    assert weakest([REC, KM]) is Basis.PUBLISHED
    assert weakest([KM, SIM, REC]) is Basis.PEER
    assert weakest([REC, ASSUMED, SIM]) is Basis.ASSUMED
    assert weakest([]) is Basis.ASSUMED  # nothing recorded: assumed


def test_label_names_source_and_count():
    assert REC.label == "recorded: h100-mma-wgmma.json, 983,040 rows"
    assert SIM.label == "peer: MMA-Sim 2.1.1"


def test_require_backed_passes_hardware_and_refuses_the_rest():
    require_backed([REC, KM], "a GEMM")
    with pytest.raises(Unbacked, match="fp8 promotion every 128 products is assumed: DeepSeek-V3"):
        require_backed([REC, ASSUMED], "a GEMM")
    with pytest.raises(Unbacked, match="B200 mxf4 model is peer: MMA-Sim"):
        require_backed([SIM], "a GEMM")
    with pytest.raises(Unbacked, match="no evidence is recorded"):
        require_backed([], "a GEMM")


def test_emulate_strict_must_be_a_bool():
    pytest.importorskip("torch")
    import blockfma as bf

    with pytest.raises(ValueError, match="strict"):
        bf.torch.emulate("H100", strict="yes")


def test_report_and_explain_switches_are_checked():
    """A string where True/False is meant is refused by name: "no" would have turned the switch on."""
    torch = pytest.importorskip("torch")
    import blockfma as bf

    emu = bf.torch.emulate("H100")
    with pytest.raises(ValueError, match=r"^evidence='no': must be True or False"):
        emu.report(evidence="no")
    with pytest.raises(ValueError, match=r"^fast_accum='yes': must be True or False"):
        emu.explain((16, 16, 64), torch.float8_e4m3fn, fast_accum="yes")
    assert "use_fast_accum" in emu.explain((16, 16, 64), torch.float8_e4m3fn, fast_accum=True)
