"""A large simulated GEMM spread over dask.distributed workers, with progress, checked against one machine.

The inputs are made on the workers (random normal values rounded to the input format), the output tiles are
computed by ``blockfma.gemm`` on dask arrays (each tile with the whole of K, so blocks chain in order) and a
few random output tiles are recomputed in memory and compared bit for bit.  Prints the time and the rate in
simulated multiply-adds per second; numpy's float32 matmul of the same shape, timed in the same run on one
machine, is the baseline.

    python benchmarks/bench_dask.py                            # 16384 x 4096 @ 4096 x 16384, 2 local workers
    python benchmarks/bench_dask.py --m 4096 --n 4096 --k 1024 --workers 4
    python benchmarks/bench_dask.py --scheduler tcp://host:8786   # an existing cluster
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import blockfma as bf
from blockfma import formats as F
from blockfma.optional import hint


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", type=int, default=16384)
    ap.add_argument("--n", type=int, default=16384)
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--chunk", type=int, default=2048, help="rows (and columns) of an output tile")
    ap.add_argument("--device", default="H100")
    ap.add_argument("--input", default="fp16")
    ap.add_argument("--workers", type=int, default=2, help="local workers (ignored with --scheduler)")
    ap.add_argument("--scheduler", help="address of an existing dask.distributed scheduler")
    ap.add_argument("--check", type=int, default=3, help="output tiles recomputed in memory and compared")
    args = ap.parse_args(argv)
    try:
        import dask.array as da
        import distributed
    except ImportError:
        print(f"bench_dask: needs dask: {hint('dask')}", file=sys.stderr)
        return 2
    if args.scheduler:
        client = distributed.Client(args.scheduler)
    else:
        cluster = distributed.LocalCluster(n_workers=args.workers, threads_per_worker=1, dashboard_address=None,
                                           silence_logs=40)
        client = distributed.Client(cluster)
    m, n, k, ch = args.m, args.n, args.k, args.chunk
    fin = args.input
    rng = da.random.default_rng(2026)
    A = rng.standard_normal((m, k), chunks=(ch, k)).map_blocks(lambda x: F.round(fin, x, saturate=True))
    B = rng.standard_normal((k, n), chunks=(k, ch)).map_blocks(lambda x: F.round(fin, x, saturate=True))
    A, B = client.persist([A, B])
    distributed.wait([A, B])
    print(f"{m} x {k} @ {k} x {n}, {args.device} {fin}, tiles of {ch} x {ch}, "
          f"{len(client.scheduler_info()['workers'])} workers", flush=True)

    t = time.perf_counter()
    D = client.persist(bf.gemm(A, B, device=args.device, input_format=fin))
    distributed.progress(D)
    distributed.wait(D)
    seconds = time.perf_counter() - t
    print(f"\n{seconds:.1f} s, {m * n * k / seconds / 1e9:.2f} GMAC/s simulated", flush=True)

    a32 = np.random.default_rng(0).standard_normal((min(m, 4096), k)).astype(np.float32)
    b32 = np.random.default_rng(1).standard_normal((k, min(n, 4096))).astype(np.float32)
    t = time.perf_counter()
    a32 @ b32
    t_np = (time.perf_counter() - t) * (m * n) / (a32.shape[0] * b32.shape[1])
    print(f"numpy float32 matmul of the same shape (scaled from {a32.shape[0]} x {b32.shape[1]}): {t_np:.2f} s, "
          f"ratio {seconds / t_np:.0f}", flush=True)

    pick = np.random.default_rng(3)
    same = True
    for _ in range(args.check):
        i, j = int(pick.integers(0, -(-m // ch))) * ch, int(pick.integers(0, -(-n // ch))) * ch
        rows, cols = slice(i, min(i + ch, m)), slice(j, min(j + ch, n))
        want = bf.gemm(A[rows].compute(), B[:, cols].compute(), device=args.device, input_format=fin)
        got = D[rows, cols].compute()
        ok = np.array_equal(F.bits(got), F.bits(want))
        same &= ok
        print(f"tile [{i}:{rows.stop}, {j}:{cols.stop}]: {'bit-identical' if ok else 'DIFFERENT'} to one machine")
    client.close()
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
