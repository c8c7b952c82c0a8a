"""Summation order: infer the reduction tree of a black-box sum from its outputs.

The method is that of FPRev (Xie, Gao, Wang and Xue, "FPRev: Revealing the Order of Floating-Point
Summation", USENIX ATC 2025; arXiv:2411.00442).  A probe puts a large power of two ``M`` at input ``i``,
``-M`` at input ``j`` and a small power of two (the *unit*) everywhere else.  Every unit that meets ``M``
or ``-M`` before the two cancel is absorbed; the two cancel exactly in the smallest subtree holding both,
and every unit outside that subtree survives.  So the output counts ``n - l(i, j)`` units, where
``l(i, j)`` is the number of inputs under the lowest common ancestor of ``i`` and ``j``.  Those sizes
determine the tree, multi-way nodes included: a fused block of a matrix unit (L products and the running
accumulator added at once, everything below ``2**(e_max - F)`` cut) is one node with L + 1 children.

The probe and the aim (O(n^2) target calls at most, where trying candidate trees would cost O(4^n)) are
FPRev's; the recursion and the batching into rounds are this module's.  :func:`infer_order` probes one
input of a set (the pivot) against all the others; the sizes group the others by the ancestor at which
they join the pivot, the groups must fill those ancestors exactly, and each group is solved the same
way, under the ancestor's size.  Every probe of one round goes to the target in one call (one kernel
launch on a GPU; a GEMM of fixed shape takes m rows a call).  A sequential sum costs n - 1 probes in one
round, a pairwise tree O(n log n) in log2 n rounds, a chain of fused L-blocks about n L / 2 in about L
rounds; no pair is probed twice, so no tree costs more than n (n - 1) / 2.  ``method="all-pairs"`` probes
every pair in one round instead.

Targets are :class:`SumTarget` objects (black boxes of the protocol of :mod:`blockfma.probes.targets`): a
batched ``f(X) -> y`` over rows of summands, with the formats the probe needs to choose ``M``
(:func:`probe_scale`).  Adapters make them from plain sums (:func:`sum_target`), dot products
(:func:`dot_target`), any matmul (:func:`matmul_target`), ``torch.matmul`` (:func:`torch_matmul_target`)
and the blockfma simulator (:func:`sim_target`).  :func:`evaluate` adds inputs in a tree's order with a
given rounding per node, and :func:`verify` holds a recovered tree to its target on fresh inputs (the
closed loop).  The survey of torch.matmul over dtypes, switches, K and shapes is an experiment,
:func:`blockfma.experiments.torch_orders.torch_orders`; ``docs/probes-order.md`` explains the choices and
lists what was found.

One module a job: :mod:`.tree` (the SumTree, its text form and its named shape), :mod:`.builders` (the
common trees), :mod:`.targets` (SumTarget and its adapters: the protocol of
:class:`blockfma.probes.targets.BlackBox`), :mod:`.infer` (the probe values and the inference) and
:mod:`.replay` (sums in a given order, and the closed loop).
"""

from __future__ import annotations

from .builders import blocked, pairwise, sequential, split_k
from .infer import OrderResult, ProbeScale, infer_order, probe_scale
from .replay import Verification, block_op, evaluate, verify
from .targets import OrderError, SumTarget, dot_target, matmul_target, sim_target, sum_target, torch_matmul_target
from .tree import Shape, SumTree, describe

__all__ = [
    "SumTree",
    "Shape",
    "OrderError",
    "SumTarget",
    "ProbeScale",
    "OrderResult",
    "Verification",
    "sequential",
    "pairwise",
    "blocked",
    "split_k",
    "describe",
    "sum_target",
    "dot_target",
    "matmul_target",
    "torch_matmul_target",
    "sim_target",
    "probe_scale",
    "infer_order",
    "evaluate",
    "block_op",
    "verify",
]

