#!/usr/bin/env bash
# One short GPU session's checks in one call (../shared/GPU.md steps 1-2), each part under its own time
# limit so that one slow part cannot eat the others' time.  Run from the repository root on the GPU machine:
#
#     OUT=/some/folder bash scripts/gpu_session.sh          # about 10 minutes at most
#
# Its first run (H200, 2026-11-26: data/hardware/README.md) set the limits: the GPU tests need about 200 s
# on 8 workers (they compile every model's kernel), the float64 reference of bench_multiword_gpu at
# n = 16384 alone outlasts 100 s on the host, and the tile sweep's slow tiles (128 x 128) were dropped.
#
# Parts (seconds at most): the kernel tests (pytest -m gpu) and the hardware probe of the wgmma fp8 paths
# still without 10^6 verified rows, side by side (both check bits, neither is timed); then, alone on the
# GPU, the Triton GEMM speed with its tile sweep and the peer mmaemu beside our fp8 kernel (--mmaemu), the
# multiword/Ozaki speed (Ozaki I and II fused and unfused beside DGEMM: their first compile and timing, issue 32) and
# the emulation's slowdown; last, the library's split-K plans (scripts/record_plans.py).
#
# The GPU machine has no network: wheels it lacks (mmaemu, pure Python) come in .whl/ (git-ignored; carry it),
# installed first into /tmp/site; without .whl/ the run goes on and bench_gpu says mmaemu is absent.
# Everything lands in $OUT: session.log (environment and the benchmarks' tables), tests.log, probe.log and
# the JSON records, to be committed under data/hardware/ with tests that replay them.
set -u
: "${OUT:?set OUT to the folder for the logs and records}"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
T_TESTS=${T_TESTS:-210} T_PROBE=${T_PROBE:-120} T_GEMM=${T_GEMM:-200} T_MW=${T_MW:-100} T_EMU=${T_EMU:-60}
T_PLANS=${T_PLANS:-90}
log="$OUT/session.log"
say() { echo "[$(date +%T)] $*" | tee -a "$log"; }

if compgen -G ".whl/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl/*.whl >>"$log" 2>&1 && export PYTHONPATH="/tmp/site:$PYTHONPATH"
    say "wheels of .whl/ into /tmp/site (pip exit $?): $(cd .whl && echo *.whl)"
else
    say "no .whl/ folder: nothing installed (bench_gpu --mmaemu will say mmaemu is absent)"
fi

say "environment"
{ nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv
  "$PY" -c "import sys, numpy, ml_dtypes, torch, triton; print(sys.version.split()[0], 'numpy', numpy.__version__,
'ml_dtypes', ml_dtypes.__version__, 'torch', torch.__version__, 'cuda', torch.version.cuda, 'triton',
triton.__version__)"
  "$PY" -c "import mmaemu; print('mmaemu', mmaemu.__version__)"
  git rev-parse HEAD 2>/dev/null; nproc; } >>"$log" 2>&1

say "part 1 (side by side): pytest -m gpu (Triton kernels, emulation, multiword tensors) and the wgmma fp8 probe"
# -p no:benchmark: pytest-benchmark (in the GPU image) warns under xdist, an error with filterwarnings=error
timeout -k 10 "$T_TESTS" "$PY" -m pytest -q -m gpu -n 8 -p no:cacheprovider -p no:benchmark \
    -W ignore::DeprecationWarning \
    tests/test_triton_engine.py tests/test_triton_families.py tests/test_triton_scaled.py tests/test_torch_emulate.py \
    tests/test_torch_emulate_more.py tests/test_multiword_tensors.py tests/test_multiword_torch.py \
    tests/test_bench_mmaemu.py tests/test_triton_tensors.py tests/test_multiword_fused.py \
    >"$OUT/tests.log" 2>&1 &
tests=$!
timeout -k 10 "$T_PROBE" "$PY" scripts/probe_hardware.py --out "$OUT/probe" --no-torch --verify 1000000 \
    --budget $((T_PROBE - 20)) --only '^wgmma\.m64n64k32\.f16\.e5m2\.e5m2' >"$OUT/probe.log" 2>&1 &
probe=$!
wait $tests; say "pytest exit $?: $(tail -n 1 "$OUT/tests.log")"
wait $probe; say "probe exit $?: $(tail -n 1 "$OUT/probe.log")"

say "part 2: Triton GEMM speed (mmaemu beside it at 4096^3 and 8192^3, the tile sweep with the grid path and the"
say "        int32 terms at 8192^3, then rows at 4096^3 with the whole call), fp32 matmul timed in the same run"
timeout -k 10 "$T_GEMM" "$PY" benchmarks/bench_gpu.py --sizes 4096 --check-size 256 --repeat 2 \
    --cases 'H100 (fp16|bf16|e4m3fn)->fp32|MI300X fp16->fp32|B200' --tiles 128x64x8,64x64x8,64x128x8 \
    --sweep-size 8192 --no-general --mmaemu --mmaemu-sizes 4096,8192 --record "$OUT/gemm-speed.json" >>"$log" 2>&1
say "bench_gpu exit $?"

say "part 3: multiword and Ozaki on the tensor cores against SGEMM and DGEMM (Ozaki I and II fused and unfused)"
timeout -k 10 "$T_MW" "$PY" benchmarks/bench_multiword_gpu.py --n 4096,8192 --dists uniform01 \
    --methods 3xtf32,bf16x9,ozaki1,ozaki1-unfused,ozaki2,ozaki2-unfused --repeat 3 --e2e-max 16384 --exact-max 512 \
    --sample-rows 16 --out "$OUT/multiword-speed.json" >>"$log" 2>&1
say "bench_multiword_gpu exit $?"

say "part 4: bf.torch.emulate against native torch"
timeout -k 10 "$T_EMU" "$PY" benchmarks/bench_emulate.py --shapes 256x512x256,4096x4096x4096 \
    --dtypes fp16,bf16 --devices H100,MI300X --scaled-mm --repeat 2 --out "$OUT/emulate-speed.json" >>"$log" 2>&1
say "bench_emulate exit $?"

say "part 5: cuBLAS's split-K plans (fp16, bf16, fp32, TF32, fp8 both ways) by replay; record -> data/hardware/"
timeout -k 10 "$T_PLANS" "$PY" scripts/record_plans.py --out "$OUT/plans.json" --budget $((T_PLANS - 20)) \
    >>"$log" 2>&1
say "record_plans exit $?"
say "done"
