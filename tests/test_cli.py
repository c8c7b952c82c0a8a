"""The command line (src/blockfma/cli.py), run in-process through ``main``.

Expected values are derived by hand from the models (DEVICE-FACTS) and the papers, not copied from the
program's output:

* Fasi et al.'s non-monotonicity example, a = (1, 1, 1, 1), b = (2^-24, ...): with c = 1 - 2^-24 the
  largest exponent is -1 and V100 (F = 23) cuts at 2^-24, keeping each product: 1 - 2^-24 + 4*2^-24 =
  1 + 3*2^-24, truncated to fp32 (quantum 2^-23 above 1) = 1 + 2^-23 = 1.00000011920928955078125, bits
  0x3f800001.  With c = 1 the cut is at 2^-23, every product is dropped: 1.0, 0x3f800000.  A correctly
  rounded sum rounds 1 + 3*2^-24 (a tie between 1 + 2*2^-24 and 1 + 4*2^-24) to even: 1 + 2^-22, 0x3f800002.
* FTTN's porting GEMM: FTTN publishes 191.875 for H100 and 255.875 for MI100 (sec. V).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys

import pytest

import blockfma
from blockfma.cli import main

FASI = ["--input", "fp16", "--output", "fp32", "--a", "1,1,1,1", "--b", "2^-24,2^-24,2^-24,2^-24"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--version")
    assert code == 0
    assert out.strip() == f"blockfma {blockfma.__version__}"


def test_python_dash_m() -> None:
    done = subprocess.run([sys.executable, "-m", "blockfma", "--version"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0
    assert done.stdout.startswith("blockfma ")


def test_devices_lists_presets(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "devices")
    assert code == 0
    for name in ("V100", "A100", "H100", "B200", "MI100", "MI250X", "MI300X", "Intel AMX", "Arm BFDOT", "exact"):
        assert f"\n{name}  " in "\n" + out, name
    assert "H200" in out                                   # an alias of H100
    assert "L=4 F=23 e_zero=-131" in out                   # V100's fp16->fp32 model
    assert "PeerJ Comput. Sci." in out                     # Fasi et al.'s citation in the legend


def test_devices_one(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "devices", "H200")
    assert code == 0
    assert out.startswith("H100  NVIDIA Hopper")
    assert "wgmma" in out and "Khattak" in out and "k=32" in out


def test_devices_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "devices", "--json")
    assert code == 0
    data = json.loads(out)
    names = [d["name"] for d in data]
    assert {"V100", "H100", "MI250X"} <= set(names)
    v100 = data[names.index("V100")]
    assert v100["instructions"][0]["models"]["fp16->fp32"]["L"] == 4
    code, out, _ = run(capsys, "devices", "MI250X", "--json")
    assert json.loads(out)["variants"] == ["MI250X-fttn"]


def test_dot_fasi_non_monotonic(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "dot", "V100", *FASI, "--c", "1-2^-24")
    assert code == 0, err
    assert "1.00000011920928955078125" in out
    assert "0x3f800001" in out
    assert "+0b1.00000000000000000000001 * 2^0" in out
    assert "0x1.000002p+0" in out
    assert "L=4 F=23" in out                                # the model summary line

    code, out, err = run(capsys, "dot", "V100", *FASI, "--c", "1")
    assert code == 0, err
    assert "1.0\n" in out
    assert "0x3f800000" in out


def test_dot_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "dot", "V100", *FASI, "--c", "1-2^-24", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["result"]["bits"] == "0x3f800001"
    assert data["result"]["value"] == 1 + 2**-23
    assert data["device"] == "V100" and data["k"] == 4


def test_dot_negative_values_and_zero_sign(capsys: pytest.CaptureFixture[str]) -> None:
    # 1*1 - 2^-24 = 1 - 2^-24 exactly, an fp32 value: 0x3f7fffff
    code, out, err = run(capsys, "dot", "exact", "--a", "1", "--b", "1", "--c", "-2^-24")
    assert code == 0, err
    assert "0x3f7fffff" in out
    # (-0)*1 + (-0) is -0 in IEEE arithmetic; NVIDIA writes an exact zero as +0
    code, out, _ = run(capsys, "dot", "exact", "--a", "-0", "--b", "1", "--c", "-0")
    assert "0x80000000" in out
    code, out, _ = run(capsys, "dot", "H100", "--a", "-0", "--b", "1", "--c", "-0")
    assert "0x00000000" in out


def test_dot_nan_bits_are_the_devices(capsys: pytest.CaptureFixture[str]) -> None:
    # inf * 0 is invalid: NVIDIA writes the canonical NaN 0x7fffffff, AMD CDNA1 the default NaN 0x7fc00000
    code, out, _ = run(capsys, "dot", "H100", "--a", "inf", "--b", "0")
    assert code == 0 and "0x7fffffff" in out
    code, out, _ = run(capsys, "dot", "MI100", "--a", "inf", "--b", "0")
    assert code == 0 and "0x7fc00000" in out


def test_dot_repeated_options(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "dot", "V100", "--a", "1,1", "--a", "1", "--a", "1",
                       "--b", "2^-24,2^-24,2^-24", "--b", "2^-24", "--c", "1-2^-24")
    assert code == 0 and "0x3f800001" in out


def test_dot_not_representable(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "dot", "V100", "--a", "0.1,1", "--b", "1,1")
    assert code == 2
    assert out == ""
    assert "0.1" in err and "fp16" in err and "--round-inputs" in err
    assert "0.0999755859375" in err                      # 1638 * 2^-14, the neighbour below
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_dot_round_inputs(capsys: pytest.CaptureFixture[str]) -> None:
    # 0.1 rounds to 1638 * 2^-14 in binary16 = 1.599609375 * 2^-4: fp32 exponent field 123 (0x7b),
    # fraction 614 * 2^13 = 0x4cc000, so bits 0x3dccc000
    code, out, err = run(capsys, "dot", "exact", "--a", "0.1", "--b", "1", "--round-inputs", "rne")
    assert code == 0, err
    assert "0x3dccc000" in out
    assert "0.0999755859375" in out


def test_dot_bad_names(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "dot", "V10", "--a", "1", "--b", "1")
    assert code == 2
    assert "unknown device 'V10'" in err and "V100" in err and "Traceback" not in err
    code, _, err = run(capsys, "dot", "V100", "--input", "fp17", "--a", "1", "--b", "1")
    assert code == 2 and "fp16" in err
    code, _, err = run(capsys, "dot", "V100", "--input", "bf16", "--a", "1", "--b", "1")
    assert code == 2 and "fp16->fp32" in err               # V100 has no bf16: say what it has
    code, _, err = run(capsys, "dot", "V100", "--a", "1,1", "--b", "1")
    assert code == 2 and "same length" in err
    code, _, err = run(capsys, "dot", "V100", "--a", "2^", "--b", "1")
    assert code == 2 and "accepted forms" in err
    code, _, _ = run(capsys, "dot")                       # argparse usage error
    assert code == 2


def test_hostile_literals_and_streams(capsys: pytest.CaptureFixture[str], monkeypatch) -> None:
    """A nested power that would take hours is refused at once; an unwritable stdout and Ctrl-C end with a
    line on stderr, not a traceback."""
    code, _, err = run(capsys, "dot", "H100", "--a", "(10^10000)^10000", "--b", "1")
    assert code == 2 and "bits" in err and "Traceback" not in err

    class Full(io.StringIO):
        def write(self, text: str) -> int:
            raise OSError(28, "No space left on device")

        def fileno(self) -> int:
            return sys.__stdout__.fileno()

    import os

    saved = os.dup(sys.__stdout__.fileno())  # main() points a broken stdout at /dev/null: restore it after
    try:
        with monkeypatch.context() as m:
            m.setattr(sys, "stdout", Full())
            code = main(["dot", "H100", "--a", "1", "--b", "1"])
    finally:
        os.dup2(saved, sys.__stdout__.fileno())
        os.close(saved)
    assert code == 1 and "cannot write the output (No space left on device)" in capsys.readouterr().err

    def interrupted(args):
        raise KeyboardInterrupt

    from blockfma import cli

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    parser._subparsers._group_actions[0].choices["devices"].set_defaults(func=interrupted)
    code, _, err = run(capsys, "devices")
    assert code == 130 and "interrupted" in err and "Traceback" not in err


def test_compare(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "compare", "V100", "A100", "H100", "MI100", "Intel AMX", *FASI,
                         "--c", "1-2^-24", "--json")
    assert code == 0, err
    rows = {r["device"]: r for r in json.loads(out)}
    assert list(rows) == ["V100", "A100", "H100", "MI100", "Intel AMX", "exact"]
    for name in ("V100", "A100", "H100"):                  # truncated sums: 1 + 2^-23
        assert rows[name]["result"]["bits"] == "0x3f800001"
    for name in ("MI100", "exact"):                        # one rounding to nearest even: 1 + 2^-22
        assert rows[name]["result"]["bits"] == "0x3f800002"
    assert rows["Intel AMX"]["result"] is None and "no fp16->fp32" in rows["Intel AMX"]["note"]

    code, out, _ = run(capsys, "compare", "V100", "H100", *FASI, "--c", "1-2^-24")
    assert code == 0
    lines = out.splitlines()
    assert any(ln.startswith("V100 ") and "0x3f800001" in ln for ln in lines)
    assert any(ln.startswith("exact ") and "0x3f800002" in ln for ln in lines)


def test_compare_all(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "compare", "all", *FASI, "--c", "1", "--json")
    assert code == 0
    names = [r["device"] for r in json.loads(out)]
    assert {"V100", "T4", "MI250X", "MI300X", "exact", "ieee-sequential"} <= set(names)
    assert "Intel AMX" not in names                        # bf16 only
    assert names.count("exact") == 1


REPORT = ["report", "--devices", "V100,H100,MI100", "--fttn-inputs", "fp16"]


def _stdout_of(argv: list[str], err: io.StringIO | None = None) -> str:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err or io.StringIO()):
        code = main(argv)
    assert code == 0, argv
    return buf.getvalue()


@pytest.fixture(scope="session")
def report_out() -> dict[str, str]:
    """`blockfma report` on three presets, text and --json, computed once (about a minute: the probe
    section infers four targets): the first call runs the report's sections, the second renders the same
    sections as JSON; both go through the command line's parsing and printing."""
    from blockfma import report

    sections, cache = report.sections, []

    def once(*args, **kwargs):
        if not cache:
            cache.append((args, sections(*args, **kwargs)))
        assert args == cache[0][0], "the text and --json runs ask for the same report"
        return cache[0][1]

    progress = io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(report, "sections", once)
        out = {"text": _stdout_of(REPORT + ["--progress"], progress), "json": _stdout_of(REPORT + ["--json"])}
    assert len(cache) == 1
    out["progress"] = progress.getvalue()
    return out


