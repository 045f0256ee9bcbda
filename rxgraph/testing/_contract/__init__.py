"""The areas of the ``CheckpointSaver`` contract, one class each; ``rxgraph.testing.SaverContract`` is all of them.

- ``CompareAndSetContract``: ``put`` as a compare-and-set on the head, ``seq``, unique ids;
- ``ReadContract``: ``get``, ``list``, ``threads``, ``latest_safe``;
- ``ValuesContract``: every field and value round-trips, and stored checkpoints are frozen;
- ``ConcurrencyContract``: writers racing through one saver;
- ``GraphContract``: a real graph leaves the same history as on ``MemorySaver``;
- ``RetentionContract``: ``prune`` and ``delete_thread`` (skipped on savers without them);
- ``SharedStorageContract``: two savers on one storage (skipped unless ``reopen`` gives another instance);
- ``CloseContract``: a closed saver raises (skipped unless the saver has ``close``).

Each area subclasses ``SaverContractBase``, which holds the hooks a saver's author implements (``make_saver``, and
``reopen`` and ``close`` when the defaults do not fit), so an area runs on its own too: subclass it as ``Test...``
with the same hooks, e.g. to check a saver's retention alone while the rest of it is still being written::

    from rxgraph.testing._contract import RetentionContract

    class TestMySaverRetention(RetentionContract):
        def make_saver(self, tmp_path):
            return MySaver(tmp_path / "checkpoints")

To run one area of a full ``SaverContract`` instead, select its checks with pytest's ``-k``.
"""

from ._base import SaverContractBase
from ._cas import CompareAndSetContract
from ._close import CloseContract
from ._concurrency import ConcurrencyContract
from ._graph import GraphContract
from ._reads import ReadContract
from ._retention import RetentionContract
from ._shared_storage import SharedStorageContract
from ._values import ValuesContract

__all__ = [
    "CloseContract",
    "CompareAndSetContract",
    "ConcurrencyContract",
    "GraphContract",
    "ReadContract",
    "RetentionContract",
    "SaverContractBase",
    "SharedStorageContract",
    "ValuesContract",
]
