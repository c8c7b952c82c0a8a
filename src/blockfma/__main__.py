"""``python -m blockfma``: the command line (see :mod:`blockfma.cli`)."""

from .cli import main

raise SystemExit(main())
