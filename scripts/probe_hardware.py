"""The probe suite on this GPU: infer every mma.sync path's Model (and, on an H100, every wgmma path's)
through ``blockfma.probe`` and hold it to the preset, then the same for ``torch`` (cuBLAS).  One JSON file
per target kind, written atomically after every path, so an interrupted run keeps what it finished.

    python scripts/probe_hardware.py --out data/hardware --verify 1000000 --budget 480

For each path: the findings (feature-table row, stage log, readings of every feature test, verification
with the first counterexample), the inferred Model, and the count of rows (of a fresh random sample with k
three times the instruction's) where the inferred Model and the device's preset give different bits.

Blackwell block-scaled MMA (issue 23), into probe-blockscaled.json:

* on an RTX 5090 (sm_120): every ``mma.sync ... block_scale`` path of :mod:`blockfma.probes.blackwell`
  (``kind::mxf8f6f4`` k = 32, ``kind::mxf4`` and ``kind::mxf4nvf4`` k = 64, ue8m0 and ue4m3 scales): first a
  layout check (tiles whose sums are exact under any model: a mismatch there is a register layout, not the
  arithmetic; for fp6/fp4 in 8-bit containers the other container offset is tried), then
  :func:`blockfma.probes.scaled.probe_scaled` (F, G, rounding, NaN and zero scales, scale extremes) and the
  count of random block-scaled rows where the inferred Model and the preset differ;
* on a B200 (sm_100): nothing is measured: ``tcgen05.mma ... block_scale`` kernels (Tensor Memory,
  descriptors) are not written yet; the file says so;
* ``--simulate RTX5090``: the whole path without a GPU, the RTX 5090 presets emulated at the register level
  (the rows packed into tiles and registers by the PTX layouts and read back), for the block-scaled paths
  and the mma.sync paths of compute capability 12.0.
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


def block_scaled(args: argparse.Namespace, out, cc: int, meta: dict, t0: float, say) -> None:
    """The block-scaled section (see the module docstring): probe-blockscaled.json."""
    from blockfma.probes import blackwell, scaled

    doc = {"what": "blockfma.probes.scaled on the block-scaled mma paths (own kernels), each inferred model "
                   "held to the preset", "metadata": meta, "paths": []}
    if cc == 100:
        doc["missing"] = ("B200 (sm_100): tcgen05.mma.block_scale kernels (Tensor Memory allocation, tcgen05.cp of "
                          "the scales, shared-memory and instruction descriptors) are not written; nothing measured. "
                          "blockfma.probes.blackwell has the sm_120a mma.sync paths only.")
        say(doc["missing"])
    if cc != 120:
        if cc == 100:
            write_json(out / "probe-blockscaled.json", doc)
        return
    for p in blackwell.BLOCK_SCALE_PATHS.values():
        if args.only and not re.search(args.only, p.name):
            continue
        if time.time() - t0 > args.budget * 0.85:
            say(f"budget: stopping before {p.name}")
            break
        say(f"{p.name}: layout check")
        preset = p.preset("RTX 5090")
        device = blackwell.EmulatedBlockScale(preset) if args.simulate else None
        entry = {"path": p.name, "ptx": p.ptx, "preset": preset.to_dict()}
        try:
            tiles = 2 if args.simulate else 16  # the emulation runs the exact reference on all 128 elements a tile
            check = blackwell.layout_check(p, device=device, tiles=tiles)
            if check["differ"] and not p.packed and p.a_format in ("e2m1fn", "e3m2fn", "e2m3fn"):
                first = blackwell.CONTAINER_SHIFT[p.a_format]
                for shift in (0, 2, 4):  # where the code sits in its byte: try the others
                    blackwell.CONTAINER_SHIFT[p.a_format] = shift
                    again = blackwell.layout_check(p, device=device, tiles=tiles)
                    if not again["differ"]:
                        check = {**again, "container_shift": shift, "assumed_shift_failed": first}
                        break
                else:
                    blackwell.CONTAINER_SHIFT[p.a_format] = first
            entry["layout_check"] = check
            say(f"  layout check: {check['differ']} of {check['elements']} elements differ from the exact sums")
            if check["differ"]:
                say(f"  layout check: {check}; not probed")
                doc["paths"].append(entry)
                write_json(out / "probe-blockscaled.json", doc)
                continue
            dev_target = blackwell.BlockScaleTarget(p, device=blackwell.EmulatedBlockScale(preset, diagonal=True)
                                                    if args.simulate else None)
            f = scaled.probe_scaled(dev_target, verify=args.scaled_verify, progress=lambda s: say("  " + s))
            entry.update(f.to_json())
            if f.verified:
                n = args.scaled_verify
                entry["rows_differing_from_preset"] = scaled.disagreements(f.model(), preset, n, seed=7)
                say(f"  verified: {f.model().summary()}; differs from the preset on "
                    f"{entry['rows_differing_from_preset']} of {n} random rows")
            else:
                say(f"  NOT verified: {f.verification}")
        except Exception as exc:  # noqa: BLE001 - a finding too (a compile error names the PTX): keep going
            entry["error"] = f"{type(exc).__name__}: {exc}"
            say(f"  error: {entry['error'][:300]}")
        doc["paths"].append(entry)
        write_json(out / "probe-blockscaled.json", doc)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True,
                    help="folder for probe-cuda.json and probe-torch.json (created, with its parents, if missing)")
    ap.add_argument("--verify", type=int, default=1_000_000, help="verification rows per path")
    ap.add_argument("--budget", type=float, default=480.0, help="seconds for the whole run")
    ap.add_argument("--only", help="regular expression: probe only the cuda paths whose names match it")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--simulate", nargs="?", const="H100", choices=("H100", "RTX5090"),
                    help="a device's presets in place of the GPU (pipeline test; default H100; RTX5090 also runs the "
                         "block-scaled paths through the register-level emulation)")
    ap.add_argument("--scaled-verify", type=int, default=5_000,
                    help="verification rows per block-scaled path, and random rows held to the preset (the exact "
                         "reference computes about 500 rows a second)")
    args = ap.parse_args()
    try:  # the folder and both files, checked before the first probe
        out = folder(args.out, create=True, name="out")
        for file in ("probe-cuda.json", "probe-blockscaled.json") + \
                (() if args.no_torch or args.simulate else ("probe-torch.json",)):
            destination(out / file, name="out")
    except ArgumentError as exc:
        ap.error(exc.message({"out": "--out"}))
    t0 = time.time()
    meta = {"simulated": f"{args.simulate} presets"} if args.simulate else targets.gpu_metadata()
    dev = args.simulate if args.simulate else PRESET_DEVICE.get(str(meta.get("compute_capability")))
    say = lambda s: print(f"[{time.time() - t0:6.1f}s] {s}", file=sys.stderr, flush=True)  # noqa: E731
    from blockfma.probes import cuda

    cc = {"H100": 90, "RTX5090": 120}[args.simulate] if args.simulate else cuda.compute_capability()
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
    block_scaled(args, out, cc, meta, t0, say)
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
