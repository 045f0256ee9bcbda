"""MCP tools: a real MCP server (tests/tools/_mcp_server.py, made with the SDK's MCPServer) over stdio and over
streamable HTTP, its tools listed, called in agent turns, failing, cancelled (the server sees it; the turn is
rewound), and no server process left once a toolset is closed."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rxgraph import MemorySaver, RunnableConfig
from rxgraph.agent import ReactAgent
from rxgraph.errors import ConfigurationError, InvalidArgumentError, InvalidTypeError, MCPError
from rxgraph.messages import ToolMessage, UserMessage, check_ready_for_user_input, check_request
from rxgraph.testing import ScriptedChatModel, finish, text, tool_call
from rxgraph.tools.mcp import MCPTool, MCPToolset

SERVER = Path(__file__).with_name("_mcp_server.py")
COMMAND = [sys.executable, str(SERVER)]
REPO = Path(__file__).resolve().parents[2]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _named(toolset: MCPToolset, name: str) -> MCPTool:
    return next(t for t in toolset.tools if t.name == name)


def _server_pid(toolset: MCPToolset) -> int:
    return int(_named(toolset, "pid")().run())


@pytest.fixture(scope="module")
def stdio_toolset() -> Iterator[MCPToolset]:
    with MCPToolset.stdio(COMMAND) as toolset:
        yield toolset


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    process = subprocess.Popen([*COMMAND, "--http"], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        yield process.stdout.readline().strip()
    finally:
        process.terminate()
        process.wait(30)
        if process.stdout is not None:
            process.stdout.close()


@pytest.fixture(scope="module")
def http_toolset(http_url: str) -> Iterator[MCPToolset]:
    with MCPToolset.http(http_url) as toolset:
        yield toolset


@pytest.fixture(params=["stdio", "http"])
def toolset(request: pytest.FixtureRequest) -> MCPToolset:
    toolset: MCPToolset = request.getfixturevalue(f"{request.param}_toolset")
    return toolset


def _agent(toolset: MCPToolset, *scripts: Any) -> tuple[ReactAgent, ScriptedChatModel]:
    model = ScriptedChatModel(list(scripts))
    return ReactAgent(model, tools=toolset.tools, checkpointer=MemorySaver()), model


# -- listing and calling -------------------------------------------------------------------------------------------


def test_the_servers_tools_reach_the_model_with_their_names_descriptions_and_schemas(toolset: MCPToolset) -> None:
    assert sorted(t.name for t in toolset.tools) == ["add", "cwd", "env", "fail", "picture", "pid", "slow"]
    add = _named(toolset, "add")
    assert add.spec.description == "Add two integers."
    assert add.spec.parameters["properties"] == {
        "a": {"title": "A", "type": "integer"},
        "b": {"title": "B", "type": "integer"},
    }
    assert add.spec.parameters["required"] == ["a", "b"]
    agent, model = _agent(toolset, [text("Hello")])
    agent.invoke("Hi", RunnableConfig(thread_id="t"))
    assert {spec.name for spec in model.requests[0].tools} == {"add", "cwd", "env", "fail", "picture", "pid", "slow"}
    assert add.spec in model.requests[0].tools


def test_a_turn_calls_a_tool_and_its_text_is_the_tool_message(toolset: MCPToolset) -> None:
    agent, model = _agent(toolset, [tool_call("c1", "add", '{"a": 2, "b": 40}'), finish("tool_calls")], [text("42")])
    config = RunnableConfig(thread_id="t")
    assert agent.invoke("2 + 40?", config).content == "42"
    history = agent.get_state(config).values["messages"]
    assert history[2] == ToolMessage(tool_call_id="c1", name="add", content="42")
    check_request(model.requests[1].messages)


def test_an_error_result_and_arguments_the_server_refuses_are_error_tool_messages(toolset: MCPToolset) -> None:
    calls = [tool_call("c1", "fail", '{"reason": "no"}'), tool_call("c2", "add", '{"a": "x"}', index=1)]
    agent, _ = _agent(toolset, [*calls, finish("tool_calls")], [text("Sorry")])
    config = RunnableConfig(thread_id="t")
    agent.invoke("Try", config)
    failed, refused = agent.get_state(config).values["messages"][2:4]
    assert failed.is_error and failed.tool_call_id == "c1"
    assert "refused: no" in failed.content and "MCPError" in failed.content
    assert refused.is_error and refused.tool_call_id == "c2"
    assert "a" in refused.content and "b" in refused.content  # the server's validation names both arguments


def test_a_result_that_is_not_text_is_described_not_dropped(toolset: MCPToolset) -> None:
    assert _named(toolset, "picture")().run() == (
        "a tiny picture\n[image not shown: image/png, 8 bytes; tool messages hold text only]"
    )


def test_arguments_that_are_not_a_json_object_never_reach_the_server(toolset: MCPToolset) -> None:
    agent, _ = _agent(toolset, [tool_call("c1", "add", "[1, 2]"), finish("tool_calls")], [text("Oops")])
    config = RunnableConfig(thread_id="t")
    agent.invoke("Add", config)
    message = agent.get_state(config).values["messages"][2]
    assert message.is_error and "must be a JSON object" in message.content


# -- cancellation --------------------------------------------------------------------------------------------------


@pytest.fixture
def report_socket() -> Iterator[tuple[str, socket.socket]]:
    """A Unix socket the slow tool reports to (a short path: Unix socket paths are limited to about 100 bytes)."""
    directory = Path(os.environ.get("TMPDIR", "/tmp"))
    path = str(directory / f"rxgraph-mcp-{os.getpid()}-{id(object())}.sock")
    listening = socket.socket(socket.AF_UNIX)
    listening.bind(path)
    listening.listen()
    listening.settimeout(30)
    try:
        yield path, listening
    finally:
        listening.close()
        os.unlink(path)


def test_a_turn_cancelled_while_a_tool_runs_cancels_the_call_on_the_server_and_is_rewound(
    toolset: MCPToolset, report_socket: tuple[str, socket.socket]
) -> None:
    path, listening = report_socket
    call = [tool_call("c1", "slow", f'{{"report_to": "{path}"}}'), finish("tool_calls")]
    agent, model = _agent(toolset, [text("Hello")], call, [text("Still here")])
    config = RunnableConfig(thread_id="t")
    agent.invoke("Hi", config)
    pre_turn = list(agent.get_state(config).values["messages"])

    subscription = agent.stream("Take your time", config).subscribe()
    connection, _ = listening.accept()
    connection.settimeout(30)
    with connection, connection.makefile("r") as seen:
        assert seen.readline() == "started\n"
        subscription.dispose()
        assert seen.readline() == "cancelled\n"  # the server's tool saw the request cancelled

    assert list(agent.get_state(config).values["messages"]) == pre_turn  # rewound
    agent.invoke("Are you there?", config)
    request = model.requests[-1].messages
    check_request(request)
    assert list(request) == [*pre_turn, UserMessage(content="Are you there?")]
    check_ready_for_user_input(agent.get_state(config).values["messages"])
    assert _named(toolset, "add")(a=1, b=1).run() == "2"  # the session goes on


# -- the server's process ------------------------------------------------------------------------------------------


def test_closing_the_toolset_stops_the_server_also_when_the_block_raises() -> None:
    toolset = MCPToolset.stdio(COMMAND)
    with toolset:
        add = _named(toolset, "add")
        first = _server_pid(toolset)
        assert _alive(first)
    assert not _alive(first)
    with pytest.raises(ConfigurationError, match="not open"):
        _ = toolset.tools
    with pytest.raises(MCPError, match="closed") as closed:
        add(a=1, b=2).run()
    assert closed.value.tool == "add"

    with pytest.raises(KeyError), toolset:  # opened again: a new server, which the tools of the first opening use
        second = _server_pid(toolset)
        assert second != first
        assert add(a=1, b=2).run() == "3"
        raise KeyError("the block fails")
    assert not _alive(second)


def test_a_stdio_server_runs_with_the_environment_and_in_the_directory_it_is_given(tmp_path: Path) -> None:
    with MCPToolset.stdio(COMMAND, env={"RXGRAPH_MCP_GREETING": "hej"}, cwd=tmp_path) as toolset:
        assert _named(toolset, "env")(name="RXGRAPH_MCP_GREETING").run() == "hej"
        assert _named(toolset, "cwd")().run() == str(tmp_path.resolve())
        assert _named(toolset, "env")(name="PATH").run() != ""  # on top of what the SDK passes on
    with MCPToolset.stdio(COMMAND) as toolset:
        assert _named(toolset, "env")(name="RXGRAPH_MCP_GREETING").run() == ""
        assert _named(toolset, "cwd")().run() == os.getcwd()


def test_a_toolset_left_open_is_closed_when_the_interpreter_exits() -> None:
    # The script's exit hook runs after rxgraph's (registered earlier, so run later): it sees the server stopped
    # while the script is still alive, so the server did not merely exit once its stdin closed with the script.
    script = textwrap.dedent(
        f"""
        import atexit, os

        def _check():
            try:
                os.kill(server, 0)
            except ProcessLookupError:
                print("stopped at exit", flush=True)

        atexit.register(_check)
        from rxgraph.tools.mcp import MCPToolset

        toolset = MCPToolset.stdio({COMMAND!r}).__enter__()
        server = int(next(t for t in toolset.tools if t.name == "pid")().run())
        print(server, flush=True)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    server, *verdict = done.stdout.splitlines()
    assert verdict == ["stopped at exit"]
    assert not _alive(int(server))


