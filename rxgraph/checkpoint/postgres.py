"""Deprecated: import ``PostgresSaver`` and ``PostgresSaverStats`` from :mod:`rxgraph.checkpoint`.

Their names here still work, with a ``DeprecationWarning``, until the next release.
"""

import typing

from .._deprecated import deprecated_names as _deprecated_names
from ._postgres import PostgresSaver as _PostgresSaver
from ._postgres import PostgresSaverStats as _PostgresSaverStats

__all__: list[str] = []

# Old names, kept for one release: they work, with a DeprecationWarning; type checkers see only the new ones.
if not typing.TYPE_CHECKING:
    __getattr__ = _deprecated_names(
        __name__,
        {
            "PostgresSaver": ("rxgraph.checkpoint.PostgresSaver", lambda: _PostgresSaver),
            "PostgresSaverStats": ("rxgraph.checkpoint.PostgresSaverStats", lambda: _PostgresSaverStats),
        },
    )
