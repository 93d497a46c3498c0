"""Framework adapters: threadlog as the storage of another agent framework.

* `threadlog.adapters.langgraph`: a LangGraph checkpointer (``threadlog[langgraph]``).
* `threadlog.adapters.openai_agents`: an OpenAI Agents SDK session (``threadlog[openai-agents]``).
* `threadlog.adapters.adk`: a Google ADK session service (``threadlog[adk]``).

Each adapter imports its framework, so none is imported by ``import threadlog`` or by this
package: import the adapter module itself. Every adapter keeps one threadlog thread per
framework thread (session), named by `threadlog.model.ids.named_thread_id` so that it is found
again without a lookup table, and writes ``custom.<framework>.*`` records to it.
"""

from __future__ import annotations

from threadlog.adapters._threads import NamedThreads

__all__ = ["NamedThreads"]