def test_async_with_keeps_the_session_on_the_callers_loop_for_an_async_turn() -> None:
    async def main() -> tuple[str, int, asyncio.AbstractEventLoop]:
        async with MCPToolset.stdio(COMMAND) as toolset:
            agent, _ = _agent(toolset, [tool_call("c1", "pid"), finish("tool_calls")], [text("done")])
            config = RunnableConfig(thread_id="t")
            answer = await agent.ainvoke("Your pid?", config)
            pid = int(agent.get_state(config).values["messages"][2].content)
            assert _alive(pid)
            return answer.content, pid, asyncio.get_running_loop()

    answer, pid, _ = asyncio.run(main())
    assert answer == "done"
    assert not _alive(pid)


def test_async_with_over_streamable_http_serves_an_async_turn_on_the_callers_loop(http_url: str) -> None:
    async def main() -> tuple[str, str]:
        async with MCPToolset.http(http_url) as toolset:
            agent, _ = _agent(toolset, [tool_call("c1", "add", '{"a": 1, "b": 2}'), finish("tool_calls")], [text("3")])
            config = RunnableConfig(thread_id="t")
            answer = await agent.ainvoke("1 + 2?", config)
            return answer.content, agent.get_state(config).values["messages"][2].content

    assert asyncio.run(main()) == ("3", "3")


