"""Worker process for test_sqlite and test_postgres: one compare-and-set write on a shared database.

Usage: ``python _cas_worker.py DB_PATH NAME`` (an SQLite file) or ``python _cas_worker.py CONNINFO NAME SCHEMA`` (a
PostgreSQL database). Reads the head of thread ``t``, prints ``ready``, waits for a ``go`` line on stdin, then tries
to append a message as the next checkpoint and prints ``won`` or ``conflict <head>``.
"""

from __future__ import annotations

import sys

from rxgraph import Checkpoint, CheckpointConflictError
from rxgraph.checkpoint import PostgresSaver, SqliteSaver
from rxgraph.messages import UserMessage


def main(path: str, name: str, schema: str | None = None) -> int:
    with SqliteSaver(path) if schema is None else PostgresSaver(path, schema=schema) as saver:
        head = saver.get("t")
        assert head is not None
        checkpoint = Checkpoint(
            id=name,
            thread_id="t",
            seq=head.seq + 1,
            parent_id=head.id,
            values={"messages": head.values["messages"].extended([UserMessage(content=f"from {name}")])},
            run_id=name,
            source="loop",
        )
        print("ready", flush=True)
        if sys.stdin.readline().strip() != "go":
            return 2
        try:
            saver.put(checkpoint, expected_head=head.id)
        except CheckpointConflictError as error:
            print(f"conflict {error.actual_head}", flush=True)
        else:
            print("won", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
