"""``python -m uamp``: the ``uamp`` command line."""

from uamp_trio.command_line import main

raise SystemExit(main())
