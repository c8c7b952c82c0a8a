"""Draw the block-FMA data path (the truncated-fused family of docs/semantics.md) as docs/datapath.svg.

    python scripts/datapath_figure.py [--out docs/datapath.svg]

The labels are the field names of ``blockfma.Model`` (block_width, fraction_bits, e_zero, alignment,
carry_bits, output_rounding, c_entry); the script checks that each is one, so a renamed field breaks it
rather than the picture silently drifting from the code. The SVG is written with a fixed hash salt and no
date, so that rerunning it gives the same file.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

FIELDS = ("block_width", "fraction_bits", "e_zero", "alignment", "carry_bits", "output_rounding",
          "output_fraction_bits", "c_entry", "input_format", "output_format")


def check_fields():
    """Every label the figure uses is a field of Model (the figure is drawn from the code's names)."""
    from blockfma import Model

    names = {f.name for f in dataclasses.fields(Model)}
    missing = [name for name in FIELDS if name not in names]
    if missing:
        raise SystemExit(f"datapath_figure: Model has no field {', '.join(missing)}; update the figure")


def draw(out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    fig, ax = plt.subplots(figsize=(9.6, 7.4))
    ax.set_xlim(0, 100)
    ax.set_ylim(0, 100)
    ax.axis("off")

    def box(x, y, w, h, text, color="#eef3fb", size=8.5, edge="#34568b", style="round,pad=0.3"):
        ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle=style, fc=color, ec=edge, lw=1.1))
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=size, family="DejaVu Sans")

    def arrow(x0, y0, x1, y1, dashed=False, color="#34568b"):
        ax.add_patch(FancyArrowPatch((x0, y0), (x1, y1), arrowstyle="-|>", mutation_scale=10, lw=1.0,
                                     color=color, linestyle="--" if dashed else "-"))

    ax.text(50, 98, "One block of the truncated-fused family (NVIDIA tensor cores): d = a·b + c",
            ha="center", va="center", fontsize=11, weight="bold")

    lanes = [15, 31, 47, 63]          # product lanes (block_width L of them; four drawn)
    labels = ["1", "2", None, "L"]
    for x, i in zip(lanes, labels):
        if i is None:
            ax.text(x + 6.5, 80, "…", ha="center", va="center", fontsize=16)
            ax.text(x + 6.5, 55, "…", ha="center", va="center", fontsize=16)
            continue
        box(x, 87, 13, 5, f"a{i}, b{i}", color="#ffffff", size=8)
        arrow(x + 6.5, 86.5, x + 6.5, 82.5)
        box(x, 75, 13, 7, f"p{i} = a{i}·b{i}, exact\ne{i} = E(a{i}) + E(b{i})", size=7)
        arrow(x + 6.5, 74.5, x + 6.5, 60)
        box(x, 50, 13, 9.5, f"cut p{i} to a\nmultiple of\n2^(e_max − F)", size=7.5)
        arrow(x + 6.5, 49.5, 46, 44)
    ax.text(0, 89.5, "block_width = L\nproducts, in\ninput_format", fontsize=7.5, color="#34568b", va="center")
    # C enters as a term of the block (fused) or after it (c_entry="after"/"end")
    box(82, 87, 14, 5, "c (output_format)", color="#ffffff", size=7.5)
    arrow(89, 86.5, 89, 82.5)
    box(80, 75, 18, 7, "e_c = E(c); a zero c or\nzero product: e_zero", size=7)
    arrow(89, 74.5, 89, 60)
    box(80, 50, 18, 9.5, "c_entry = \"fused\":\nc is cut like a product\nand summed with them", size=7.5,
        color="#fff6e5", edge="#b5651d")
    arrow(84, 49.5, 60, 44, color="#b5651d")

    # the block's largest exponent
    box(15, 63.5, 83, 5, "e_max = max(e1, …, eL, e_c): every term is aligned to the block's largest exponent",
        color="#e8f5e9", edge="#2e7d32", size=8)
    ax.text(0, 55, "fraction_bits = F\nalignment:\n\"truncate\" (to 0)\nor \"floor\"", fontsize=7.5,
            color="#34568b", va="center")

    box(24, 37, 46, 7, "S = exact sum of the cut terms\ncarry_bits = n: carries above n bits are lost",
        size=8)
    arrow(47, 36.5, 47, 31.5)
    box(20, 22, 56, 9, "one normalisation and one rounding: d = R(S)\n"
        "output_rounding (RZ for fp32 on NVIDIA, RNE for fp16),\n"
        "output_fraction_bits (13 for Hopper fp8 → fp32)", size=8, color="#e8f5e9", edge="#2e7d32")
    arrow(48, 21.5, 48, 15.5)

    # C after the block
    box(78, 22, 18, 9, "c_entry = \"after\":\nblocks start from +0,\nthen d = c + S' by one\nIEEE add",
        size=7.5, color="#fff6e5", edge="#b5651d")
    arrow(89, 49.5, 89, 31.5, dashed=True, color="#b5651d")
    arrow(77.5, 26.5, 76.5, 26.5, dashed=True, color="#b5651d")

    box(38, 7, 20, 8, "d (output_format)\nnext block's c when\nk > block_width", color="#ffffff", size=7.5)
    ax.add_patch(FancyArrowPatch((58.5, 9), (96.5, 89.5), connectionstyle="angle,angleA=0,angleB=90,rad=4",
                                 arrowstyle="-|>", mutation_scale=10, lw=0.9, color="#777777", linestyle=":"))
    ax.text(2, 4, "Model fields in code type: block_width (L), fraction_bits (F), e_zero, alignment, carry_bits, "
            "output_rounding, output_fraction_bits, c_entry.\nExact rules, other families and special values: "
            "docs/semantics.md. Drawn by scripts/datapath_figure.py.", fontsize=7, color="#555555")

    out.parent.mkdir(parents=True, exist_ok=True)
    plt.rcParams["svg.hashsalt"] = "blockfma-datapath"
    plt.rcParams["svg.fonttype"] = "none"      # text stays text: a small, searchable file
    fig.savefig(out, format=out.suffix.lstrip(".") or "svg", metadata={"Date": None}
                if out.suffix == ".svg" else None, bbox_inches="tight")
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "docs" / "datapath.svg",
                        help="the figure to write (.svg or .png; its folder is created)")
    args = parser.parse_args(argv)
    check_fields()
    draw(args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
