"""The half of an incremental checkpoint saver that does not depend on its database: what a ``put`` writes, the
caches, and how rows are decoded back into checkpoints. ``SqliteSaver`` and ``PostgresSaver`` each add the other half
(their SQL, connections and transactions) and share this one.

Storage is incremental: a checkpoint row holds only a *manifest* (state key -> blob id, or -> the tail item and
length of a list), so writing a step costs what changed in it, not the length of the conversation:

- a list value (``FrozenList``, the value of an ``APPEND`` key) is a persistent linked list of *items*; when the new
  list extends its parent checkpoint's list, only the new items are written, linked to the parent's tail;
- any other value is a *blob*; a value that is the very object the parent (or another recently stored or read
  checkpoint) had reuses that blob.

A database gives the store its rows through :class:`Rows` (a few queries on one connection) and writes what
:meth:`IncrementalStore.plan` decided with ids of its own choosing (:meth:`Plan.assign`).

Retention (``prune``, ``delete_thread``) deletes checkpoint rows and frees the items and blobs no remaining
checkpoint reaches. Three rules keep that safe while other savers (other processes) hold caches of rows:

- rows belong to one thread: a put reuses only rows of its own thread's checkpoints, so freeing a thread's rows
  never breaks another thread, and :meth:`IncrementalStore.retention` decides from one thread's manifests alone;
- a database never gives an id twice (PostgreSQL's sequence; SQLite's floor in ``meta``), so a cached id always
  means the row it was cached for, or no row at all;
- a put that reuses rows another checkpoint than the thread's head has (a rewind to an older state, say) checks
  that they still exist, inside its transaction and after its compare-and-set (:meth:`IncrementalStore.confirm`),
  and writes the values again when they do not. The head's own rows need no check: retention never frees them.
"""

from __future__ import annotations

import abc
import builtins
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType, TracebackType
from typing import Any, Generic, Protocol, Self, TypeAlias, TypeVar

from .._frozen import FrozenList
from .._log import log
from ..errors import CheckpointDecodeError, DecodeError
from ._base import Checkpoint, CheckpointSaver, new_checkpoint
from ._serde import Serde, json_text, parse_json_text
from .contract import select_pruned

__all__ = [
    "COLUMNS",
    "Entry",
    "IncrementalSaver",
    "IncrementalStats",
    "IncrementalStore",
    "Lru",
    "Plan",
    "Ref",
    "Retention",
    "Row",
    "Rows",
    "checkpoint_row",
]

_K = TypeVar("_K")
_V = TypeVar("_V")

Ref: TypeAlias = int | tuple[int | None, int]
"""Where a stored value lives: a blob id, or (tail item id, length) for a list (tail None for an empty list)."""

Row: TypeAlias = tuple[Any, ...]
"""A checkpoint row: the columns of :data:`COLUMNS`, in that order (``safe`` a bool or an int)."""

COLUMNS = (
    "id, thread_id, seq, parent_id, node, next, run_id, source, created_at, safe, unsafe_reason, rolled_back_from, "
    "manifest, error, pending"
)
"""The columns of a checkpoint row, in the order :func:`checkpoint_row` gives them and :class:`Rows` returns them."""

_MISSING: Any = object()


class Rows(Protocol):
    """The reads an incremental store makes, on one connection of a database, during one call of its saver."""

    def head(self, thread_id: str) -> Row | None:
        """The thread's row with the highest seq, if any."""

    def by_id(self, checkpoint_id: str) -> Row | None:
        """The row of a checkpoint id (in any thread), if any."""

    def page(self, thread_id: str, before_seq: int | None, limit: int | None) -> builtins.list[Row]:
        """The thread's rows with ``seq < before_seq`` (any, for None), newest first, at most ``limit``."""

    def newest_safe(self, thread_id: str, before_seq: int | None) -> Row | None:
        """The thread's newest row whose ``safe`` is set, with ``seq < before_seq`` (any, for None)."""

    def blobs(self, ids: builtins.list[int]) -> builtins.list[tuple[int, str]]:
        """``(id, text)`` of the blobs among ``ids`` that exist, in any order."""

    def walk(self, tail: int, count: int) -> builtins.list[tuple[int | None, str]]:
        """``(prev_id, text)`` of at most ``count`` items, from ``tail`` back along ``prev_id``, oldest first."""

    def count_rows(self, blob_ids: builtins.list[int], item_ids: builtins.list[int]) -> int:
        """How many of these blobs and items exist (each id counted once)."""


