"""The ``rxgraph`` command: ``demo``, ``inspect``, ``check``, ``serve`` and ``draw``."""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
from collections.abc import Mapping, Sequence
from contextlib import closing
from inspect import Signature
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ._json import checkpoint_metadata, to_json
from .checkpoint import Checkpoint, CheckpointSaver
from .errors import CheckpointDecodeError, RxGraphError

if TYPE_CHECKING:
    from .graph import CompiledGraph

__all__ = ["CliError", "main"]


class CliError(RxGraphError):
    """A problem to report to the user in one line (exit status 1): a bad option value, a missing file or thread."""


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None) -> int:
    """Run the command line; return the exit status (0 ok, 1 error, 2 usage)."""
    out = out or sys.stdout
    parser = _parser()
    args = parser.parse_args(argv)
    if getattr(args, "checkpoint", None) is not None and args.thread is None:
        parser.error("inspect: --checkpoint needs --thread (the thread the checkpoint belongs to)")
    if getattr(args, "port", None) is not None and not 0 <= args.port <= 65535:
        parser.error(f"serve: --port must be from 0 to 65535, got {args.port}")
    try:
        return int(args.handler(args, out))
    except (RxGraphError, sqlite3.DatabaseError) as error:
        print(f"rxgraph {args.command}: error: {error}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # The reader went away (`rxgraph demo | head`): stop quietly, as other command-line tools do.
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - keeps Python from failing again when it flushes at exit
        return 1


_DB_HELP = "an rxgraph SQLite file, or a PostgreSQL database as a URL (postgresql://user@host:port/dbname)"
_SCHEMA_HELP = "with a PostgreSQL --db: the schema of the saver's tables (default: %(default)s)"


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

    inspect = commands.add_parser(
        "inspect",
        help="list a database's threads, one thread's checkpoints, or one checkpoint's values",
        description=(
            "Without --thread: every thread, with its head's seq, source and whether it can take new input. With "
            "--thread: the thread's checkpoints, newest first: seq, id, parent, the node that wrote it, NEXT (the "
            "node(s) a resume runs; '-' when the run ended), source, run, message count and whether the head can "
            "take new input (and why not); a checkpoint that recorded a failed run (source rewind or error) has "
            "its error on the line below it. With --thread and --checkpoint: that checkpoint's metadata and values, "
            "as JSON."
        ),
        epilog=(
            "Values in --checkpoint's JSON: pydantic models (messages, your registered models) as their JSON dump "
            "(model_dump(mode='json')); lists, tuples, FrozenLists and sets as arrays; dicts and FrozenDicts as "
            'objects; bytes as {"$bytes": "<base64>"}; non-finite floats as the strings "nan", "inf" and "-inf".'
        ),
    )
    inspect.add_argument("--db", required=True, help=_DB_HELP)
    inspect.add_argument("--schema", default="rxgraph", help=_SCHEMA_HELP)
    inspect.add_argument("--thread", help="show this thread's checkpoints")
    inspect.add_argument(
        "--checkpoint",
        metavar="ID",
        help="with --thread: print this checkpoint's metadata and values as JSON (an id, or the start of one that "
        "no other checkpoint of the thread shares, as the table shows it)",
    )
    inspect.add_argument(
        "--json", action="store_true", help="print JSON instead of a table (--checkpoint always prints JSON)"
    )
    inspect.set_defaults(handler=_inspect)

    check = commands.add_parser(
        "check",
        help="integrity check, and the threads whose head cannot take new input or whose last run failed",
        description=(
            "Run SQLite's integrity check (on PostgreSQL: open the saver's schema, which checks its version), then "
            "list the threads whose head cannot take new input (their message "
            "history is incomplete, or the head cannot be read; a new run with input starts from their newest "
            "checkpoint that can) and, for information, those whose last run failed, with its error. A thread "
            "without a message history is fine. Exit status 1 when the integrity check fails or the database is no "
            "rxgraph database; the threads listed do not change it."
        ),
    )
    check.add_argument("--db", required=True, help=_DB_HELP)
    check.add_argument("--schema", default="rxgraph", help=_SCHEMA_HELP)
    check.set_defaults(handler=_check)

    serve = commands.add_parser(
        "serve",
        help="serve graphs and agents with LangGraph's server API, and a chat page (needs the serve extra)",
        description=(
            "Serve each [NAME=]MODULE:ATTR as an assistant of LangGraph's server API (its official clients work "
            "against it), with uvicorn until Ctrl+C; a bare MODULE:ATTR is the assistant 'agent'. A run whose client "
            "disconnects from its stream is cancelled and rewound. ATTR is a CompiledGraph or a ReactAgent, or a "
            "function that takes a checkpointer and returns one: each is given the same SqliteSaver on --db (a "
            "PostgresSaver for a postgresql:// URL), or else a MemorySaver. For the first target, if it is an "
            "agent, / is a chat page. Every option can also be set by an environment variable, named in its help."
        ),
        epilog="Try it: rxgraph serve rxgraph.examples.chat:make, then open http://127.0.0.1:8000/",
    )
    serve.add_argument(
        "target",
        metavar="[NAME=]MODULE:ATTR",
        nargs="*",
        default=_env_list("RXGRAPH_TARGETS", " "),
        help="what to serve, e.g. rxgraph.examples.chat:make or approval=pkg.flow:make (MODULE is imported from the "
        "current directory too) [RXGRAPH_TARGETS, space-separated]",
    )
    serve.add_argument(
        "--db",
        metavar="FILE|URL",
        default=os.environ.get("RXGRAPH_DB"),
        help="keep the threads in this SQLite file or PostgreSQL database (postgresql://...; several servers may "
        "share it) (default: in memory) [RXGRAPH_DB]",
    )
    serve.add_argument(
        "--schema", default=os.environ.get("RXGRAPH_SCHEMA", "rxgraph"), help=_SCHEMA_HELP + " [RXGRAPH_SCHEMA]"
    )
    serve.add_argument(
        "--host",
        default=os.environ.get("RXGRAPH_HOST", "127.0.0.1"),
        help="address to listen on (default: %(default)s); another than this machine's needs --auth or --no-auth "
        "[RXGRAPH_HOST]",
    )
    serve.add_argument(
        "--port",
        type=int,
        default=int(os.environ.get("RXGRAPH_PORT", "8000")),
        help="port to listen on; 0 picks a free one (default: %(default)s) [RXGRAPH_PORT]",
    )
    serve.add_argument(
        "--allowed-host",
        action="append",
        metavar="HOST",
        default=_env_list("RXGRAPH_ALLOWED_HOSTS", ","),
        help="a host name clients reach the server by; repeat for several, '*.example.com' for subdomains, '*' for "
        "any (default: 127.0.0.1, localhost, ::1, and --host unless it is 0.0.0.0 or ::); a request for any other "
        "Host is refused with 400 [RXGRAPH_ALLOWED_HOSTS, comma-separated]",
    )
    serve.add_argument(
        "--allowed-origin",
        action="append",
        metavar="ORIGIN",
        default=_env_list("RXGRAPH_ALLOWED_ORIGINS", ","),
        help="an origin (https://app.example.com) whose pages may call the API, with CORS headers; repeat for "
        "several. A browser's request from any other site is refused with 403 [RXGRAPH_ALLOWED_ORIGINS]",
    )
    serve.add_argument(
        "--auth",
        metavar="MODULE:ATTR",
        default=os.environ.get("RXGRAPH_AUTH"),
        help="a function of the request's headers that returns the caller's identity, or None for 401; each thread "
        "is then its creator's alone [RXGRAPH_AUTH]",
    )
    serve.add_argument(
        "--no-auth",
        action="store_true",
        default=_env_flag("RXGRAPH_NO_AUTH"),
        help="listen on another address than this machine's without --auth: anyone who reaches the server reads "
        "and writes every thread [RXGRAPH_NO_AUTH=1]",
    )
    serve.add_argument(
        "--max-body",
        type=int,
        metavar="BYTES",
        default=int(os.environ.get("RXGRAPH_MAX_BODY", str(10 * 1024 * 1024))),
        help="the largest request body; a larger one is refused with 413 (default: %(default)s) [RXGRAPH_MAX_BODY]",
    )
    serve.add_argument(
        "--log-level",
        choices=["critical", "error", "warning", "info", "debug"],
        default=os.environ.get("RXGRAPH_LOG_LEVEL", "info"),
        help="the server's and rxgraph's logging: info logs one line per run's end (default: %(default)s) "
        "[RXGRAPH_LOG_LEVEL]",
    )
    serve.add_argument(
        "--otel",
        action="store_true",
        default=_env_flag("RXGRAPH_OTEL"),
        help="report runs, node calls, model calls and tool calls to the OpenTelemetry providers this process has "
        "(opentelemetry-instrument sets them from OTEL_* variables, and makes its request spans their parents); "
        "needs the otel extra [RXGRAPH_OTEL=1]",
    )
    serve.add_argument(
        "--workers",
        type=int,
        metavar="N",
        default=int(os.environ.get("RXGRAPH_WORKERS", "1")),
        help="serve from N processes; more than one needs a PostgreSQL --db, through which they share threads, "
        "runs and streams (default: %(default)s) [RXGRAPH_WORKERS]",
    )
    serve.set_defaults(handler=_serve)

    draw = commands.add_parser(
        "draw",
        help="print a graph or an agent as a Mermaid flowchart",
        description=(
            "Print MODULE:ATTR as a Mermaid flowchart (CompiledGraph.draw_mermaid()), to paste where Mermaid renders. "
            "ATTR is a CompiledGraph, a StateGraph (compiled without a checkpointer), a ReactAgent (its graph), or "
            "a function that returns one — called with no arguments, or, if it needs one, with a MemorySaver (so "
            "what `rxgraph serve` takes is drawn too). Exit status 2 when MODULE:ATTR names no graph."
        ),
        epilog="Try it: rxgraph draw rxgraph.examples.chat:make",
    )
    draw.add_argument(
        "target",
        metavar="MODULE:ATTR",
        help="what to draw, e.g. rxgraph.examples.chat:make (MODULE is imported from the current directory too)",
    )
    draw.set_defaults(handler=_draw)
    return parser


def _demo(args: argparse.Namespace, out: TextIO) -> int:
    from .examples.demo import run_demo

    if args.cancel_at < 0:
        raise CliError(f"--cancel-at must be >= 0, got {args.cancel_at:g}")
    run_demo(args.db, cancel_at=args.cancel_at, out=out)
    return 0


def _env_list(name: str, separator: str) -> list[str] | None:
    value = os.environ.get(name, "").strip()
    return [item.strip() for item in value.split(separator) if item.strip()] or None


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _serve(args: argparse.Namespace, out: TextIO) -> int:
    try:
        from .serve import run_server
        from .serve._guard import LOOPBACK_HOSTS
    except ImportError as missing:
        raise CliError(
            f"serving needs the serve extra ({missing.name or missing} is not installed): pip install 'rxgraph[serve]'"
        ) from missing
    if not args.target:
        raise CliError("name what to serve: rxgraph serve MODULE:ATTR (or set RXGRAPH_TARGETS)")
    if args.workers < 1:
        raise CliError(f"--workers must be >= 1, got {args.workers}")
    if args.workers > 1 and (args.db is None or not _is_postgres(args.db)):
        raise CliError(
            "--workers above 1 needs a PostgreSQL --db (postgresql://...): the processes share threads, runs and "
            "streams through it"
        )
    if args.max_body < 1:
        raise CliError(f"--max-body must be >= 1 byte, got {args.max_body}")
    loopback = args.host in LOOPBACK_HOSTS
    if args.auth is None and not loopback and not args.no_auth:
        raise CliError(
            f"--host {args.host} without --auth would let anyone who reaches it read and write every thread: give "
            "--auth MODULE:ATTR, or --no-auth to serve so anyway"
        )
    args.allowed_host = args.allowed_host or [
        *LOOPBACK_HOSTS,
        *([args.host] if args.host not in ("0.0.0.0", "::", *LOOPBACK_HOSTS) else []),
    ]
    _log_to_stderr(args.log_level)
    if args.workers > 1:
        _say_serving(args, None, out)
        os.environ.update(_settings_environment(args))
        import uvicorn

        uvicorn.run(
            "rxgraph.cli:_worker_app",
            factory=True,
            host=args.host,
            port=args.port,
            workers=args.workers,
            log_level=args.log_level,
            timeout_graceful_shutdown=5,
        )
        return 0
    app, saver = _serve_app(args)
    try:
        _say_serving(args, saver, out)
        run_server(app, host=args.host, port=args.port, log_level=args.log_level)
    finally:
        if saver is not None:
            saver.close()
    return 0


def _say_serving(args: argparse.Namespace, saver: Any, out: TextIO) -> None:
    where = (
        f"in {_name(saver, args.db)}" if saver is not None else ("in memory" if args.db is None else f"in {args.db}")
    )
    address = f"http://{args.host}:{args.port}/" if args.port else "the address uvicorn shows"
    served = ", ".join(args.target)
    workers = f", {args.workers} processes" if args.workers > 1 else ""
    print(f"rxgraph serve: {served}, threads {where}{workers}; open {address}", file=out)
    print(f"rxgraph serve: answers for host names {', '.join(args.allowed_host)} (--allowed-host to change)", file=out)
    if args.auth is None:
        print(
            "rxgraph serve: no authentication (--auth to add it): whoever reaches this server reads and writes "
            "every thread",
            file=out,
        )
    out.flush()


def _serve_app(args: argparse.Namespace) -> tuple[Any, Any]:
    """The app ``args`` describe, and the saver opened for it (None when there is none)."""
    from .serve import create_app

    auth = _import_target(args.auth) if args.auth is not None else None
    if auth is not None and not callable(auth):
        raise CliError(f"--auth {args.auth} is a {type(auth).__name__}: expected a function of the headers")
    if args.otel:
        from .errors import ConfigurationError
        from .otel import instrument

        try:
            instrument()
        except ConfigurationError as error:
            raise CliError(f"--otel: {error}") from error
    targets, saver = _load_targets(args.target, args.db, args.schema)
    try:
        app = create_app(
            targets,
            auth=auth,
            allowed_hosts=args.allowed_host,
            allowed_origins=args.allowed_origin or (),
            max_body=args.max_body,
        )
    except BaseException:
        if saver is not None:
            saver.close()
        raise
    return app, saver


_SETTINGS = {
    "target": ("RXGRAPH_TARGETS", " "),
    "db": ("RXGRAPH_DB", None),
    "schema": ("RXGRAPH_SCHEMA", None),
    "allowed_host": ("RXGRAPH_ALLOWED_HOSTS", ","),
    "allowed_origin": ("RXGRAPH_ALLOWED_ORIGINS", ","),
    "auth": ("RXGRAPH_AUTH", None),
    "max_body": ("RXGRAPH_MAX_BODY", None),
    "log_level": ("RXGRAPH_LOG_LEVEL", None),
    "otel": ("RXGRAPH_OTEL", None),
}
"""The settings a worker process reads from its environment: each option's variable, and how a list is joined."""


def _settings_environment(args: argparse.Namespace) -> dict[str, str]:
    settings: dict[str, str] = {}
    for option, (name, separator) in _SETTINGS.items():
        value = getattr(args, option)
        if value is None:
            continue
        settings[name] = separator.join(value) if separator is not None else str(value)
    return settings


def _worker_app() -> Any:
    """The app of one of ``rxgraph serve --workers N``'s processes, built from the settings its parent put in the
    environment; its saver is closed when the process exits."""
    import atexit

    args = _parser().parse_args(["serve"])
    _log_to_stderr(args.log_level)
    app, saver = _serve_app(args)
    if saver is not None:
        atexit.register(saver.close)
    return app


def _log_to_stderr(level: str) -> None:
    """rxgraph's log records at ``level`` and above on stderr (a run's end is one INFO line)."""
    import logging

    logger = logging.getLogger("rxgraph")
    logger.setLevel(level.upper())
    if not any(getattr(h, "_rxgraph_serve", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s:     %(name)s: %(message)s"))
        handler._rxgraph_serve = True  # type: ignore[attr-defined]
        logger.addHandler(handler)


def _load_targets(specs: Sequence[str], db: str | None, schema: str) -> tuple[dict[str, Any], Any]:
    """The served targets by name (``NAME=MODULE:ATTR``, a bare ``MODULE:ATTR`` being ``agent``), and the one saver
    opened for them on ``db`` (None when there is none). Every target is found before ``db`` is opened, so a
    command refused for its targets leaves no database behind."""
    from .agent import ReactAgent
    from .checkpoint import MemorySaver
    from .graph import CompiledGraph

    servable = (CompiledGraph, ReactAgent)
    found: dict[str, tuple[str, Any]] = {}
    for spec in specs:
        name, equals, where = spec.partition("=")
        name, where = (name, where) if equals else ("agent", spec)
        if name in found:
            raise CliError(f"two targets are named {name!r}: give each NAME=MODULE:ATTR a name of its own")
        target = _import_target(where)
        if isinstance(target, servable) and db is not None:
            raise CliError(
                f"--db needs a function that takes a checkpointer: {where} is a {type(target).__name__} already, "
                "with the checkpointer it was built with"
            )
        if not isinstance(target, servable) and not callable(target):
            raise CliError(
                f"{where} is a {type(target).__name__}: expected a CompiledGraph, a ReactAgent or a function"
            )
        found[name] = (where, target)
    built = [t.graph if isinstance(t, ReactAgent) else t for _, t in found.values() if isinstance(t, servable)]
    saver = _open(db, schema, create=True) if db is not None else None
    shared = saver if saver is not None else (built[0].checkpointer if built else None) or MemorySaver()
    targets: dict[str, Any] = {}
    try:
        for name, (where, target) in found.items():
            if not isinstance(target, servable):
                target = target(shared)
                if not isinstance(target, servable):
                    raise CliError(
                        f"{where}(checkpointer) returned a {type(target).__name__}: expected a CompiledGraph or a "
                        "ReactAgent"
                    )
            targets[name] = target
    except BaseException:
        if saver is not None:
            saver.close()
        raise
    return targets, saver


def _import_target(spec: str) -> Any:
    """What ``MODULE:ATTR`` names (ATTR may be dotted), MODULE imported from the current directory too."""
    import importlib

    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise CliError(f"expected MODULE:ATTR (e.g. rxgraph.examples.chat:make), got {spec!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` would: modules next to the user are found
    try:
        found: Any = importlib.import_module(module_name)
    except ImportError as error:
        raise CliError(f"cannot import {module_name!r}: {error}") from error
    for name in attribute.split("."):
        if not hasattr(found, name):
            raise CliError(f"{module_name!r} has no attribute {attribute!r}")
        found = getattr(found, name)
    return found


def _draw(args: argparse.Namespace, out: TextIO) -> int:
    try:
        graph = _graph_to_draw(args.target)
    except CliError as error:  # MODULE:ATTR names no graph: a usage error
        print(f"rxgraph draw: error: {error}", file=sys.stderr)
        return 2
    print(graph.draw_mermaid(), file=out)
    return 0


def _graph_to_draw(spec: str) -> CompiledGraph:
    """The ``CompiledGraph`` ``MODULE:ATTR`` names: itself, a ``StateGraph`` compiled, a ``ReactAgent``'s graph, or
    what a function returns (called with no arguments, or with a ``MemorySaver`` if it needs one)."""
    from .agent import ReactAgent
    from .checkpoint import MemorySaver
    from .errors import ConfigurationError
    from .graph import CompiledGraph, StateGraph

    drawable = (CompiledGraph, StateGraph, ReactAgent)
    expected = "a CompiledGraph, a StateGraph, a ReactAgent or a function that returns one"
    found = _import_target(spec)
    if not isinstance(found, drawable):
        if not callable(found):
            raise CliError(f"{spec} is a {type(found).__name__}: expected {expected}")
        try:
            signature: Signature | None = Signature.from_callable(found)
        except (TypeError, ValueError):
            signature = None
        if signature is None or _accepts(signature):
            found = found()
        elif _accepts(signature, None):
            found = found(MemorySaver())
        else:
            raise CliError(f"{spec} needs arguments: expected {expected}, callable with no arguments")
        if not isinstance(found, drawable):
            raise CliError(f"{spec}() returned a {type(found).__name__}: expected {expected}")
    if isinstance(found, ReactAgent):
        return found.graph
    if isinstance(found, StateGraph):
        try:
            return found.compile()
        except ConfigurationError as error:
            raise CliError(f"{spec} gives a StateGraph that does not compile: {error}") from error
    return found


def _accepts(signature: Signature, *arguments: Any) -> bool:
    """Whether a function of ``signature`` can be called with ``arguments``."""
    try:
        signature.bind(*arguments)
    except TypeError:
        return False
    return True


def _is_postgres(db: str) -> bool:
    return db.startswith(("postgresql://", "postgres://"))


def _open(db: str, schema: str, *, create: bool = False) -> Any:
    """A saver on ``db``: a PostgresSaver for a ``postgresql://`` URL, else a SqliteSaver on an existing file (or a
    new one, with ``create``)."""
    if _is_postgres(db):
        try:
            import psycopg

            from .checkpoint import PostgresSaver
        except ImportError as missing:
            raise CliError(
                f"a PostgreSQL --db needs the postgres extra ({missing.name or missing} is not installed): "
                "pip install 'rxgraph[postgres]'"
            ) from missing
        try:
            return PostgresSaver(db, schema=schema)
        except psycopg.Error as error:
            raise CliError(f"cannot open the PostgreSQL database: {error}".strip()) from error
    from .checkpoint import SqliteSaver

    path = Path(db)
    if not create and not path.is_file():
        raise CliError(f"no such database file: {db}")
    return SqliteSaver(path)


def _name(saver: Any, db: str) -> str:
    """How messages name the database: a PostgreSQL one without its password."""
    where = getattr(saver, "where", None)
    return f"{where} (schema {saver.schema})" if isinstance(where, str) else db


def _inspect(args: argparse.Namespace, out: TextIO) -> int:
    saver = _open(args.db, args.schema)
    db = _name(saver, args.db)
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
                            "head_seq": error.seq,
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
        if args.checkpoint is not None:
            checkpoint = _find_checkpoint(saver, db, args.thread, args.checkpoint)
            document = {"metadata": {"thread_id": checkpoint.thread_id, **checkpoint_metadata(checkpoint)}}
            document["values"] = {key: to_json(value) for key, value in checkpoint.values.items()}
            json.dump(document, out, indent=2, allow_nan=False)
            out.write("\n")
            return 0
        checkpoints = saver.list(args.thread)
        if not checkpoints:
            raise _no_thread(saver, db, args.thread)
        summaries = [checkpoint_metadata(c) for c in checkpoints]
        if args.json:
            json.dump({"thread_id": args.thread, "checkpoints": summaries}, out, indent=2)
            out.write("\n")
            return 0
        _table(
            out,
            ["SEQ", "ID", "PARENT", "NODE", "NEXT", "SOURCE", "RUN", "MSGS", "SAFE"],
            [
                [
                    s["seq"],
                    s["id"][:12],
                    (s["parent_id"] or "-")[:12],
                    s["node"] or "-",
                    ",".join(s["next"]) or "-",
                    s["source"],
                    s["run_id"][:8],
                    "-" if s["messages"] is None else s["messages"],
                    "yes" if s["safe"] else f"NO: {s['unsafe_reason']}",
                ]
                for s in summaries
            ],
            notes=[_note(s) for s in summaries],
        )
        return 0
    finally:
        saver.close()


def _note(summary: Mapping[str, Any]) -> str | None:
    """The line under a checkpoint's row: its error, or the interrupt it waits on."""
    if summary["error"] is not None:
        return f"error: {_continued(summary['error'], '      ')}"
    waiting = (summary["pending"] or {}).get("interrupt")
    if waiting is not None:
        asked = json.dumps(waiting["value"], ensure_ascii=False)
        return f"waits: interrupt {waiting['when']} {waiting['node']!r}, asking {_continued(asked, '      ')}"
    return None


def _check(args: argparse.Namespace, out: TextIO) -> int:
    if _is_postgres(args.db):
        saver = _open(args.db, args.schema)  # opening checks the schema: ours, and a version this rxgraph reads
        print(f"schema: ok ({_name(saver, args.db)}, version {saver.schema_version})", file=out)
    else:
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
        saver = _open(args.db, args.schema)
    try:
        threads = sorted(saver.threads())
        incomplete, unreadable, failed = 0, 0, 0
        notes: list[tuple[str, str]] = []
        for thread in threads:
            try:
                head = saver.get(thread)
            except CheckpointDecodeError as error:
                unreadable += 1
                notes.append((thread, f"the head cannot be read: {error}"))
                continue
            if head is None:
                continue
            if not head.safe:
                incomplete += 1
                notes.append((thread, f"head seq {head.seq}: {head.unsafe_reason}"))
            waiting = (head.pending or {}).get("interrupt")
            if waiting is not None:
                notes.append(
                    (thread, f"waits on an interrupt {waiting['when']} {waiting['node']!r} (head seq {head.seq})")
                )
            if head.error is not None:
                failed += 1
                error_text = _continued(head.error, "      ")
                notes.append((thread, f"last run failed: {error_text} (head seq {head.seq}, {head.source})"))
        verdict = (
            f"{len(threads)} thread(s), {incomplete} whose head cannot take new input (their message history is "
            "incomplete)"
        )
        if unreadable:
            verdict += f", {unreadable} whose head cannot be read"
        if failed:
            verdict += f", {failed} whose last run failed"
        print(verdict, file=out)
        for thread, note in notes:
            print(f"  {thread}: {note}", file=out)
        if incomplete or unreadable:
            print(
                "(a new run with input on a thread whose head cannot take it starts from the thread's newest "
                "checkpoint that can)",
                file=out,
            )
        return 0
    finally:
        saver.close()


def _no_thread(saver: CheckpointSaver, db: str, thread: str) -> CliError:
    return CliError(f"no thread {thread!r} in {db} (threads: {', '.join(sorted(saver.threads())) or 'none'})")


def _find_checkpoint(saver: CheckpointSaver, db: str, thread: str, wanted: str) -> Checkpoint:
    """The thread's checkpoint with id ``wanted``, or else the one whose id starts with it (the table shortens ids)."""
    found = saver.get(thread, wanted)
    if found is not None:
        return found
    checkpoints = saver.list(thread)
    if not checkpoints:
        raise _no_thread(saver, db, thread)
    matches = [c for c in checkpoints if c.id.startswith(wanted)] if wanted else []
    if len(matches) > 1:
        ids = ", ".join(f"{c.id} (seq {c.seq})" for c in matches)
        raise CliError(f"{wanted!r} is the start of several checkpoint ids in thread {thread!r}: {ids}")
    if not matches:
        raise CliError(
            f"no checkpoint {wanted!r} in thread {thread!r} of {db} (it has seq 1 to {checkpoints[0].seq}; "
            f"`rxgraph inspect --db {db} --thread {thread}` lists their ids)"
        )
    return matches[0]


def _continued(text: str, indent: str) -> str:
    """``text`` with its second and later lines indented, to stay under the line it starts on (an error's message
    may span lines)."""
    return text.replace("\n", "\n" + indent)


def _read_only(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)


def _table(out: TextIO, header: list[str], rows: list[list[Any]], notes: Sequence[str | None] = ()) -> None:
    """Print ``rows`` under ``header`` in aligned columns; a row's note, if any, on an indented line below it."""
    cells = [header, *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    below = [None, *notes, *[None] * (len(rows) - len(notes))]
    for row, note in zip(cells, below, strict=True):
        print("  ".join(value.ljust(width) for value, width in zip(row, widths, strict=True)).rstrip(), file=out)
        if note is not None:
            print(f"    {note}", file=out)


if __name__ == "__main__":
    raise SystemExit(main())
