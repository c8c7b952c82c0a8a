"""Every recorded hardware dot product in shared/golden, bit for bit.

Khattak & Mikaitis's model-validation data (arXiv:2512.07004): for each device and input format about
5000 rows, each one dot product d = a·b + c recorded on the GPU.  The data were taken with wmma fragments
of k = 16 (fp16, bf16), k = 8 (tf32) and an mma/wgmma of k = 32 (fp8) with only the first K products
nonzero, so the engine is run on the same zero-padded rows.  On H100 the fp8 runs used C = 0.
"""

from __future__ import annotations

import numpy as np
import pytest

import blockfma as bf
from blockfma import replay

from helpers import golden_dir

ROOT = golden_dir("khattak-mikaitis", module=True)
CASES = [pytest.param(*case, id="-".join(case)) for case in replay.golden_sets(ROOT.parent)]
"""(device, format folder, output) of every set: ``d_<device>_<out>.txt``, or ``d_<device>_<out>_open.txt`` for
the rows the golden README calls an open problem (B200 fp8), which the B200 preset now reproduces (mma.sync
fp8: C added after the block)."""


def test_golden_folder_has_data():
    assert len(CASES) >= 18, CASES


@pytest.mark.parametrize("device,fmt,out", CASES)
def test_hardware_dot_products_bit_for_bit(device: str, fmt: str, out: str):
    """Every row through the preset (:func:`blockfma.replay.golden_set`: the rows zero-padded to the
    fragment's k, C = 0 for the H100 fp8 runs, C rounded to binary16 for fp16 outputs)."""
    r = replay.golden_set(device, fmt, out, ROOT.parent)
    assert r.rows >= 4000
    assert r.mismatches == 0, f"{r.mismatches} of {r.rows} rows differ; first {r.examples[0]}"


@pytest.mark.parametrize("device", ["V100", "A100", "H100"])
def test_normalised_product_exponents_contradict_the_data(device):
    """DEVICE-FACTS: with normalised product exponents about 15% of random fp16 dot products come out
    one or two ulps off; the sum of the factors' exponents fits every row (test above).  The data must
    tell the two readings apart, or the test above would prove little."""
    normalised = bf.device(device).model("fp16", "fp32").replace(product_exponent="normalized")
    r = replay.golden_set(device, "fp16", "fp32", ROOT.parent, model=normalised)
    assert r.mismatches / r.rows > 0.02, r.mismatches
    ex = r.examples[0]  # the differing rows' inputs in exact hex give the preset's bits and the model's
    a, b, c = [float.fromhex(x) for x in ex["a"]], [float.fromhex(x) for x in ex["b"]], float.fromhex(ex["c"])
    assert f"0x{int(np.float32(bf.dot(a, b, c, model=normalised)).view(np.uint32)):08x}" == ex["preset"] != ex["hardware"]
