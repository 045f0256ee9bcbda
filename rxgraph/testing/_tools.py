"""``ScriptedTool``: a tool whose result arrives after a marble-defined delay, or fails."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from reactivex import Observable

from ..agent._model import ToolSpec
from ..agent._tools import Tool, json_object
from ..errors import InvalidArgumentError, InvalidTypeError
from ._scripted import Script, ScriptExhaustedError

__all__ = ["ScriptedTool"]


class ScriptedTool(Tool):
    """A tool for tests: each call plays the next script (the last one repeats), on the run's scheduler.

    ``ScriptedTool("get_weather", marbles("---r|", r="Sunny"))`` answers "Sunny" three ticks after it is called;
    ``marbles("--#", error=TimeoutError("upstream"))`` fails after two. Its scripts are ``marbles(...)`` scripts,
    whose diagrams are checked when they are built (see ``marbles``). It accepts any JSON object as arguments and
    records them in ``calls``.

    Args:
        name: the name the model calls it by.
        scripts: one script, or one per call.
        description: what the model is told it does.
        parameters: the JSON schema the model is shown (not checked: any JSON object is accepted).
        repeat_last: play the last script again once all were played; if False, the call after the last script
            fails.

    Raises:
        InvalidArgumentError: ``scripts`` is empty.
        InvalidTypeError: a script is not a ``Script`` (a diagram string, say): ``argument="scripts"``.
        ScriptExhaustedError: on the call after the last script, with ``repeat_last=False`` (it reaches the
            tool's ``on_error``, which an agent turns into an error tool message).
        ToolInputError: from ``parse_arguments``, when the arguments are not a JSON object.
    """

    def __init__(
        self,
        name: str,
        scripts: Script | Sequence[Script],
        *,
        description: str = "",
        parameters: dict[str, Any] | None = None,
        repeat_last: bool = True,
    ) -> None:
        self.name = name
        self.description = description
        self.spec = ToolSpec(
            name=name, description=description, parameters=parameters or {"type": "object", "properties": {}}
        )
        if not isinstance(scripts, Script) and not all(isinstance(s, Script) for s in scripts):
            raise InvalidTypeError(
                f"scripted tool {name!r} takes marbles(diagram, **values) scripts, got {scripts!r}",
                argument="scripts",
            )
        self._scripts = [scripts] if isinstance(scripts, Script) else list(scripts)
        if not self._scripts:
            raise InvalidArgumentError(f"scripted tool {name!r} needs at least one script", argument="scripts")
        self._repeat_last = repeat_last
        self._lock = threading.Lock()
        self.calls: list[dict[str, Any]] = []
        self.fn = self._play

    def parse_arguments(self, arguments: str) -> dict[str, Any]:
        return json_object(arguments, self.name)  # any object: a scripted tool does not validate against a schema

    def _play(self, **arguments: Any) -> Observable[Any]:
        with self._lock:
            number = len(self.calls)
            self.calls.append(arguments)
            if number >= len(self._scripts) and not self._repeat_last:
                raise ScriptExhaustedError(
                    f"scripted tool {self.name!r} has no script for call #{number + 1}: it was given "
                    f"{len(self._scripts)}",
                    call=number + 1,
                    scripts=len(self._scripts),
                )
            script = self._scripts[min(number, len(self._scripts) - 1)]
        return script.observable()

    def __repr__(self) -> str:
        return f"ScriptedTool({self.name!r})"
