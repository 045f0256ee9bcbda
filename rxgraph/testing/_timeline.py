"""Render what happened in a turn as a marble diagram: one lane per node run, one for the saver."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._recording import Event

__all__ = ["render_timeline"]

_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def render_timeline(events: Sequence[Event], *, start: float, timespan: float = 1.0, legend: bool = True) -> str:
    """A marble diagram of ``events`` (one turn's), one column per ``timespan`` from ``start``.

    Lanes: one per node execution, in order (a letter per chunk, ``|`` when the node finished, ``X`` where the
    subscriber cancelled, ``#`` on an error), and ``saver`` (``S`` per checkpoint written, ``R`` for a rewind).
    Several events in one column are grouped, ``(ab)``, and the column widens in every lane to stay aligned.
    """
    lanes: list[tuple[str, int, dict[int, str]]] = []  # (label, first column, column -> marks)
    saver: dict[int, str] = {}
    legend_lines: list[str] = []
    current: dict[int, str] | None = None
    pending_label: str | None = None
    last_column = 0
    letter = 0

    def column(tick: float) -> int:
        return max(0, round((tick - start) / timespan))

    def open_lane(label: str | None, at: int) -> dict[int, str]:
        marks: dict[int, str] = {}
        lanes.append((label or "?", at, marks))
        return marks

    lane_start = 0
    last_next: str | None = None  # the node the newest checkpoint says runs next: the label of a lane with no output
    for event in events:
        col = column(event.tick)
        last_column = max(last_column, col)
        if event.kind in ("write", "rewind"):
            saver[col] = saver.get(col, "") + ("R" if event.kind == "rewind" else "S")
            nxt = getattr(event.value, "next", ())
            if event.kind == "write":
                last_next = nxt[0] if nxt else None
                if current is None:
                    pending_label = last_next
            continue
        if event.kind in ("chunk", "node"):
            if current is None:
                current = open_lane(event.node or pending_label, lane_start)
            elif lanes[-1][0] == "?" and event.node:
                lanes[-1] = (event.node, lanes[-1][1], current)
            if event.kind == "chunk":
                mark = _LETTERS[letter % len(_LETTERS)]
                letter += 1
                legend_lines.append(f"  {mark} = {_short(getattr(event.value, 'chunk', event.value))}")
                current[col] = current.get(col, "") + mark
            else:
                current[col] = current.get(col, "") + "|"
                current, lane_start, pending_label = None, col, last_next
            continue
        # complete / error / cancel close the running lane
        if event.kind in ("cancel", "error"):
            if current is None:
                current = open_lane(pending_label, lane_start)
            current[col] = current.get(col, "") + ("X" if event.kind == "cancel" else "#")
            current = None

    columns = last_column + 1
    rows: list[tuple[str, int, int | None, dict[int, str]]] = []
    for label, first, marks in lanes:
        end = max(marks) if marks else None
        rows.append((label, first, end, marks))
    rows.append(("saver", 0, None, saver))
    widths = [1] * columns
    for _, _, _, marks in rows:
        for col, text in marks.items():
            widths[col] = max(widths[col], len(text) if len(text) == 1 else len(text) + 2)
    name_width = max(len(r[0]) for r in rows) + 2
    out: list[str] = []
    for label, first, end, marks in rows:
        cells = []
        for col in range(columns):
            marked = marks.get(col)
            if marked is not None:
                cell = marked if len(marked) == 1 else f"({marked})"
            elif label == "saver" or (first <= col and (end is None or col < end)):
                cell = "-"
            else:
                cell = " "
            running = label == "saver" or (first <= col and (end is None or col < end))
            cells.append(cell.ljust(widths[col], "-" if running else " "))
        out.append(f"{label:<{name_width}}{''.join(cells)}".rstrip())
    if legend and legend_lines:
        out.append("chunks:")
        out.extend(legend_lines)
    return "\n".join(out)


def _short(value: Any, limit: int = 70) -> str:
    text = _describe(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _describe(value: Any) -> str:
    # Compact forms for the chunk types rxgraph streams; anything else by its repr.
    from ..agent._model import ChatChunk
    from ..messages._types import ToolMessage

    if isinstance(value, ChatChunk):
        parts = [f"text({value.content!r})"] if value.content else []
        parts += [
            f"tool_call(#{d.index}"
            + (f" {d.id}" if d.id else "")
            + (f" {d.name}" if d.name else "")
            + f" {d.arguments!r})"
            for d in value.tool_calls
        ]
        if value.finish_reason:
            parts.append(f"finish({value.finish_reason!r})")
        return " + ".join(parts) or "ChatChunk()"
    if isinstance(value, ToolMessage):
        return f"tool({value.tool_call_id}: {value.content!r}" + (", error)" if value.is_error else ")")
    return repr(value)