@dataclass(slots=True)
class IncrementalStats:
    """Counters of one incremental saver since it was opened (for tests, benchmarks and monitoring).

    ``bytes_written`` is the size of the payload a saver inserted: the characters of every JSON value, manifest and
    text column, plus 8 per integer column (16 per item, for its id and link). The database adds its own page and
    index overhead on top.
    """

    puts: int = 0
    bytes_written: int = 0
    items_written: int = 0
    blobs_written: int = 0
    checkpoints_decoded: int = 0
    items_decoded: int = 0
    blobs_decoded: int = 0


class IncrementalSaver(CheckpointSaver):
    """A saver whose checkpoints an :class:`IncrementalStore` keeps in a database: ``close`` it when done, or use it
    as a context manager, which closes it."""

    @abc.abstractmethod
    def close(self) -> None:
        """Let go of the database; later calls raise ``SaverClosedError``, and closing again does nothing."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class Lru(Generic[_K, _V]):
    """A small least-recently-used map, safe to share between threads."""

    __slots__ = ("_capacity", "_data", "_lock")

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._data: OrderedDict[_K, _V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: _K, default: _V | None = None) -> _V | None:
        with self._lock:
            data = self._data
            value = data.get(key, _MISSING)
            if value is _MISSING:
                return default
            data.move_to_end(key)
            return value  # type: ignore[no-any-return]

    def put(self, key: _K, value: _V) -> None:
        with self._lock:
            data = self._data
            data[key] = value
            data.move_to_end(key)
            if len(data) > self._capacity:
                data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def discard(self, doomed: Callable[[_K, _V], bool]) -> None:
        """Remove every entry for which ``doomed(key, value)`` is true."""
        with self._lock:
            data = self._data
            for key in [key for key, value in data.items() if doomed(key, value)]:
                del data[key]


class Entry:
    """A checkpoint a saver stored or read, with where each of its values lives and the row it was stored as.

    The row tells a cached entry from a checkpoint stored since under the same id (a thread deleted, then written
    again with the ids it had): the cache serves a row only the entry it was made from.
    """

    __slots__ = ("checkpoint", "refs", "row")

    def __init__(self, checkpoint: Checkpoint, refs: dict[str, Ref], row: Row) -> None:
        self.checkpoint = checkpoint
        self.refs = refs
        self.row = row


class Plan:
    """What one ``put`` writes, decided before its transaction: the refs it reuses, the blobs and the list items it
    inserts (already encoded). The database gives the new rows their ids with :meth:`assign`."""

    __slots__ = ("blobs", "borrowed_blobs", "borrowed_items", "chains", "head_manifest", "pending", "refs", "values")

    def __init__(
        self,
        values: Mapping[str, Any],
        refs: dict[str, Ref],
        blobs: builtins.list[tuple[str, str]],
        chains: builtins.list[tuple[str, int | None, builtins.list[str], int]],
    ) -> None:
        self.values = values
        self.refs = refs
        self.blobs = blobs  # (key, text)
        self.chains = chains  # (key, tail to link to, texts of the new items, length of the whole list)
        # Rows reused from a checkpoint other than the expected head, which retention may have freed since.
        self.borrowed_blobs: set[int] = set()
        self.borrowed_items: set[int] = set()
        # The manifest of the expected head as this plan knows it (its rows are taken as there), or None.
        self.head_manifest: str | None = None
        self.pending: str | None = None  # the checkpoint's pending work, encoded (the row's `pending` column)

    @property
    def new_rows(self) -> int:
        """How many rows (blobs and items) the put inserts."""
        return len(self.blobs) + sum(len(texts) for _, _, texts, _ in self.chains)

    def assign(
        self, blob_ids: Iterator[int], item_ids: Iterator[int]
    ) -> tuple[dict[str, Ref], builtins.list[tuple[int, str]], builtins.list[tuple[int, int | None, str]], int]:
        """Give the new rows their ids, each taken in turn from the iterators (which may be the same one).

        Returns:
            The refs of every key, in the order of the state's keys (the manifest); the blob rows ``(id, text)``;
            the item rows ``(id, prev_id, text)``, each linked to the one before it; and the payload bytes of
            those rows (see :class:`IncrementalStats`).
        """
        refs = dict(self.refs)
        written = 0
        blob_rows: builtins.list[tuple[int, str]] = []
        for key, text in self.blobs:
            blob_id = next(blob_ids)
            blob_rows.append((blob_id, text))
            refs[key] = blob_id
            written += len(text) + 8
        item_rows: builtins.list[tuple[int, int | None, str]] = []
        for key, tail, texts, length in self.chains:
            for text in texts:
                item_id = next(item_ids)
                item_rows.append((item_id, tail, text))
                written += len(text) + 16
                tail = item_id
            refs[key] = (tail, length)
        return {key: refs[key] for key in self.values}, blob_rows, item_rows, written


class IncrementalStore:
    """Plans what a ``put`` writes, keeps the caches, and reads checkpoints back from :class:`Rows`.

    Thread-safe: the caches lock themselves, and nothing is held while a database is read. ``stats`` are its
    counters (give it the saver's own :class:`IncrementalStats` subclass). Errors of ``database_errors`` types raised
    by a :class:`Rows` pass through as they are: a lock or I/O problem is not a damaged checkpoint.
    """

    def __init__(
        self,
        serde: Serde,
        cache_size: int,
        stats: IncrementalStats,
        database_errors: tuple[type[BaseException], ...],
    ) -> None:
        self.serde = serde
        self.stats = stats
        self._database_errors = database_errors
        self._stats_lock = threading.Lock()
        self._by_id: Lru[str, Entry] = Lru(cache_size)
        self._heads: Lru[str, str] = Lru(cache_size)  # thread id -> id of the newest head this store saw
        self._blob_values: Lru[int, Any] = Lru(4 * cache_size)
        self._list_values: Lru[int, FrozenList[Any]] = Lru(4 * cache_size)  # tail item id -> the list
        # id(value) -> (value, ref, thread id): finds the row of a value this store stored or read, by identity.
        # Holding the value keeps its id from being reused while it is in the map.
        self._known: Lru[int, tuple[Any, Ref, str]] = Lru(4 * cache_size)

    def clear(self) -> None:
        """Drop every cached checkpoint and value."""
        for cache in (self._by_id, self._heads, self._blob_values, self._list_values, self._known):
            cache.clear()

    # -- reading -----------------------------------------------------------------------------------------------

    def get(self, rows: Rows, thread_id: str, checkpoint_id: str | None) -> Checkpoint | None:
        """``CheckpointSaver.get`` on ``rows``."""
        if checkpoint_id is None:
            while True:
                # One indexed query even on a cache hit: another process may have moved the head.
                row = rows.head(thread_id)
                if row is None:
                    return None
                previous = self._heads.get(thread_id)
                entry = self._entry_or_gone(row, self._by_id.get(previous) if previous is not None else None, rows)
                if entry is not None:  # else the thread was deleted meanwhile: look again
                    self._heads.put(thread_id, row[0])
                    return entry.checkpoint
        # One indexed query even on a cache hit: another process may have pruned it. A checkpoint's rows never
        # change while it exists, so a cached one is otherwise current.
        row = rows.by_id(checkpoint_id)
        if row is None or row[1] != thread_id:
            return None
        entry = self._entry_or_gone(row, None, rows)
        return entry.checkpoint if entry is not None else None

    def list(self, rows: Rows, thread_id: str, limit: int | None, before_seq: int | None) -> builtins.list[Checkpoint]:
        """``CheckpointSaver.list`` on ``rows`` (``limit`` already checked)."""
        page = rows.page(thread_id, before_seq, limit)
        # Oldest first, so that each list is read as an extension of the previous checkpoint's (usually a few
        # items) rather than from scratch.
        result: builtins.list[Checkpoint] = []
        hint: Entry | None = None
        for row in reversed(page):
            entry = self._entry_or_gone(row, hint, rows)
            if entry is not None:  # else pruned since the page was read
                hint = entry
                result.append(entry.checkpoint)
        result.reverse()
        return result

    def latest_safe(self, rows: Rows, thread_id: str, before_seq: int | None) -> Checkpoint | None:
        """``CheckpointSaver.latest_safe`` on ``rows``, one indexed query per checkpoint looked at. A checkpoint that
        cannot be decoded is skipped with a warning: it cannot be the base of a new turn."""
        while True:
            row = rows.newest_safe(thread_id, before_seq)
            if row is None:
                return None
            try:
                entry = self._entry_or_gone(row, None, rows)
            except CheckpointDecodeError as error:
                log.warning("thread %r: skipping checkpoint %s (seq %d): %s", thread_id, row[0], row[2], error)
            else:
                if entry is not None:
                    return entry.checkpoint
            before_seq = row[2]

    def _entry_for(self, row: Row, hint: Entry | None, rows: Rows) -> Entry:
        """The cached entry of a checkpoint row, or the row decoded (and cached). ``hint``: a checkpoint whose lists
        this one probably extends (read first, so only the new items are fetched)."""
        cached = self._by_id.get(row[0])
        if cached is not None and cached.row == row:
            return cached
        entry = self._decode(row, hint, rows)
        self._remember(entry)
        return entry

    def _entry_or_gone(self, row: Row, hint: Entry | None, rows: Rows) -> Entry | None:
        """:meth:`_entry_for`, or None when the checkpoint was deleted (pruned) after its row was read: its rows may
        have been freed while it was decoded, which is no damage."""
        try:
            return self._entry_for(row, hint, rows)
        except CheckpointDecodeError:
            if rows.by_id(row[0]) is None:
                return None
            raise

    def _decode(self, row: Row, hint: Entry | None, rows: Rows) -> Entry:
        cid, thread_id, seq, parent_id, node, next_json, run_id, source, created_at, safe, unsafe, rolled, manifest = (
            row[:13]
        )
        error, pending_text = row[13], row[14]
        try:
            refs = _manifest_refs(manifest)
            blob_ids = [ref for ref in refs.values() if type(ref) is int]
            blob_values = self._read_blobs(blob_ids, rows) if blob_ids else {}
            values: dict[str, Any] = {}
            for key, ref in refs.items():
                if isinstance(ref, int):
                    values[key] = blob_values[ref]
                else:
                    values[key] = self._read_list(ref[0], ref[1], _list_hint(hint, key), rows)
            checkpoint = new_checkpoint(
                id=cid,
                thread_id=thread_id,
                seq=seq,
                parent_id=parent_id,
                values=MappingProxyType(values),
                node=node,
                next=tuple(json.loads(next_json)),
                run_id=run_id,
                source=source,
                created_at=datetime.fromisoformat(created_at),
                safe=bool(safe),
                unsafe_reason=unsafe,
                rolled_back_from=rolled,
                error=error,
                pending=self.serde.loads(pending_text) if pending_text is not None else None,
            )
        except self._database_errors:
            raise  # a lock or I/O problem is not a damaged checkpoint: never let it be skipped as one
        except Exception as error:
            raise CheckpointDecodeError(
                f"thread {thread_id!r}: checkpoint {cid!r} (seq {seq}) cannot be decoded: {error}",
                thread_id=thread_id,
                checkpoint_id=cid,
                seq=seq if isinstance(seq, int) else None,
            ) from error
        self._count(checkpoints_decoded=1)
        return Entry(checkpoint, refs, row)

    def _read_blobs(self, ids: builtins.list[int], rows: Rows) -> dict[int, Any]:
        pool = self._blob_values
        found: dict[int, Any] = {}
        missing: builtins.list[int] = []
        for blob_id in ids:
            value = pool.get(blob_id, _MISSING)
            if value is _MISSING:
                missing.append(blob_id)
            else:
                found[blob_id] = value
        if missing:
            read = rows.blobs(sorted(set(missing)))
            decoded = self.serde.loads_many(text for _, text in read)
            for (blob_id, _), value in zip(read, decoded, strict=True):
                found[blob_id] = value
            self._count(blobs_decoded=len(read))
        for blob_id in missing:
            if blob_id not in found:
                raise DecodeError(f"blob {blob_id} is missing")
        return found

    def _read_list(
        self, tail: int | None, length: int, hint: tuple[int, int, FrozenList[Any]] | None, rows: Rows
    ) -> Any:
        if length == 0:
            return FrozenList()
        assert tail is not None
        pooled = self._list_values.get(tail)
        if pooled is not None and len(pooled) == length:
            return pooled
        if hint is not None:
            hint_tail, hint_length, hint_list = hint
            if hint_length < length:
                items = self._walk(tail, length - hint_length, rows)
                if len(items) == length - hint_length and items[0][0] == hint_tail:
                    return hint_list.extended(self.serde.loads_many(text for _, text in items))
        items = self._walk(tail, length, rows)
        if len(items) != length or items[0][0] is not None:
            raise DecodeError(f"the list ending at item {tail} does not have the {length} items its manifest says")
        return FrozenList(self.serde.loads_many(text for _, text in items))

    def _walk(self, tail: int, count: int, rows: Rows) -> builtins.list[tuple[int | None, str]]:
        items = rows.walk(tail, count)
        self._count(items_decoded=len(items))
        return items

    # -- writing -----------------------------------------------------------------------------------------------

    def parent(self, rows: Rows, parent_id: str | None) -> Entry | None:
        """The parent of a checkpoint to put, with its refs: from the cache, else read from ``rows`` (once)."""
        if parent_id is None:
            return None
        entry = self._by_id.get(parent_id)
        if entry is not None:
            return entry
        row = rows.by_id(parent_id)
        if row is None:
            return None
        try:
            return self._entry_or_gone(row, None, rows)
        except CheckpointDecodeError as error:
            # Not fatal for the write: its values are then stored in full instead of as changes.
            log.warning("parent checkpoint %s cannot be read, storing the new one in full: %s", parent_id, error)
            return None

    def plan(self, checkpoint: Checkpoint, parent: Entry | None, expected_head: str | None) -> Plan:
        """Decide, key by key, what a put of ``checkpoint`` reuses and what it writes; encode what it writes.

        Only rows of the checkpoint's own thread are reused. Those of a checkpoint other than ``expected_head`` are
        noted as borrowed, for :meth:`confirm`.

        Raises:
            SerializationError: a value cannot be stored exactly.
        """
        thread_id = checkpoint.thread_id
        if parent is not None and parent.checkpoint.thread_id != thread_id:
            parent = None
        own: set[Ref] = set()  # the refs of the expected head: retention never frees them
        if parent is not None and parent.checkpoint.id == expected_head:
            own.update(parent.refs.values())
        serde = self.serde
        known = self._known
        parent_values: Mapping[str, Any] = parent.checkpoint.values if parent is not None else {}
        refs: dict[str, Ref] = {}
        blobs: builtins.list[tuple[str, str]] = []
        chains: builtins.list[tuple[str, int | None, builtins.list[str], int]] = []
        borrowed: builtins.list[Ref] = []
        for key, value in checkpoint.values.items():
            old = parent_values.get(key, _MISSING)
            if value is old:
                refs[key] = parent.refs[key]  # type: ignore[union-attr]
                borrowed.append(refs[key])
                continue
            seen = known.get(id(value))
            if seen is not None and seen[0] is value and seen[2] == thread_id:
                refs[key] = seen[1]
                borrowed.append(refs[key])
                continue
            if type(value) is not FrozenList:
                blobs.append((key, serde.dumps(value, key=key)))
                continue
            start, tail = 0, None
            if type(old) is FrozenList and len(old) <= len(value):
                old_ref = parent.refs[key]  # type: ignore[union-attr]
                # Shared storage proves the prefix for free; otherwise (the parent was read from disk, or the list
                # was rebuilt) compare item by item, which costs less than rewriting the history.
                if isinstance(old_ref, tuple) and (
                    value.shares_prefix_with(old) or _has_prefix(value, old, serde, key)
                ):
                    start, tail = len(old), old_ref[0]
                    borrowed.append(old_ref)
            texts = [serde.dumps(value[i], key=key, index=i) for i in range(start, len(value))]
            chains.append((key, tail, texts, len(value)))
        plan = Plan(checkpoint.values, refs, blobs, chains)
        if checkpoint.pending:
            plan.pending = serde.dumps(dict(checkpoint.pending), key="pending")
        if own:
            plan.head_manifest = parent.row[12]  # type: ignore[union-attr]
        for ref in borrowed:
            if ref in own:
                continue
            if isinstance(ref, int):
                plan.borrowed_blobs.add(ref)
            elif ref[0] is not None:
                plan.borrowed_items.add(ref[0])
        return plan

    def confirm(
        self, plan: Plan, rows: Rows, checkpoint: Checkpoint, expected_head: str | None, head_manifest: str | None
    ) -> Plan:
        """``plan``, when the rows it reuses are still there; else a new plan that reuses none that are gone.

        Call it in the put's transaction, once its compare-and-set holds the thread (a retention of the thread then
        waits for the put, or has finished): what exists then stays until the put commits. ``head_manifest`` is
        the manifest of the thread's head as the transaction read it (None for a new thread).
        """
        stale_head = plan.head_manifest is not None and plan.head_manifest != head_manifest
        if not (stale_head or plan.borrowed_blobs or plan.borrowed_items):
            return plan
        wanted = len(plan.borrowed_blobs) + len(plan.borrowed_items)
        if not stale_head and rows.count_rows(sorted(plan.borrowed_blobs), sorted(plan.borrowed_items)) == wanted:
            return plan
        # Retention freed some of them since they were cached: forget what is known of the thread, and plan again
        # from its parent as it is stored now (its rows, read under the lock, are there).
        self.forget(checkpoint.thread_id, [] if checkpoint.parent_id is None else [checkpoint.parent_id])
        return self.plan(checkpoint, self.parent(rows, checkpoint.parent_id), expected_head)

    def stored(
        self, checkpoint: Checkpoint, refs: dict[str, Ref], row: Row, *, written: int, items: int, blobs: int
    ) -> None:
        """Record a committed put of ``checkpoint`` as ``row``: cache it (only now may later writes refer to its
        rows) and count it."""
        self._remember(Entry(checkpoint, refs, row))
        self._heads.put(checkpoint.thread_id, checkpoint.id)
        self._count(puts=1, bytes_written=written, items_written=items, blobs_written=blobs)

    def _remember(self, entry: Entry) -> None:
        """Cache a stored or decoded checkpoint and make its values findable by identity and by row."""
        self._by_id.put(entry.checkpoint.id, entry)
        values = entry.checkpoint.values
        thread_id = entry.checkpoint.thread_id
        known = self._known
        for key, ref in entry.refs.items():
            value = values[key]
            known.put(id(value), (value, ref, thread_id))
            if isinstance(ref, tuple):
                if ref[0] is not None:
                    self._list_values.put(ref[0], value)
            else:
                self._blob_values.put(ref, value)

    # -- retention ---------------------------------------------------------------------------------------------

    def retention(
        self,
        thread_id: str,
        history: Sequence[Row],
        *,
        keep_last: int | None = None,
        before: datetime | None = None,
        everything: bool = False,
    ) -> Retention:
        """What a ``prune`` (or, with ``everything``, a ``delete_thread``) of one thread removes.

        Args:
            thread_id: the thread.
            history: its rows, newest first, as ``(id, seq, safe, created_at, manifest)``.
            keep_last, before: as ``prune`` takes them (already checked).
            everything: drop every checkpoint.
        """
        if everything:
            dropped = {row[1] for row in history}
        else:
            times = [(seq, bool(safe), _time(created_at)) for _, seq, safe, created_at, _ in history]
            dropped = set(select_pruned(times, keep_last=keep_last, before=before))
        retention = Retention()
        dead: tuple[set[int], set[int]] = (set(), set())  # blobs, tails
        live: tuple[set[int], set[int]] = (set(), set())
        for cid, seq, _, _, manifest in history:
            gone = seq in dropped
            if gone:
                retention.ids.append(cid)
                retention.seqs.append(seq)
            try:
                refs = _manifest_refs(manifest)
            except DecodeError as error:
                # Its rows cannot be told: a dropped one's stay; a kept one's might be any, so nothing is freed.
                log.warning(
                    "thread %r: the manifest of checkpoint %s cannot be read (%s); %s",
                    thread_id,
                    cid,
                    error,
                    "its rows stay" if gone else "no rows are freed",
                )
                retention.collect = retention.collect and gone
                continue
            blobs, tails = dead if gone else live
            for ref in refs.values():
                if isinstance(ref, int):
                    blobs.add(ref)
                elif ref[0] is not None:
                    tails.add(ref[0])
        retention.dead_blobs = sorted(dead[0] - live[0])
        retention.dead_tails = sorted(dead[1] - live[1])
        retention.live_tails = sorted(live[1])
        return retention

    def forget(self, thread_id: str, checkpoint_ids: Sequence[str], *, thread_gone: bool = False) -> None:
        """Drop from the caches what a retention of ``thread_id`` may have invalidated: the checkpoints it
        removed, and every value of the thread known by identity (its rows may have been freed)."""
        removed = set(checkpoint_ids)
        if removed:
            self._by_id.discard(lambda key, _: key in removed)
        self._known.discard(lambda _, seen: seen[2] == thread_id)
        if thread_gone:
            self._heads.discard(lambda key, _: key == thread_id)

    def _count(self, **increments: int) -> None:
        stats = self.stats
        with self._stats_lock:
            for name, increment in increments.items():
                setattr(stats, name, getattr(stats, name) + increment)


@dataclass(slots=True)
class Retention:
    """What a retention removes from one thread (see :meth:`IncrementalStore.retention`): the checkpoints (their ids
    and seqs), the blobs only they used, and the tails of their lists. The items to free are those reached from
    ``dead_tails`` and not from ``live_tails`` (the lists of the checkpoints that stay): lists share their chains,
    and a kept list passes through the items of every shorter list it extends. ``collect`` is False when the rows
    of a kept checkpoint could not be told: then nothing is freed."""

    ids: builtins.list[str] = field(default_factory=builtins.list)
    seqs: builtins.list[int] = field(default_factory=builtins.list)
    dead_blobs: builtins.list[int] = field(default_factory=builtins.list)
    dead_tails: builtins.list[int] = field(default_factory=builtins.list)
    live_tails: builtins.list[int] = field(default_factory=builtins.list)
    collect: bool = True


def checkpoint_row(checkpoint: Checkpoint, refs: Mapping[str, Ref], pending: str | None) -> tuple[Row, int]:
    """The row of ``checkpoint`` (see :data:`COLUMNS`), whose values live at ``refs`` and whose pending work is
    encoded as ``pending`` (the plan's: stored whole, it is small and rarely there), and its payload bytes."""
    # Keys as they are, not as \u escapes: json.loads would join an escaped surrogate pair into one code point.
    manifest = json_text({key: list(ref) if isinstance(ref, tuple) else ref for key, ref in refs.items()})
    row = (
        checkpoint.id,
        checkpoint.thread_id,
        checkpoint.seq,
        checkpoint.parent_id,
        checkpoint.node,
        json.dumps(list(checkpoint.next), separators=(",", ":")),
        checkpoint.run_id,
        checkpoint.source,
        checkpoint.created_at.isoformat(),
        checkpoint.safe,
        checkpoint.unsafe_reason,
        checkpoint.rolled_back_from,
        manifest,
        checkpoint.error,
        pending,
    )
    return row, sum(len(v) if isinstance(v, str) else 8 for v in row if v is not None)


def _manifest_refs(manifest: str) -> dict[str, Ref]:
    """The refs a checkpoint row's manifest records.

    Raises:
        DecodeError: it is not a manifest.
    """
    refs_json = parse_json_text(manifest)
    if type(refs_json) is not dict:
        raise DecodeError(f"the manifest is not a JSON object: {manifest[:80]!r}")
    refs: dict[str, Ref] = {}
    for key, ref in refs_json.items():
        if type(ref) is int:
            refs[key] = ref
            continue
        if not (type(ref) is list and len(ref) == 2 and type(ref[1]) is int and ref[1] >= 0):
            raise DecodeError(f"key {key!r} has an invalid manifest entry {ref!r}")
        tail, length = ref
        if not (tail is None and length == 0) and type(tail) is not int:
            raise DecodeError(f"key {key!r} has an invalid manifest entry {ref!r}")
        refs[key] = (tail, length)
    return refs


def _time(text: Any) -> datetime | None:
    """A row's ``created_at``, or None when it cannot be read."""
    try:
        return datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None


def _list_hint(hint: Entry | None, key: str) -> tuple[int, int, FrozenList[Any]] | None:
    if hint is None:
        return None
    ref = hint.refs.get(key)
    if not isinstance(ref, tuple) or ref[0] is None:
        return None
    value = hint.checkpoint.values.get(key)
    return (ref[0], ref[1], value) if type(value) is FrozenList else None


def _has_prefix(value: FrozenList[Any], prefix: FrozenList[Any], serde: Serde, key: str) -> bool:
    """Whether the first ``len(prefix)`` items of ``value`` are stored exactly as ``prefix``'s are, so its rows can
    be reused: each item is the very same object or encodes to the very same text. Equality is not enough: ``True ==
    1``, ``1.0 == 1``, ``-0.0 == 0.0`` and ``(1, 2) == FrozenList([1, 2])``, and reusing the parent's row would read
    back the parent's item."""
    dumps = serde.dumps
    for index, (a, b) in enumerate(zip(value, prefix)):  # noqa: B905 - value is the longer one
        if a is not b and dumps(a, key=key, index=index) != dumps(b, key=key, index=index):
            return False
    return True
