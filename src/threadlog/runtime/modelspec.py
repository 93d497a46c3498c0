"""Model specs: the model a command line names (``threadlog serve --model``, ``threadlog
replay --model``), shared by the CLI and the server so that both take the same names.
"""

from __future__ import annotations

import importlib
from typing import Any

from threadlog.errors import UsageError
from threadlog.runtime.models import Model, ModelRequest, Reply, ScriptedModel

__all__ = ["model_from_spec"]


def _echo_script(request: ModelRequest, step: int) -> Reply:
    last = next((m for m in reversed(request.messages) if m["role"] == "user"), None)
    text = str(last.get("content") or "") if last else ""
    return Reply(f"You said: {text}" if text else "Hello.")


def model_from_spec(spec: str, *, delay: float = 0.0) -> Model:
    """The model ``--model`` names.

    ``scripted`` (a model that answers by repeating the input, ``delay`` seconds between
    words), ``openai:NAME`` or ``anthropic:NAME`` (the provider's API key from
    ``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY``), or ``python:MODULE:ATTR``: a `Model`
    instance, or a class or zero-argument function that makes one. Raises `UsageError`.
    """
    kind, _, rest = spec.partition(":")
    if kind == "scripted" and not rest:
        return ScriptedModel(_echo_script, delay=delay)
    if kind == "openai" and rest:
        from threadlog.runtime.providers import OpenAIChat

        return OpenAIChat(rest)
    if kind == "anthropic" and rest:
        from threadlog.runtime.providers import AnthropicMessages

        return AnthropicMessages(rest)
    if kind == "python" and rest.count(":") == 1:
        module_name, attr = rest.split(":")
        try:
            found: Any = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise UsageError(f"--model {spec}: {exc}") from None
        if isinstance(found, Model) and not isinstance(found, type):
            model: Any = found
        elif callable(found):
            model = found()
        else:
            raise UsageError(f"--model {spec}: {type(found).__name__} is not a model")
        if not isinstance(model, Model):
            raise UsageError(f"--model {spec}: {type(model).__name__} is not a model")
        return model
    raise UsageError(
        f"unknown model {spec!r}: give scripted, openai:NAME, anthropic:NAME or python:MODULE:ATTR"
    )
