"""The saver contract on a real graph: a conversation with tool calls, a failed turn and a rewind leaves the same
history on the saver as on ``MemorySaver``.

Subclass ``GraphContract`` as ``Test...`` with your ``make_saver`` to run only this check.
"""

from __future__ import annotations

from pathlib import Path

from ...checkpoint import MemorySaver
from ...messages import AssistantMessage, check_request
from ._base import SaverContractBase, Session
from ._chat import history, run_conversation

__all__ = ["GraphContract"]


class GraphContract(SaverContractBase):
    """The check of a graph's run on the saver: the history it leaves is the reference saver's, as every reader
    sees it."""

    def test_a_graph_produces_the_same_history_on_every_saver(self, tmp_path: Path) -> None:
        with Session(self, tmp_path) as session:
            reference = MemorySaver()
            reference_chat = run_conversation(reference)
            chat = run_conversation(session.saver)
            expected = history(reference, "chat")
            assert history(session.saver, "chat") == expected
            assert history(session.fresh(), "chat") == expected
            assert chat.requests == reference_chat.requests
            for request in chat.requests:
                check_request(request)
            assert any(not row[5] for row in expected) and any(row[7] is not None for row in expected)
            assert chat.graph.get_state(chat.config).values["messages"][-1] == AssistantMessage(content="back again")