def test_report(report_out: dict[str, str]) -> None:
    report_text = report_out["text"]
    assert "Feature table" in report_text
    assert "truncated-fused" in report_text and "exact-fused" in report_text
    assert "191.984375" in report_text                     # the exact answer
    lines = report_text.splitlines()
    fttn = {ln.split()[0]: ln.split() for ln in lines if ln.split()[:1] in (["V100"], ["H100"], ["MI100"])
            and ("yes" in ln.split() or "no" in ln.split())}
    assert fttn["H100"][1] == "191.875" and fttn["H100"][-1] == "yes"
    assert fttn["MI100"][1] == "255.875" and fttn["MI100"][-1] == "yes"
    assert fttn["V100"][1] == "0.0"
    assert "Probes: presets inferred as black boxes" in report_text


def test_report_says_what_it_is_doing(report_out: dict[str, str]) -> None:
    """--progress: a line per section and per probe target as it ends (the probes run in worker processes
    beside the rest; a person at a terminal sees the first line at once), on stderr, so stdout holds the
    report alone."""
    stamped = report_out["progress"].splitlines()
    assert all(re.match(r"\[ *\d+ s\] ", ln) for ln in stamped)  # each line after the seconds since the start
    lines = [ln.split("] ", 1)[1] for ln in stamped]
    assert lines[0] == "report: probing 4 targets, 2 at a time in worker processes ..."
    assert "report: replaying the recorded hardware outputs through the presets ..." in lines
    assert "report: feature table and FTTN porting GEMM (K = 8192) on V100, H100, MI100 ..." in lines
    targets = {"sim:V100 fp16->fp32": "truncated-fused fp16->fp32", "sim:H100 fp16->fp16": "truncated-fused fp16->fp16",
               "sim:H100 e4m3fn->fp32": "truncated-fused e4m3fn->fp32", "sim:MI100 fp16->fp32": "exact-fused fp16->fp32"}
    probed = [ln for ln in lines if ln.startswith("probed ")]
    assert [ln.split(" (")[1].split(":")[0] for ln in probed] == [f"{n} of 4)" for n in range(1, 5)]
    assert {" ".join(ln.split()[1:3]): ln.split("): ")[1].rsplit(" (", 1)[0].split(" L=")[0] for ln in probed} == targets
    assert all(ln.endswith(" s)") for ln in probed)
    assert lines[-1].startswith("report: done in ") and lines[-1].endswith(" s")
    assert "probed" not in report_out["text"]


