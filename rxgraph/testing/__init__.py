"""Testing tools for rxgraph users: scripted models whose timing is a marble diagram, played in virtual time."""

from ._chunks import finish, text, tool_call
from ._scripted import ModelRequest, Script, ScriptedChatModel, ScriptExhaustedError, marbles

__all__ = [
    "ModelRequest",
    "Script",
    "ScriptExhaustedError",
    "ScriptedChatModel",
    "finish",
    "marbles",
    "text",
    "tool_call",
]
