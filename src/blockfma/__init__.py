"""blockfma: bit-exact models of matrix accelerators (tensor cores, matrix cores, CPU matrix units).

The data path, one module each:

    formats -> family, model, plan -> devices -> engine -> probes / smt / multiword -> check, cli

``bf.smt`` (formal questions about models, through an SMT solver), ``bf.multiword`` (accurate GEMM from
low-precision units) and ``bf.torch`` (PyTorch with another device's arithmetic) load on first use.

>>> import blockfma as bf
>>> float(bf.dot([1.0, 2.0**-24], [1.0, 1.0], 0.0, device="V100"))
1.0
"""

from . import formats, literals
from .check import check
from .devices import Device, device, devices
from .engine import dot, gemm
from .formats import Format, RoundingMode
from .family import Family
from .model import Alignment, Model, NaNStyle
from .probes import probe
from .version import __version__


def __getattr__(name: str):  # bf.smt, bf.multiword and bf.torch load on first use
    if name in ("smt", "multiword", "torch"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'blockfma' has no attribute {name!r}")

__all__ = ["formats", "literals", "Format", "RoundingMode", "Model", "Family", "Alignment", "NaNStyle", "Device",
           "device", "devices", "dot", "gemm", "probe", "check", "smt", "multiword", "torch", "__version__"]
