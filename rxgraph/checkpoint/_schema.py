"""What the schemas of both database savers share: how a version is read from their ``meta`` table, refused when it
is newer than this code, and brought up to date by migrations, one version at a time."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any, TypeVar

from ..errors import IncompatibleDatabaseError

__all__ = ["FORMAT", "check_not_newer", "migrate", "stored_version"]

_C = TypeVar("_C")

FORMAT = "rxgraph.checkpoints"
"""The ``format`` row of a ``meta`` table: what marks a database (or a schema of one) as rxgraph checkpoints."""


def stored_version(meta: Mapping[str, Any], *, where: str, path: str, foreign: str) -> int:
    """The schema version a ``meta`` table's rows record.

    Raises:
        IncompatibleDatabaseError: the rows are not ours (``foreign`` is the message) or hold no valid version.
    """
    if meta.get("format") != FORMAT:
        raise IncompatibleDatabaseError(foreign, path=path)
    raw = meta.get("schema_version")
    try:
        return int(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise IncompatibleDatabaseError(
            f"{where}: the meta table has no valid schema_version ({raw!r})", path=path
        ) from None


def check_not_newer(version: int | None, current: int, *, where: str, path: str) -> None:
    """Raise ``IncompatibleDatabaseError`` when ``version`` was written by a newer rxgraph than this one
    (``current``)."""
    if version is not None and version > current:
        raise IncompatibleDatabaseError(
            f"{where}: schema version {version} was written by a newer rxgraph; this one knows versions up to "
            f"{current}. Upgrade rxgraph to open it.",
            path=path,
        )


def migrate(
    conn: _C,
    version: int,
    current: int,
    migrations: Mapping[int, Callable[[_C], None]],
    *,
    record: Callable[[int], object],
    errors: tuple[type[BaseException], ...],
    where: str,
    path: str,
    each: Callable[[], AbstractContextManager[Any]] = nullcontext,
) -> int:
    """Run the migrations from ``version`` up to ``current`` on ``conn``, in the caller's transaction; return
    ``current``.

    Args:
        conn: the connection the migrations get.
        version, current: the stored version, and the one this code writes.
        migrations: ``{v: migration from v to v + 1}``.
        record: writes a new version to the meta table, after each migration.
        errors: the driver's errors, which make a migration count as failed.
        where, path: the database in messages, and the ``path`` of the errors.
        each: a context manager around each migration (a savepoint, say).

    Raises:
        IncompatibleDatabaseError: a migration is missing or failed (the caller's transaction then rolls back).
    """
    while version < current:
        step = migrations.get(version)
        if step is None:
            raise IncompatibleDatabaseError(
                f"{where}: schema version {version} is older than {current} and no migration from version {version} "
                "is registered",
                path=path,
            )
        try:
            with each():
                step(conn)
        except errors as error:
            raise IncompatibleDatabaseError(
                f"{where}: the migration from schema version {version} failed: {error}", path=path
            ) from error
        version += 1
        record(version)
    return version
