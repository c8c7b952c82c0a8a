"""The probe suite on this GPU: infer every mma.sync path's Model (and, on an H100, every wgmma path's)
through ``blockfma.probe`` and hold it to the preset, then the same for ``torch`` (cuBLAS).  One JSON file
per target kind, written atomically after every path, so an interrupted run keeps what it finished.

    python scripts/probe_hardware.py --out data/hardware --verify 1000000 --budget 480

For each path: the findings (feature-table row, stage log, readings of every feature test, verification
with the first counterexample), the inferred Model, and the count of rows (of a fresh random sample with k
three times the instruction's) where the inferred Model and the device's preset give different bits.
"""

from __future__ import annotations

import argparse
import re
import sys
import time

import blockfma as bf
from blockfma.probes import targets
from blockfma.probes.infer import disagreements
from blockfma.arguments import ArgumentError
from blockfma.files import destination, folder, write_json

PRESET_DEVICE = {"90": "H100", "100": "B200", "89": "Ada", "80": "A100", "120": "RTX5090"}


def preset_for(dev: str | None, path_name: str, fa: str, fb: str, fd: str, k: int) -> bf.Model | None:
    if dev is None:
        return None
    d = bf.device(dev)
    inp = fa if fa == fb else (fa, fb)
    first = ["wgmma"] if path_name.startswith("wgmma") else [i.name for i in d.instructions
                                                              if i.name.endswith(f"k{k}.fp8")]
    for ins in first + ["mma", None]:
        try:
            return d.model(inp, fd, ins) if ins else d.model(inp, fd)
        except ValueError:
            continue
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True,
                    help="folder for probe-cuda.json and probe-torch.json (created, with its parents, if missing)")
    ap.add_argument("--verify", type=int, default=1_000_000, help="verification rows per path")
    ap.add_argument("--budget", type=float, default=480.0, help="seconds for the whole run")
    ap.add_argument("--only", help="regular expression: probe only the cuda paths whose names match it")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--simulate", action="store_true", help="the H100 presets in place of the GPU (pipeline test)")
    args = ap.parse_args()
    try:  # the folder and both files, checked before the first probe
        out = folder(args.out, create=True, name="out")
        for file in ("probe-cuda.json",) + (() if args.no_torch or args.simulate else ("probe-torch.json",)):
            destination(out / file, name="out")
    except ArgumentError as exc:
        ap.error(exc.message({"out": "--out"}))
    t0 = time.time()
    meta = {"simulated": "H100 presets"} if args.simulate else targets.gpu_metadata()
    dev = "H100" if args.simulate else PRESET_DEVICE.get(str(meta.get("compute_capability")))
    say = lambda s: print(f"[{time.time() - t0:6.1f}s] {s}", file=sys.stderr, flush=True)  # noqa: E731
    from blockfma.probes import cuda

    cc = 90 if args.simulate else cuda.compute_capability()
    every = list(cuda.PATHS.values()) + list(cuda.WGMMA_PATHS.values())
    paths = [p for p in every if p.runs_on(cc) and (not args.only or re.search(args.only, p.name))]
    doc = {"what": "blockfma.probe on this GPU's mma.sync and wgmma paths (own kernels), each inferred model "
                   "held to the preset", "metadata": meta, "preset_device": dev, "verify_rows": args.verify,
           "paths": []}
    for i, p in enumerate(paths):
        if time.time() - t0 > args.budget * 0.8:
            say(f"budget: stopping before {p.name}")
            break
        say(f"{p.name} ({i + 1}/{len(paths)})")
        preset = preset_for(dev, p.name, p.a_format, p.b_format, p.d_format, p.k)
        spec = targets.SimTarget(preset, p.k, name=f"sim:{p.name}") if args.simulate else f"cuda:{p.name}"
        f = bf.probe(spec, verify=args.verify, progress=lambda s: say(s))
        entry = f.to_json()
        entry["preset"] = preset.to_dict() if preset else None
        if f.verified and preset is not None:
            entry["rows_differing_from_preset_k3"] = disagreements(f.model(), preset, 3 * p.k, 100_000, seed=7)
            say(f"  verified; differs from the {dev} preset on {entry['rows_differing_from_preset_k3']} of "
                f"100000 rows (k = {3 * p.k})")
        doc["paths"].append(entry)
        write_json(out / "probe-cuda.json", doc)
    if not args.no_torch and not args.simulate:
        tdoc = {"what": "blockfma.probe on torch.baddbmm (cuBLAS), per-dot-product models", "metadata": meta,
                "runs": []}
        for fmt, flags in (("fp16", {}), ("fp16", {"reduced_precision_reduction": True}), ("bf16", {}),
                           ("fp32", {}), ("fp32", {"allow_tf32": True})):
            if time.time() - t0 > args.budget * 0.95:
                break
            say(f"torch {fmt} {flags}")
            try:
                f = bf.probe("torch:cuda", fmt, fmt, k=64, verify=min(args.verify, 100_000),
                             progress=lambda s: say(s), **flags)
                tdoc["runs"].append({"format": fmt, "flags": flags, **f.to_json()})
            except Exception as exc:  # noqa: BLE001 - a finding too: keep going
                tdoc["runs"].append({"format": fmt, "flags": flags, "error": f"{type(exc).__name__}: {exc}"})
            write_json(out / "probe-torch.json", tdoc)
    say("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