def test_report_progress_goes_to_the_function_given(capsys: pytest.CaptureFixture[str]) -> None:
    from blockfma import report

    lines: list[str] = []
    secs = report.sections(["V100"], ("fp16",), probes=False, progress=lambda ln: lines.append(ln.split("] ", 1)[1]))
    assert [s.key for s in secs] == ["verdict", "features", "fttn", "questions", "confidence"]
    assert lines[:3] == ["report: replaying the recorded hardware outputs through the presets ...",
                         "replaying the golden data through the presets ...",  # each part of it (V100: no records)
                         "report: feature table and FTTN porting GEMM (K = 8192) on V100 ..."]
    assert len(lines) == 4 and lines[3].startswith("report: done in ")
    capsys.readouterr()
    report.sections(["V100"], ("fp16",), probes=False, progress=False)
    report.sections(["V100"], ("fp16",), probes=False)  # None: stderr is no terminal here
    assert capsys.readouterr() == ("", "")
    report.sections(["V100"], ("fp16",), probes=False, progress=True)
    assert re.match(r"\[ *\d+ s\] report: replaying the recorded hardware outputs through the presets \.\.\.\n"
                    r"\[ *\d+ s\] replaying the golden data through the presets \.\.\.\n"
                    r"\[ *\d+ s\] report: feature table and FTTN porting GEMM \(K = 8192\) on V100 \.\.\.\n",
                    capsys.readouterr().err)
    with pytest.raises(ValueError, match=r"^progress='yes': must be True, False, None"):
        report.sections(["V100"], ("fp16",), probes=False, progress="yes")
    with pytest.raises(ValueError, match=r"^fttn_inputs=\('fp64',\): FTTN's GEMM runs on fp16 and bf16 inputs only; "
                                         r"pass fttn_inputs='fp16,bf16'$"):
        report.sections(["V100"], ("fp64",), probes=False)


