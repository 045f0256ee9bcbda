"""The ``rxgraph`` command: ``demo``, ``inspect`` and ``check``."""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path
from typing import Any, TextIO

from .checkpoint import Checkpoint
from .errors import CheckpointDecodeError, RxGraphError

__all__ = ["CliError", "main"]


class CliError(RxGraphError):
    """A problem to report to the user in one line (exit status 1): a bad option value, a missing file or thread."""


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None) -> int:
    """Run the command line; return the exit status (0 ok, 1 error, 2 usage)."""
    out = out or sys.stdout
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args, out))
    except (RxGraphError, sqlite3.DatabaseError) as error:
        print(f"rxgraph {args.command}: error: {error}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # The reader went away (`rxgraph demo | head`): stop quietly, as other command-line tools do.
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - keeps Python from failing again when it flushes at exit
        return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rxgraph", description="Reactive agent graphs whose turns stay atomic under cancellation."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = commands.add_parser("demo", help="run a scripted agent conversation with a cancelled turn, on SQLite")
    demo.add_argument("--db", default="rxgraph-demo.db", help="SQLite file to use (default: %(default)s)")
    demo.add_argument(
        "--cancel-at",
        type=float,
        default=10.0,
        metavar="TICK",
        help="when the client of turn 2 disconnects, in ticks after the turn started (default: %(default)s)",
    )
    demo.set_defaults(handler=_demo)

    inspect = commands.add_parser("inspect", help="list a database's threads, or one thread's checkpoints")
    inspect.add_argument("--db", required=True, help="an rxgraph SQLite file")
    inspect.add_argument("--thread", help="show this thread's checkpoints")
    inspect.add_argument("--json", action="store_true", help="print JSON instead of a table")
    inspect.set_defaults(handler=_inspect)

    check = commands.add_parser("check", help="integrity check, and the threads whose head is not safe")
    check.add_argument("--db", required=True, help="an rxgraph SQLite file")
    check.set_defaults(handler=_check)
    return parser


def _demo(args: argparse.Namespace, out: TextIO) -> int:
    from .examples.demo import run_demo

    if args.cancel_at < 0:
        raise CliError(f"--cancel-at must be >= 0, got {args.cancel_at:g}")
    run_demo(args.db, cancel_at=args.cancel_at, out=out)
    return 0


def _open(db: str) -> Any:
    from .checkpoint import SqliteSaver

    path = Path(db)
    if not path.is_file():
        raise CliError(f"no such database file: {db}")
    return SqliteSaver(path)


def _summary(checkpoint: Checkpoint) -> dict[str, Any]:
    messages = checkpoint.values.get("messages")
    return {
        "seq": checkpoint.seq,
        "id": checkpoint.id,
        "parent_id": checkpoint.parent_id,
        "node": checkpoint.node,
        "next": list(checkpoint.next),
        "source": checkpoint.source,
        "run_id": checkpoint.run_id,
        "created_at": checkpoint.created_at.isoformat(),
        "messages": len(messages) if messages is not None else None,
        "safe": checkpoint.safe,
        "unsafe_reason": checkpoint.unsafe_reason,
        "rolled_back_from": checkpoint.rolled_back_from,
    }


def _inspect(args: argparse.Namespace, out: TextIO) -> int:
    saver = _open(args.db)
    try:
        if args.thread is None:
            rows: list[dict[str, Any]] = []
            for thread in sorted(saver.threads()):
                try:
                    head = saver.get(thread)
                except CheckpointDecodeError as error:
                    # One damaged head must not hide the other threads (`check` reports it the same way).
                    rows.append(
                        {
                            "thread_id": thread,
                            "head_seq": _seq_of(args.db, error.checkpoint_id),
                            "head_safe": None,
                            "head_source": None,
                            "error": str(error),
                        }
                    )
                    continue
                rows.append(
                    {
                        "thread_id": thread,
                        "head_seq": head.seq if head else None,
                        "head_safe": head.safe if head else None,
                        "head_source": head.source if head else None,
                    }
                )
            if args.json:
                json.dump({"threads": rows}, out, indent=2)
                out.write("\n")
            else:
                _table(
                    out,
                    ["THREAD", "HEAD SEQ", "HEAD", "SAFE"],
                    [
                        [
                            r["thread_id"],
                            "-" if r["head_seq"] is None else r["head_seq"],
                            r["head_source"] or "-",
                            f"UNREADABLE: {r['error']}" if "error" in r else "yes" if r["head_safe"] else "NO",
                        ]
                        for r in rows
                    ],
                )
                if not rows:
                    print("(no threads)", file=out)
            return 0
        checkpoints = saver.list(args.thread)
        if not checkpoints:
            raise CliError(
                f"no thread {args.thread!r} in {args.db} (threads: {', '.join(sorted(saver.threads())) or 'none'})"
            )
        summaries = [_summary(c) for c in checkpoints]
        if args.json:
            json.dump({"thread_id": args.thread, "checkpoints": summaries}, out, indent=2)
            out.write("\n")
            return 0
        _table(
            out,
            ["SEQ", "ID", "PARENT", "NODE", "SOURCE", "RUN", "MSGS", "SAFE"],
            [
                [
                    s["seq"],
                    s["id"][:12],
                    (s["parent_id"] or "-")[:12],
                    s["node"] or "-",
                    s["source"],
                    s["run_id"][:8],
                    "-" if s["messages"] is None else s["messages"],
                    "yes" if s["safe"] else f"NO: {s['unsafe_reason']}",
                ]
                for s in summaries
            ],
        )
        return 0
    finally:
        saver.close()


def _check(args: argparse.Namespace, out: TextIO) -> int:
    path = Path(args.db)
    if not path.is_file():
        raise CliError(f"no such database file: {args.db}")
    with closing(_read_only(path)) as connection:
        result = [row[0] for row in connection.execute("PRAGMA integrity_check")]
    if result != ["ok"]:
        print(f"integrity check FAILED for {args.db}:", file=out)
        for line in result:
            print(f"  {line}", file=out)
        return 1
    print(f"integrity check: ok ({args.db})", file=out)
    saver = _open(args.db)
    try:
        threads = sorted(saver.threads())
        unsafe = []
        for thread in threads:
            try:
                head = saver.get(thread)
            except CheckpointDecodeError as error:
                unsafe.append((thread, f"the head cannot be read: {error}"))
                continue
            if head is not None and not head.safe:
                unsafe.append((thread, f"head seq {head.seq}: {head.unsafe_reason}"))
        print(f"{len(threads)} thread(s), {len(unsafe)} with a head that cannot take a new user turn", file=out)
        for thread, reason in unsafe:
            print(f"  {thread}: {reason}", file=out)
        if unsafe:
            print("(the next turn on those threads starts from their newest safe checkpoint)", file=out)
        return 0
    finally:
        saver.close()


def _read_only(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)


def _seq_of(db: str, checkpoint_id: str) -> int | None:
    """The seq of a checkpoint that cannot be decoded, read from its row alone."""
    with closing(_read_only(Path(db))) as connection:
        row = connection.execute("SELECT seq FROM checkpoints WHERE id = ?", (checkpoint_id,)).fetchone()
    return None if row is None else int(row[0])


def _table(out: TextIO, header: list[str], rows: list[list[Any]]) -> None:
    cells = [header, *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for row in cells:
        print("  ".join(value.ljust(width) for value, width in zip(row, widths, strict=True)).rstrip(), file=out)


if __name__ == "__main__":
    raise SystemExit(main())
