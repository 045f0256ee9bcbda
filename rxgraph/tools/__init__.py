"""Tools from elsewhere, for a ``ReactAgent``: each source in a module of its own, named after the library it needs
(``rxgraph.tools.mcp``: the tools of an MCP server; ``rxgraph.tools.langchain``: LangChain tools), so importing
``rxgraph.tools`` imports none of them. Tools written for rxgraph are made with ``rxgraph.agent.tool``.
"""

__all__: list[str] = []