def test_report_json(report_out: dict[str, str]) -> None:
    data = json.loads(report_out["json"])
    assert data["blockfma"] == blockfma.__version__
    fttn = {r["device"]: r for r in data["sections"]["fttn"]["rows"]}
    assert list(fttn) == ["V100", "H100", "MI100"]
    assert fttn["H100"] == {"device": "H100", "D_fp16": 191.875, "D_bf16": None, "FTTN": 191.875, "match": True}
    assert fttn["MI100"] == {"device": "MI100", "D_fp16": 255.875, "D_bf16": None, "FTTN": 255.875, "match": True}
    assert fttn["V100"]["D_fp16"] == 0.0 and fttn["V100"]["FTTN"] == 0.0
    features = data["sections"]["features"]["rows"]
    first = {}
    for r in features:
        first.setdefault((r["device"], r["pair"]), r)
    assert {"L": 16, "F": 25}.items() <= first["H100", "fp16->fp32"].items()  # Khattak & Mikaitis
    assert {"L": 4, "F": 23}.items() <= first["V100", "fp16->fp32"].items()   # Fasi et al.
    assert {r["device"] for r in features} == {"V100", "H100", "MI100"}
    probed = data["sections"]["probes"]["rows"]
    assert [r["target"] for r in probed] == ["sim:V100", "sim:H100", "sim:H100", "sim:MI100"]
    assert all(r["verified"] and r["same as preset"] for r in probed)


