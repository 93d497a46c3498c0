"""What a session and its parts need of the runtime that opened it.

A `Session` does not import `threadlog.runtime.runtime.Runtime` (which imports the session:
that would be an import circle); it is given an object with the things below, which
`Runtime` is. Its parts (the turn driver, the tool runner) reach them through the session.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from threadlog.runtime.models import Model, Summarizer
    from threadlog.runtime.retry import RetryPolicy
    from threadlog.runtime.tools import ToolRegistry
    from threadlog.store.protocol import Store

__all__ = ["SessionDeps"]


class SessionDeps(Protocol):
    """The store, the model, the summarizer, the tools and the retry policy shared by a
    runtime's sessions."""

    @property
    def store(self) -> Store:
        """Where the thread's log is."""
        ...

    @property
    def model(self) -> Model:
        """The model every turn calls."""
        ...

    @property
    def summarizer(self) -> Summarizer:
        """What compacts a long context."""
        ...

    @property
    def tools(self) -> ToolRegistry:
        """The tools offered to the model."""
        ...

    @property
    def retry(self) -> RetryPolicy:
        """How a failed model request is tried again (`threadlog.runtime.retry`)."""
        ...
