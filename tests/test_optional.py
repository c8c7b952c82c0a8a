"""blockfma.optional: optional imports and their one-line install hint."""

from __future__ import annotations

import sys

import pytest

from blockfma import optional


def test_require_returns_the_module():
    import json

    assert optional.require("json", extra="x", needed_by="this test") is json


def test_a_missing_module_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    with pytest.raises(ImportError) as info:
        optional.require("torch", extra="torch", needed_by="the GPU engine", note=" (a CUDA build for backend='cuda')")
    assert str(info.value) == ("the GPU engine needs torch: pip install 'blockfma[torch]' (a CUDA build for "
                               "backend='cuda')")
    with pytest.raises(ImportError, match=r"^blockfma.plot needs matplotlib: pip install 'blockfma\[plot\]'$"):
        optional.require("blockfma_no_such_module.figure", extra="plot", needed_by="blockfma.plot", what="matplotlib")


def test_hint_and_available():
    assert optional.hint("dask") == "pip install 'blockfma[dask]'"
    assert optional.available("json") and optional.available("numpy.linalg")
    assert not optional.available("blockfma_no_such_module")
    assert not optional.available("blockfma_no_such_module.sub")  # its parent is missing: False, no error
