"""``python -m uamp``: the ``uamp`` command line."""

from uamp_trio.cli import main

raise SystemExit(main())
