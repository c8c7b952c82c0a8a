"""Every test file collects where the optional packages are missing (a fresh clone without torch, CuPy or a
GPU, or without the test extra's solvers and plotting): a module that needs one skips with a reason; none
breaks collection, which would stop the whole run.

The check runs ``pytest --collect-only`` in a subprocess whose ``sys.modules`` holds None for each blocked
package: ``import`` then raises ModuleNotFoundError and ``importlib.util.find_spec`` returns None, as where
the package was never installed.
"""

from __future__ import annotations

import os
import subprocess
import sys

from helpers import REPO

# every package the tests may do without: the GPU stack (`make test` where no CPU build of torch installs)
# and the test extra's own (a bare `pip install blockfma pytest hypothesis`); one run with all of them
# blocked catches a module-level use of any one (a run per package would cost seconds each in CI)
OPTIONAL = ("torch", "cupy", "mmasim", "numba", "dask", "distributed", "matplotlib", "bitwuzla", "cvc5")

COLLECT = """
import sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None
import pytest
sys.exit(pytest.main(["--collect-only", "-q", "-rs", "-p", "no:cacheprovider", "tests"]))
"""

# modules that need a blocked package and must say so (the reasons are the modules' own)
SKIPS = {"torch": ["test_gpu_engine.py", "test_mmasim.py", "test_probes_torch.py"],
         "dask": ["test_distributed.py"]}


def test_every_file_collects_without_optional_packages():
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    src = str(REPO / "src")
    env["PYTHONPATH"] = os.pathsep.join([src, env["PYTHONPATH"]]) if env.get("PYTHONPATH") else src
    done = subprocess.run([sys.executable, "-c", COLLECT, ",".join(OPTIONAL)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert not [line for line in out.splitlines() if line.startswith("ERROR")], out[-4000:]
    assert " tests collected" in out  # the run got to the end of collection, not to an empty directory
    skipped = [line for line in out.splitlines() if line.startswith("SKIPPED")]
    for package, files in SKIPS.items():
        for name in files:
            assert any(name in line and package in line for line in skipped), (name, skipped)
