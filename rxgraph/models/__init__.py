"""Chat models on real APIs: ``ChatModel``s a ``ReactAgent`` can talk to.

- ``rxgraph.models.openai.OpenAIChatModel`` (the ``openai`` extra): any OpenAI-compatible Chat Completions API
  (OpenAI, DashScope's compatible mode, vLLM, Ollama, ...) through the official ``openai`` client.
- ``rxgraph.models.langchain.LangChainChatModel`` (the ``langchain`` extra): any LangChain chat model, so every
  provider LangChain has (Anthropic, Gemini, Bedrock, Mistral, Ollama, ...).

Each adapter lives in a module of its own, named after the client library it needs, so importing ``rxgraph.models``
imports none of them.
"""

__all__: list[str] = []
