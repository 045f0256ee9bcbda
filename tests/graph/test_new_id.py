"""``new_id``: checkpoint and run ids, unique across the threads of a process and across processes (a forked child
among them), and told apart by their start, which is how they are shown."""

from __future__ import annotations

import multiprocessing
import re
import threading

from rxgraph.graph._writer import new_id


def test_an_id_has_a_uuids_shape_and_no_two_are_equal() -> None:
    ids = [new_id() for _ in range(10_000)]

    assert all(re.fullmatch(r"[0-9a-f]{32}", one) for one in ids)
    assert len(set(ids)) == len(ids)


def test_ids_made_one_after_another_differ_at_their_start() -> None:
    """Ids are shown shortened (``rxgraph inspect``: 12 digits, the demo: 8): their starts must tell them apart."""
    ids = [new_id() for _ in range(1_000)]

    assert len({one[:8] for one in ids}) == len(ids)


def test_ids_made_on_many_threads_at_once_are_all_different() -> None:
    made: list[list[str]] = [[] for _ in range(8)]
    start = threading.Barrier(len(made))

    def make(into: list[str]) -> None:
        start.wait()
        into.extend(new_id() for _ in range(5_000))

    threads = [threading.Thread(target=make, args=(into,)) for into in made]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    every = [one for ids in made for one in ids]
    assert len(every) == 40_000 and len(set(every)) == len(every)


def _ids_in_child(connection: multiprocessing.connection.Connection) -> None:
    connection.send([new_id() for _ in range(100)])
    connection.close()


def test_a_forked_process_makes_ids_the_parent_never_makes() -> None:
    before = new_id()
    context = multiprocessing.get_context("fork")
    receiving, sending = context.Pipe(duplex=False)
    child = context.Process(target=_ids_in_child, args=(sending,))
    child.start()
    try:
        from_child = receiving.recv()
    finally:
        child.join(60)
    after = [new_id() for _ in range(100)]

    assert child.exitcode == 0
    assert not set(from_child) & {before, *after}
