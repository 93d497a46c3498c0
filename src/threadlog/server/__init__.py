"""The threadlog service: HTTP + Server-Sent Events over any store (``threadlog serve``).

Needs the optional extra ``threadlog[server]`` (FastAPI, uvicorn), except `tokens`, which the
``threadlog token`` commands use without it. The contract is ``docs/service.md``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ServerSettings", "create_app"]

_LAZY = {"ServerSettings": "threadlog.server.app", "create_app": "threadlog.server.app"}


def __getattr__(name: str) -> Any:
    # `import threadlog.server` must not import FastAPI (the token commands use `tokens`
    # without the server extra): the app's names are imported when first used.
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'threadlog.server' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
