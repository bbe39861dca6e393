"""``python -m uamp_trio``: the ``uamp`` command line."""

from .cli import main

raise SystemExit(main())
