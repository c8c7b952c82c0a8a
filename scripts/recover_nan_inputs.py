"""The NaN inputs of a hardware record's rows, recovered by replaying the record's seeded input generator.

``data/hardware/h100-mma-wgmma.json`` keeps a NaN input as ``"nan"`` (C also as ``c_bits``), but NaN payloads
decide what a DMMA writes and whether a tf32 unit reads a NaN at all.  The inputs were drawn by
``scripts/record_hardware.py`` from ``numpy.random.default_rng(20261122)``, path after path, so replaying the
same draws in the same order gives every row's bit patterns again.  The replay uses the script as it was
committed with the record (``04d1340``; the record's metadata names the commit the run started from, before
the script was committed) and is checked row by row: every recorded row with a NaN input must be found
among the generated rows by C's code and all its finite values, exactly once.

It writes ``data/hardware/h100-mma-wgmma-nan-inputs.json``: the codes of A and B of those rows (the test of
the presets, ``tests/test_hardware_records.py``, replays them bit for bit), and a check at full scale: on
every generated row of the fp64 and tf32 paths, how many results the current preset changes against the
preset the record was made with, per input family, beside the number of rows the record counts as that
preset's mismatches.  (The record keeps every mismatch's count but only a few of the rows.)

    python scripts/recover_nan_inputs.py            # needs the git history (git show 04d1340:...)
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
RECORD = REPO / "data" / "hardware" / "h100-mma-wgmma.json"
OUT = REPO / "data" / "hardware" / "h100-mma-wgmma-nan-inputs.json"
SCRIPT_COMMIT = "04d1340"
SEED = 20261122


def _old_script():
    """scripts/record_hardware.py as committed with the record, imported as a module."""
    src = subprocess.run(["git", "show", f"{SCRIPT_COMMIT}:scripts/record_hardware.py"], cwd=REPO, check=True,
                         capture_output=True, text=True).stdout
    tmp = Path(tempfile.mkdtemp()) / "record_hardware_04d1340.py"
    tmp.write_text(src)
    spec = importlib.util.spec_from_file_location("record_hardware_04d1340", tmp)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def replay(rh, record: dict) -> dict:
    """Per path: (A, B, C) codes of every generated row in record order, and each row's family.

    The draws, in the order the run made them: per path the layout check (small integers), the
    cross-check with the peer harness (own kernels only, where the record has one), the input families,
    then the random sample of rows for the variants."""
    rng = np.random.default_rng(SEED)
    out = {}
    for name, e in record["paths"].items():
        m, n, k = e["shape"]
        f = e["formats"]
        p = rh.Instr(name, e["kind"], m, n, k, f["a"], f["b"], f["c"], f["d"])
        lim = 2 if rh.F.get(p.fa).precision <= 4 else 3
        rng.integers(-lim, lim + 1, size=(8, m, k))
        rng.integers(-lim, lim + 1, size=(8, k, n))
        rng.integers(-8, 9, size=(8, m, n))
        if "cross_check_mmasim_kernels" in e:
            for fmt, shape in ((p.fa, (48, m, k)), (p.fb, (48, k, n)), (p.fc, (48, m, n))):
                rh.random_bits(fmt, rng, shape)
        fams = list(e["families"])
        assert fams == rh.families(p), name
        tiles = e["families"][fams[0]] // p.per_tile
        A, B, C = [], [], []
        for fam in fams:
            a, b, c = rh.family_inputs(fam, p, rng, tiles)
            A.append(a), B.append(b), C.append(c)
        rng.random(e["dot_products"])
        A, B, C = np.concatenate(A), np.concatenate(B), np.concatenate(C)
        T = A.shape[0]
        rows_a = np.broadcast_to(A[:, :, None, :], (T, m, n, k)).reshape(-1, k)
        rows_b = np.broadcast_to(np.swapaxes(B, 1, 2)[:, None, :, :], (T, m, n, k)).reshape(-1, k)
        family = np.concatenate([np.full(e["families"][fam], fam, dtype=object) for fam in fams])
        out[name] = (rows_a, rows_b, C.reshape(-1), family)
    return out


def _hexes(rh, fmt: str, codes: np.ndarray) -> list[str]:
    return [rh.hexval(v) for v in rh.decode(fmt, codes)]


def recovered_rows(rh, record: dict, rows: dict) -> dict:
    """Per path, the recorded rows with a NaN input, with the codes of A and B found by the replay."""
    out = {}
    for name, e in record["paths"].items():
        f = e["formats"]
        ra, rb, rc, _ = rows[name]
        seen, found = set(), []
        examples = [ex for mdl in e.get("models", []) for ex in mdl.get("examples", [])]
        for ex in examples:
            key = (tuple(ex["a"]), tuple(ex["b"]), ex["c"])
            if "nan" not in ex["a"] + ex["b"] or key in seen:
                continue
            seen.add(key)
            cand = np.flatnonzero(rc.astype(np.uint64) == np.uint64(int(ex["c_bits"], 16)))
            hits = [i for i in cand if _hexes(rh, f["a"], ra[i]) == ex["a"] and _hexes(rh, f["b"], rb[i]) == ex["b"]]
            codes = {(tuple(int(x) for x in ra[i]), tuple(int(x) for x in rb[i])) for i in hits}
            assert len(codes) == 1, (name, ex, len(hits))  # identical rows (repeated tiles) carry one code set
            a_codes, b_codes = codes.pop()
            width = rh.storage(f["a"]).bits // 4, rh.storage(f["b"]).bits // 4
            found.append({"a": ex["a"], "b": ex["b"], "c": ex["c"],
                          "a_codes": [f"0x{x:0{width[0]}x}" for x in a_codes],
                          "b_codes": [f"0x{x:0{width[1]}x}" for x in b_codes]})
        if found:
            out[name] = found
    return out


def full_scale_check(rh, record: dict, rows: dict) -> dict:
    """For the fp64 and tf32 paths: on every generated row, the rows whose result the current preset writes
    differently from the preset of the record (stored with each path's first model), per family, beside
    the record's count of that preset's mismatches with the GPU."""
    import blockfma as bf
    from blockfma.model import Model

    out = {}
    for name, e in record["paths"].items():
        f = e["formats"]
        if f["a"] not in ("fp64", "tf32"):
            continue
        first = e["models"][0]
        then = Model.from_dict(first["model"])
        now = bf.device("H100").model(f["a"], f["d"], "wgmma" if name.startswith("wgmma") else "mma")
        ra, rb, rc, family = rows[name]
        if f["a"] == "fp64":
            a, b, c = (x.view(np.float64) for x in (ra, rb, rc))
            before = bf.dot(a, b, c, model=then).view(np.uint64)
            after = bf.dot(a, b, c, model=now).view(np.uint64)
        else:  # binary32 registers: then read as numbers (NaN stays NaN), now as the unit reads the codes
            a, b, c = (x.view(np.float32) for x in (ra, rb, rc))
            with np.errstate(invalid="ignore"):  # the cast quiets signalling NaNs: a binary32 NaN stays NaN
                a64, b64 = a.astype(np.float64), b.astype(np.float64)
            before = bf.dot(a64, b64, c, model=then, round_inputs="device").view(np.uint32)
            after = bf.dot(a, b, c, model=now, round_inputs="device").view(np.uint32)
        changed = before != after
        counts = {str(fam): int(np.sum(changed & (family == fam))) for fam in e["families"]}
        recorded = {fam: sum(v.values()) for fam, v in first.get("mismatch_by_family", {}).items()}
        out[name] = {"changed_by_family": {k: v for k, v in counts.items() if v},
                     "recorded_mismatches_by_family": recorded,
                     "equal": {k: v for k, v in counts.items() if v} == recorded}
    return out


def main() -> int:
    from blockfma.files import destination, write_text

    destination(OUT, name="OUT")  # its fixed place in the repository, checked before the replay
    record = json.loads(RECORD.read_text())
    rh = _old_script()
    rows = replay(rh, record)
    doc = {
        "record": RECORD.name,
        "what": "bit patterns of the NaN inputs of the recorded rows of h100-mma-wgmma.json, which keeps them as "
                "'nan' (C's code is kept as c_bits)",
        "how": f"scripts/recover_nan_inputs.py: replays scripts/record_hardware.py as of commit {SCRIPT_COMMIT} "
               f"with the run's seed {SEED}, path after path; each row below was found among the generated rows "
               "by C's code and every finite value of A and B, with one set of codes. Targeted rows are not "
               "listed: their NaNs are formats.encode(float('nan')), the storage format's default quiet NaN.",
        "paths": recovered_rows(rh, record, rows),
        "full_scale_check": {
            "what": "on every generated row of the fp64 and tf32 paths: the rows whose result the current H100 "
                    "preset writes differently from the preset the record was made with, per family, and the "
                    "record's count of that preset's mismatches with the GPU (equal: the current preset "
                    "changes as many rows as the GPU showed wrong, in the same families)",
            "paths": full_scale_check(rh, record, rows),
        },
    }
    write_text(OUT, json.dumps(doc, indent=1) + "\n")
    checks = doc["full_scale_check"]["paths"]
    print(f"{sum(len(v) for v in doc['paths'].values())} rows in {len(doc['paths'])} paths; full-scale check "
          f"equal on {sum(c['equal'] for c in checks.values())} of {len(checks)} paths -> {OUT.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
