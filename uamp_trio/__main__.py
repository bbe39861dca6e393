"""``python -m uamp_trio``: the ``uamp`` command line."""

from .command_line import main

raise SystemExit(main())