# --- the common commands: exit statuses and --json [FILE|-] -------------------------------------------------
V100_FASI = ["dot", "V100", *FASI, "--c", "1-2^-24"]
COMMON = [  # (argv, exit status, what the JSON holds or the one-line error says)
    (["devices"], 0, lambda d: len(d) >= 17 and d[0]["name"] == "V100"),
    (["devices", "H200"], 0, lambda d: d["name"] == "H100"),
    (V100_FASI, 0, lambda d: d["result"]["bits"] == "0x3f800001" and d["k"] == 4),
    (["dot", "V100", "--a", "nan", "--b", "inf"], 0, lambda d: d["result"]["value"] == "nan"),
    (["compare", "V100", "H100", *FASI, "--c", "1-2^-24"], 0,
     lambda d: [(r["device"], r["result"]["bits"]) for r in d] == [("V100", "0x3f800001"), ("H100", "0x3f800001"),
                                                                   ("exact", "0x3f800002")]),
    (["compare", "Intel AMX", "--a", "1", "--b", "1"], 0,
     lambda d: d[0]["result"] is None and d[0]["note"].startswith("no fp16->fp32 model")),
    (["report", "--devices", "V100", "--fttn-inputs", "fp16", "--no-probes"], 0,
     lambda d: [r["D_fp16"] for r in d["sections"]["fttn"]["rows"]] == [0.0] and "probes" not in d["sections"]),
    (["devices", "V1000"], 2, "unknown device 'V1000'; did you mean V100"),
    (["dot", "V100"], 2, "give both --a and --b"),
    (["dot", "nonesuch", "--a", "1", "--b", "1"], 2, "unknown device 'nonesuch'"),
    (["dot", "V100", "--a", "1", "--b", "1", "--instruction", "wmma"], 2, "V100 has no instruction 'wmma'; it has mma"),
    (["dot", "V100", "--a", "1", "--b", "1", "--c", "x"], 2, "--c[0]: cannot read 'x' as an exact number"),
    (["dot", "V100", "--a", "(" * 500 + "1" + ")" * 500, "--b", "1"], 2, "--a[0]: cannot read '" + "(" * 40 +
     "'... (1001 characters) as an exact number: more than 100 nested parentheses"),
    (["dot", "V100", "--a", "1", "--b", "2^-1+" * 600 + "1"], 2,
     "--b[0]: cannot read a number of 3001 characters (at most 2000); write it shorter"),
    (["dot", "V100", "--a", "1", "--b", "1", "--output", "fp64"], 2, "V100 has no model for fp16 inputs with fp64"),
    (["dot", "V100", "--a", "", "--b", "1"], 2, "--a '': empty value; separate values with single commas"),
    (["dot", "V100", "--a", "1e400", "--b", "1"], 2, "--a[0] = 1e400 is not representable in fp16"),
    (["compare", "nonesuch", "--a", "1", "--b", "1"], 2, "unknown device 'nonesuch'"),
    (["compare", "all", "--a", "1", "--b", "1", "--input", "fp17"], 2, "unknown format 'fp17'"),
    (["report", "--fttn-inputs", "fp64"], 2,
     "--fttn-inputs fp64: FTTN's GEMM runs on fp16 and bf16 inputs only; pass --fttn-inputs fp16,bf16"),
    (["report", "--devices", ""], 2, "--devices '': empty value"),
    (["report", "--devices", "V100,nonesuch", "--no-probes"], 2, "unknown device 'nonesuch'"),
]


def _unstamped(data):
    """The JSON without the report's provenance (its date moves between two runs)."""
    return {k: v for k, v in data.items() if k != "provenance"} if isinstance(data, dict) else data


