"""A griffe extension for the API reference: the docstrings' few reStructuredText constructs, as Markdown shows them.

- a role, ``:class:`~rxgraph.errors.RxGraphError``` or ``:func:`check_prune```, becomes a code span (the ``~`` form
  shows the last name only, as Sphinx does);
- a paragraph ending in ``::`` (an indented literal block follows) ends in ``:``, and a ``::`` line alone goes: the
  indented block after it is a Markdown code block already.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:class|func|meth|attr|data|mod|exc|obj):`(~?)([^`]+)`")


def _role(match: re.Match[str]) -> str:
    short, target = match.groups()
    return f"`{target.rsplit('.', 1)[-1] if short else target}`"


def markdown_of(text: str) -> str:
    """``text`` with its reStructuredText roles and literal-block markers as Markdown shows them."""
    lines = []
    for line in _ROLE.sub(_role, text).split("\n"):
        if line.strip() == "::":
            line = ""
        elif line.endswith("::"):
            line = line[:-1]
        lines.append(line)
    return "\n".join(lines)


class SphinxRoles(griffe.Extension):
    """Rewrites every docstring as ``markdown_of`` says, once the package is loaded."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown_of(obj.docstring.value)