def test_an_opening_cancelled_while_the_server_starts_stops_it(report_socket: tuple[str, socket.socket]) -> None:
    path, listening = report_socket
    # A server that says it started, then reads every request and never answers: the opening waits for its first
    # answer. (It reads until its stdin closes: a server that stopped after one line would be gone before the check.)
    hangs = f"import os, socket, sys; s = socket.socket(socket.AF_UNIX); s.connect({path!r}); "
    hangs += "s.sendall(str(os.getpid()).encode() + b'\\n'); sys.stdin.read()"

    async def main() -> int:
        opening = asyncio.ensure_future(MCPToolset.stdio([sys.executable, "-c", hangs]).__aenter__())
        connection, _ = await asyncio.get_running_loop().run_in_executor(None, listening.accept)
        with connection, connection.makefile("r") as seen:
            connection.settimeout(30)
            pid = int(seen.readline())
        assert _alive(pid)
        opening.cancel()
        with pytest.raises(asyncio.CancelledError):
            await opening
        return pid

    assert not _alive(asyncio.run(main()))


# -- refused input -------------------------------------------------------------------------------------------------


def test_bad_arguments_are_refused_with_rxgraph_errors() -> None:
    with pytest.raises(InvalidArgumentError):
        MCPToolset.stdio([])
    with pytest.raises(InvalidTypeError):
        MCPToolset.stdio(f"{sys.executable} server.py")  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError):
        MCPToolset.stdio(COMMAND, env={"A": 1})  # type: ignore[dict-item]
    with pytest.raises(InvalidArgumentError):
        MCPToolset.http("ftp://127.0.0.1/mcp")
    with pytest.raises(InvalidTypeError):
        MCPToolset.stdio(COMMAND, requires_approval="add")
    with pytest.raises(ConfigurationError, match="not open"):
        _ = MCPToolset.stdio(COMMAND).tools


def test_a_server_that_cannot_start_is_an_mcp_error(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-program")
    with pytest.raises(MCPError, match="could not connect") as failed:
        MCPToolset.stdio([missing]).__enter__()
    assert failed.value.server == missing


def test_requires_approval_marks_the_tools_it_names(stdio_toolset: MCPToolset, http_url: str) -> None:
    with MCPToolset.http(http_url, requires_approval={"add"}) as toolset:
        assert {t.name for t in toolset.tools if t.requires_approval} == {"add"}
    with pytest.raises(InvalidArgumentError, match="nope"), MCPToolset.http(http_url, requires_approval=["nope"]):
        pass
    assert not any(t.requires_approval for t in stdio_toolset.tools)


def test_importing_rxgraph_never_imports_mcp_and_without_it_the_module_says_what_to_install() -> None:
    script = textwrap.dedent(
        """
        import sys
        import rxgraph, rxgraph.tools, rxgraph.agent
        assert "mcp" not in sys.modules, "importing rxgraph imported mcp"
        sys.modules["mcp"] = None  # as if it were not installed
        try:
            import rxgraph.tools.mcp
        except rxgraph.ConfigurationError as error:
            print(error)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert "pip install 'rxgraph[mcp]'" in done.stdout
