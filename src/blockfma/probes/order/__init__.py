"""Summation order: infer the reduction tree of a black-box sum from its outputs.

The method is that of FPRev (Xie, Gao, Wang and Xue, "FPRev: Revealing the Order of Floating-Point Summation", USENIX
ATC 2025; arXiv:2411.00442): ``M`` at input ``i``, ``-M`` at input ``j`` and a small unit everywhere else give ``n -
l(i, j)`` units, ``l(i, j)`` the number of inputs under the lowest common ancestor of ``i`` and ``j``; those sizes
determine the tree, multi-way nodes included (a fused block of L products and the accumulator is one node with L + 1
children).  :func:`infer_order` rebuilds it pivot by pivot, every probe of one round in one target call;
docs/probes-order.md gives the probe, the choice of ``M`` (:func:`probe_scale`), the costs and what was found.

Targets are :class:`SumTarget` objects (black boxes of the protocol of :mod:`blockfma.probes.targets`): a batched ``f(X)
-> y`` over rows of summands.  Adapters make them from plain sums (:func:`sum_target`), dot products
(:func:`dot_target`), any matmul (:func:`matmul_target`), ``torch.matmul`` (:func:`torch_matmul_target`) and the
blockfma simulator (:func:`sim_target`).  :func:`evaluate` adds inputs in a tree's order with a given rounding per node,
and :func:`verify` holds a recovered tree to its target on fresh inputs.  The survey of torch.matmul is an experiment,
:func:`blockfma.experiments.torch_orders.torch_orders`.

One module a job: :mod:`.tree` (the SumTree, its text form and its named shape), :mod:`.builders` (the
common trees), :mod:`.targets` (SumTarget and its adapters), :mod:`.infer` (the probe values and the
inference) and :mod:`.replay` (sums in a given order, and the closed loop).
"""

from __future__ import annotations

from .builders import blocked, pairwise, sequential, split_k
from .infer import OrderResult, ProbeScale, infer_order, probe_scale
from .replay import Verification, block_op, evaluate, verify
from .targets import OrderError, SumTarget, dot_target, matmul_target, sim_target, sum_target, torch_matmul_target
from .tree import Shape, SumTree, describe

__all__ = ["SumTree", "Shape", "OrderError", "SumTarget", "ProbeScale", "OrderResult", "Verification", "sequential",
           "pairwise", "blocked", "split_k", "describe", "sum_target", "dot_target", "matmul_target",
           "torch_matmul_target", "sim_target", "probe_scale", "infer_order", "evaluate", "block_op", "verify"]

