"""Names that moved or were renamed still work for one release: each warns where it is used, naming the new path,
and is the very object the new path gives; the new names are the exported ones."""

from __future__ import annotations

import importlib
import warnings

import pytest
from pydantic import BaseModel

import rxgraph.checkpoint
from rxgraph.checkpoint import Serde

# (module, old name, module to use instead, new name)
MOVED = [
    ("rxgraph.checkpoint", "register", "rxgraph.checkpoint", "register_model"),
    ("rxgraph.checkpoint", "check_limit", "rxgraph.checkpoint.contract", "check_limit"),
    ("rxgraph.checkpoint", "check_prune", "rxgraph.checkpoint.contract", "check_prune"),
    ("rxgraph.checkpoint", "check_put", "rxgraph.checkpoint.contract", "check_put"),
    ("rxgraph.checkpoint", "duplicate_id", "rxgraph.checkpoint.contract", "duplicate_id"),
    ("rxgraph.checkpoint", "select_pruned", "rxgraph.checkpoint.contract", "select_pruned"),
    ("rxgraph.checkpoint.postgres", "PostgresSaver", "rxgraph.checkpoint", "PostgresSaver"),
    ("rxgraph.checkpoint.postgres", "PostgresSaverStats", "rxgraph.checkpoint", "PostgresSaverStats"),
    ("rxgraph.agent", "TokenUsage", "rxgraph.messages", "TokenUsage"),
]
IDS = [f"{module}.{old}" for module, old, _, _ in MOVED]


def _message(module: str, old: str, new_module: str, new: str) -> str:
    return f"{module}.{old} is deprecated and will be removed in the next release; use {new_module}.{new}"


@pytest.mark.parametrize(("module", "old", "new_module", "new"), MOVED, ids=IDS)
def test_an_old_name_warns_at_the_line_that_uses_it_and_is_the_new_object(
    module: str, old: str, new_module: str, new: str
) -> None:
    namespace = importlib.import_module(module)
    with pytest.warns(DeprecationWarning) as record:
        value = getattr(namespace, old)
    assert [str(warning.message) for warning in record] == [_message(module, old, new_module, new)]
    assert record[0].filename == __file__  # stacklevel=2: the user's line, not the library's
    assert value is getattr(importlib.import_module(new_module), new)


@pytest.mark.parametrize(("module", "old", "new_module", "new"), MOVED, ids=IDS)
def test_an_old_name_imported_with_from_warns_once_at_the_import(
    module: str, old: str, new_module: str, new: str
) -> None:
    namespace: dict[str, object] = {}
    code = compile(f"x = 1\nfrom {module} import {old}\n", "user_code.py", "exec")
    with pytest.warns(DeprecationWarning) as record:
        exec(code, namespace)
    assert [str(warning.message) for warning in record] == [_message(module, old, new_module, new)]
    assert (record[0].filename, record[0].lineno) == ("user_code.py", 2)
    assert namespace[old] is getattr(importlib.import_module(new_module), new)


@pytest.mark.parametrize(("module", "old", "new_module", "new"), MOVED, ids=IDS)
def test_the_new_name_is_exported_and_the_old_one_is_not(module: str, old: str, new_module: str, new: str) -> None:
    assert new in importlib.import_module(new_module).__all__
    if (module, old) != (new_module, new):
        assert old not in importlib.import_module(module).__all__


def test_the_new_names_do_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from rxgraph.agent import ApprovalRequest, Approve, Edit, Reject, ToolDecision  # noqa: F401
        from rxgraph.checkpoint import PostgresSaver, PostgresSaverStats, register_model  # noqa: F401
        from rxgraph.checkpoint.contract import (  # noqa: F401
            MAX_LIST_LIMIT,
            check_limit,
            check_prune,
            check_put,
            duplicate_id,
            select_pruned,
        )
        from rxgraph.messages import TokenUsage  # noqa: F401

        class Note(BaseModel):
            text: str

        assert Serde().register(Note) is Note  # a Serde's own method keeps its name


def test_a_name_that_never_existed_is_still_missing() -> None:
    with pytest.raises(AttributeError, match=r"module 'rxgraph\.checkpoint' has no attribute 'nothing'"):
        rxgraph.checkpoint.nothing  # type: ignore[attr-defined]  # noqa: B018
    assert not hasattr(rxgraph.checkpoint, "nothing")
    with pytest.raises(ImportError):
        exec("from rxgraph.checkpoint import nothing", {})


def test_the_saver_contract_module_lists_what_a_saver_author_needs() -> None:
    from rxgraph.checkpoint import contract

    assert "saver" in (contract.__doc__ or "")
    assert set(contract.__all__) == {
        "MAX_LIST_LIMIT",
        "check_limit",
        "check_prune",
        "check_put",
        "duplicate_id",
        "select_pruned",
    }
    assert "CheckpointSource" in rxgraph.checkpoint.__all__  # the type of Checkpoint.source: users read it
