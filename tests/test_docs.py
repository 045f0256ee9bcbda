"""Every Python example in the README and on the documentation site runs as written.

Each ```python block of README.md and of every page under docs/ is one test. A page's blocks run in order in one
namespace, as a reader would run them: a block may use what an earlier block of its page defined (running one block
alone runs the blocks before it first). A block that defines ``test_...`` functions has them called, and every block
must print something, so that what it shows is what it does.

A block that cannot run here (it needs an API key, a server of its own) says so on the line before its fence, in an
HTML comment that the site does not show: ``<!-- not-run: the reason -->``. It is still compiled, and reported as a
skipped test with its reason; there may be only a few.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

FENCE = re.compile(r"^```python(?P<info>[^\n]*)\n(?P<code>.*?)^```[ \t]*$", re.S | re.M)
"""A ```python block at the start of a line (``title="..."`` and other options may follow the language)."""

NOT_RUN = re.compile(r"^<!--\s*not-run:\s*(?P<reason>.*?)\s*-->[ \t]*$")
"""The marker of a block that is not run, alone on the line right before its fence."""

MAX_NOT_RUN = 3
"""Examples that are not run are the exception: a page that needs more should be runnable instead."""


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository, e.g. docs/guides/agents.md
    number: int  # 1-based, in the page
    line: int  # of the opening fence, 1-based
    code: str
    not_run: str | None  # the reason, for a block that is not run

    @property
    def id(self) -> str:
        return f"{self.page}#{self.number}"


def _blocks(path: Path) -> list[Block]:
    text = path.read_text(encoding="utf-8")
    page = path.relative_to(ROOT).as_posix()
    blocks = []
    for number, match in enumerate(FENCE.finditer(text), start=1):
        line = text.count("\n", 0, match.start()) + 1
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = NOT_RUN.match(before)
        blocks.append(Block(page, number, line, match["code"], marker["reason"] if marker else None))
    fences = len(re.findall(r"```python", text))
    assert fences == len(blocks), f"{page}: {fences - len(blocks)} ```python fence(s) not at the start of a line"
    return blocks


BLOCKS = {path.relative_to(ROOT).as_posix(): _blocks(path) for path in PAGES}
ALL_BLOCKS = [block for blocks in BLOCKS.values() for block in blocks]
NOT_RUN_BLOCKS = [block for block in ALL_BLOCKS if block.not_run is not None]


class _Page:
    """One page's namespace, and how far its blocks have run."""

    def __init__(self, page: str) -> None:
        self.namespace: dict[str, Any] = {"__name__": "docs_" + re.sub(r"\W", "_", page.removesuffix(".md"))}
        self.ran = 0  # the blocks before this index have been run (or skipped)
        self.failed: int | None = None  # the number of a block that failed


_PAGES: dict[str, _Page] = {}


def _run(block: Block, page: _Page) -> None:
    code = compile(block.code, f"{block.page}, block {block.number} (line {block.line})", "exec")
    try:
        exec(code, page.namespace)
        for name, value in list(page.namespace.items()):
            if name.startswith("test_") and _defined_here(value, code):
                value()  # an example test must pass as written
    except BaseException:
        page.failed = block.number
        raise


def _defined_here(function: Any, code: Any) -> bool:
    return getattr(getattr(function, "__code__", None), "co_filename", None) == code.co_filename


@pytest.mark.parametrize("block", ALL_BLOCKS, ids=[block.id for block in ALL_BLOCKS])
def test_example_runs(
    block: Block, capsys: pytest.CaptureFixture[str], request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    if block.not_run is not None:
        compile(block.code, block.id, "exec")  # it is still Python
        pytest.skip(f"not run: {block.not_run}")
    blocks = BLOCKS[block.page]
    if any("DATABASE_URL" in b.code for b in blocks[: block.number]):
        # The PostgreSQL example: a database of its own on the test server.
        monkeypatch.setenv("DATABASE_URL", request.getfixturevalue("postgres_dsn"))
    monkeypatch.chdir(ROOT)  # examples read files of the repository (benchmarks/results.json) by relative path
    page = _PAGES.setdefault(block.page, _Page(block.page))
    if page.ran >= block.number:  # run again (pytest's --count, a rerun): start the page over
        page = _PAGES[block.page] = _Page(block.page)
    for earlier in blocks[page.ran : block.number - 1]:
        if page.failed is not None:
            break
        if earlier.not_run is None:
            _run(earlier, page)
        page.ran = earlier.number
    if page.failed is not None:
        pytest.fail(f"block {page.failed} of {block.page}, which this block follows, failed")
    capsys.readouterr()  # what the blocks before it printed
    _run(block, page)
    page.ran = block.number
    assert capsys.readouterr().out, "every example shows something"


def test_examples_that_are_not_run_are_few_and_say_why() -> None:
    for block in NOT_RUN_BLOCKS:
        assert block.not_run, f"{block.id} (line {block.line}) is not run and does not say why"
    listing = "\n".join(f"  {block.id} (line {block.line}): {block.not_run}" for block in NOT_RUN_BLOCKS)
    assert len(NOT_RUN_BLOCKS) <= MAX_NOT_RUN, f"{len(NOT_RUN_BLOCKS)} examples are not run:\n{listing}"
    print(f"{len(ALL_BLOCKS) - len(NOT_RUN_BLOCKS)} examples run, {len(NOT_RUN_BLOCKS)} not run:\n{listing}")
