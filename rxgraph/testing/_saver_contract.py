"""``SaverContract``: the ``CheckpointSaver`` contract as a test suite that a saver's author runs unchanged.

Subclass it in a pytest test module; pytest collects every check as a test of your class::

    from rxgraph.testing import SaverContract

    class TestMySaver(SaverContract):
        def make_saver(self, tmp_path):
            return MySaver(tmp_path / "checkpoints")

        def reopen(self, saver, tmp_path):  # durable savers only: a second saver on the same storage
            return MySaver(tmp_path / "checkpoints")

Optional capabilities are detected, not assumed: the checks that need a second saver on the same storage run
when ``reopen`` gives another instance, the check of a closed saver runs when the saver has a ``close`` method, and
the retention checks when it overrides ``prune`` and ``delete_thread``; otherwise they are skipped. A saver raises
the contract's errors (with the messages the suite expects) by calling ``rxgraph.checkpoint.contract.check_put``,
``check_limit`` and ``check_prune`` under its own lock; ``select_pruned`` says which checkpoints a prune drops.
To make a saver from other fixtures (a database server, say), store them on ``self`` in an autouse fixture of your
class: ``make_saver`` is only called inside each test. Needs pytest, which is imported only when a check runs.
"""

from __future__ import annotations

from ._contract import (
    CloseContract,
    CompareAndSetContract,
    ConcurrencyContract,
    GraphContract,
    ReadContract,
    RetentionContract,
    SharedStorageContract,
    ValuesContract,
)
from ._contract._chat import ScriptedChatGraph

__all__ = ["SaverContract", "ScriptedChatGraph"]


# pytest collects inherited checks in reverse MRO order: the areas are listed last first, so that the checks run
# (and are listed) in the order of the contract, from put's compare-and-set to a closed saver.
class SaverContract(
    CloseContract,
    SharedStorageContract,
    RetentionContract,
    GraphContract,
    ConcurrencyContract,
    ValuesContract,
    ReadContract,
    CompareAndSetContract,
):
    """The ``CheckpointSaver`` contract; subclass it as ``Test...`` and implement :meth:`make_saver`.

    pytest collects the ``test_*`` methods of the subclass: every area of the contract (see
    :mod:`rxgraph.testing._contract`). Each check makes its own saver (or savers, on one storage) in a fresh
    ``tmp_path`` and closes them when it ends, passed or failed.
    """
