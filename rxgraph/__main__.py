"""``python -m rxgraph``: the same as the ``rxgraph`` command."""

from .cli import main

raise SystemExit(main())
