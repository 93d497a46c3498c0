"""Model providers over HTTP: OpenAI-compatible Chat Completions and Anthropic Messages.

Both implement `threadlog.runtime.models.Model`: they stream text deltas from a server-sent
event response and end with one `Completed` message, or raise `ProviderError` (with the
partial text when a stream breaks, and ``retryable`` for rate limits, server errors and
dropped connections).
"""

from __future__ import annotations

from threadlog.runtime.providers.anthropic import AnthropicMessages
from threadlog.runtime.providers.openai import OpenAIChat

__all__ = ["AnthropicMessages", "OpenAIChat"]
