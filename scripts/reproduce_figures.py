"""Regenerate the figures of docs/reproduce.md: every reproduction at --scale ci, its PNG kept small.

    python scripts/reproduce_figures.py [--out docs/figures/reproduce] [--names fttn-porting,...]

Runs ``blockfma reproduce --all --scale ci --out TMP`` (the same command a reader runs), then copies each
``NAME.png`` to ``--out`` reduced to a 64-colour palette (matplotlib's line plots use a few colours; this
takes the files from 50-190 kB to 15-55 kB, so they can live in git). The CSV and JSON stay in TMP, which is
removed; rerun ``blockfma reproduce NAME --out DIR`` for them. Reproductions without a figure (tables only)
write no PNG and are listed as such.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def shrink(src: Path, dst: Path, colors: int = 64) -> int:
    """Write ``src`` to ``dst`` as a palette PNG; returns the new size in bytes."""
    from PIL import Image  # matplotlib depends on Pillow, so it is there wherever the figures are drawn

    with Image.open(src) as image:
        image.convert("RGB").quantize(colors=colors, method=Image.Quantize.MEDIANCUT).save(dst, optimize=True)
    return dst.stat().st_size


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "figures" / "reproduce",
                        help="folder for the PNGs (created)")
    parser.add_argument("--names", default=None, help="comma-separated reproductions (default: --all)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        base = [sys.executable, "-m", "blockfma", "reproduce"]
        runs = ([base + [name, "--out", tmp, "--scale", "ci"] for name in args.names.split(",")] if args.names
                else [base + ["--all", "--out", tmp, "--scale", "ci", "--quiet"]])
        for command in runs:
            done = subprocess.run(command, check=False)
            if done.returncode not in (0, 1):     # 1: a difference without an explanation, still drawn
                print(f"reproduce_figures: {' '.join(command[3:])} exited {done.returncode}", file=sys.stderr)
                return done.returncode
        pngs = sorted(Path(tmp).glob("*.png"))
        for png in pngs:
            size = shrink(png, args.out / png.name)
            print(f"{png.name}: {png.stat().st_size // 1024} kB -> {size // 1024} kB")
        if not pngs:
            print("reproduce_figures: no figure was written (is matplotlib installed?)", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
