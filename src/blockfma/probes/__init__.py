"""Probes: measure a matrix unit through a black box.

``probes.cuda`` runs real tensor-core instructions (``mma.sync``) on tiles of our own choosing, with every
fragment placed where the PTX ISA says; it is the ``"cuda"`` target of the probe suite and the source of the
hardware records in ``data/hardware/``.
"""