@pytest.mark.parametrize("argv, status, expect", COMMON, ids=[" ".join(c[0])[:40] for c in COMMON])
def test_common_commands_exit_status_and_json(tmp_path, capsys: pytest.CaptureFixture[str], argv, status,
                                              expect) -> None:
    """The same exit status with the text, with --json - (stdout: the JSON and nothing else) and with
    --json FILE (the text on stdout, the same JSON in the file); an error is one line on stderr naming
    the command, and nothing on stdout."""
    code, text, err = run(capsys, *argv)
    assert code == status
    code, out, err_json = run(capsys, *argv, "--json", "-")
    assert code == status
    path = tmp_path / "out.json"
    code, text_too, err_file = run(capsys, *argv, "--json", str(path))
    assert code == status
    if status == 0:
        assert err == err_json == err_file == ""
        data = json.loads(out)  # the whole of stdout
        assert expect(data)
        assert text.strip() and not text.lstrip().startswith(("{", "["))
        assert text_too == text and _unstamped(json.loads(path.read_text())) == _unstamped(data)
    else:
        for e in (err, err_json, err_file):
            assert e.startswith(f"blockfma {argv[0]}: error: ") and e.count("\n") == 1 and expect in e, e
        assert text == out == text_too == "" and not path.exists()


def test_usage_errors_exit_2_with_argparse_s_message(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "report", "--progress", "--quiet")
    assert code == 2 and out == ""
    assert err.splitlines()[-1] == "blockfma report: error: argument --quiet/-q: not allowed with argument --progress"
    code, out, err = run(capsys, "devices", "V100", "extra")
    assert code == 2 and out == "" and err.splitlines()[-1] == "blockfma: error: unrecognized arguments: extra"


# --- block-scaled instructions: --scale-a / --scale-b ------------------------------------------------------
def _mxf4(*scales: str) -> list[str]:
    a = ",".join(["1"] + ["0"] * 31 + ["0.5"] + ["0"] * 31)  # one nonzero product in each of the two blocks
    return ["dot", "B200", "--instruction", "tcgen05.mxf4.block32", "--input", "e2m1fn", "--a", a, "--b", a, *scales]


def test_dot_takes_the_scales_of_a_block_scaled_instruction(capsys):
    """1 * 1 * (1 * 2^4) + 0.5 * 0.5 * (2^-3 * 1) = 16 + 2^-5, exact in fp32 (Fractions: the oracle)."""
    from fractions import Fraction

    import numpy as np

    code, out, err = run(capsys, *_mxf4("--scale-a", "1,2^-3", "--scale-b", "2^4", "--scale-b", "1", "--json", "-"))
    doc = json.loads(out)
    want = Fraction(1) * 1 * 1 * 2**4 + Fraction(1, 2) * Fraction(1, 2) * Fraction(1, 8) * 1
    assert code == 0 and err == "" and doc["scale_a"] == [1.0, 0.125] and doc["scale_b"] == [16.0, 1.0]
    assert doc["result"]["bits"] == f"0x{int(np.float32(want).view(np.uint32)):08x}"
    code, out, _ = run(capsys, *_mxf4("--scale-a", "1,2^-3", "--scale-b", "2^4,1"))
    assert code == 0 and "scale_a (2, one per block)  1, 2^-3" in out and "value    16.03125" in out


@pytest.mark.parametrize("scales, message", [
    ([], "--scale-a None: scaled-fused e2m1fn->fp32 .* is block-scaled: it needs 2 scales of e8m0fnu"),
    (["--scale-a", "1", "--scale-b", "1,1"], r"--scale-a <1 float64 array>: must have shape \(2,\): 2 scales along K"),
    (["--scale-a", "1,1", "--scale-b", "1,3"], r"--scale-b <2 float64 array>: scale_b\[1\] = 3.0 is not a value of "
                                                r"e8m0fnu"),
    (["--scale-a", "1,x", "--scale-b", "1,1"], r"--scale-a\[1\]: cannot read 'x' as an exact number"),
    (["--scale-a", "1,1/3", "--scale-b", "1,1"], r"--scale-a\[1\] = 1/3 is not representable in fp64.*write a value "
                                                  r"of the scale format"),
])
def test_dot_scale_errors_name_the_option(capsys, scales, message):
    import re

    code, out, err = run(capsys, *_mxf4(*scales))
    assert code == 2 and out == "" and err.count("\n") == 1 and re.match(f"^blockfma dot: error: {message}", err), err


def test_dot_scales_for_an_instruction_without_scales_are_refused(capsys):
    code, _, err = run(capsys, "dot", "V100", "--a", "1", "--b", "1", "--scale-a", "1", "--scale-b", "1")
    assert code == 2 and err.startswith("blockfma dot: error: --scale-a <given>: truncated-fused fp16->fp32")
    assert "is not block-scaled and takes no scales" in err
