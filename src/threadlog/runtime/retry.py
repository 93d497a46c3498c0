"""Model requests tried again after a transient failure: 429, 5xx, a dropped connection.

Theory of operation
-------------------
A provider marks the failures worth another try (`ProviderError.retryable`: rate limits,
server errors, connections reset or cut mid-stream). The turn driver runs one model request
through `call_with_retries`: up to ``attempts`` tries, the first included, with exponential
backoff and full jitter between them (``random(0, min(max_wait, base * 2**n))`` seconds, so
that many clients rate-limited at once do not come back in step). An error that is not
retryable ends the step at once, as does the last failed try; the turn then fails as it
always did.

*Each attempt is in the log.* A failed try that will be retried is recorded as
``provider.interrupted`` with ``retryable: true`` and its ``attempt`` (and what text had
arrived), which puts the step back to ``started``; the next try is a new ``provider.started``
with ``attempt`` 2, 3, … of the same step — the same context, the same ``step.started``. A
crash in between leaves a step without a response, which recovery treats like any other.
Subscribers also get a transient ``retrying`` `Progress` (the attempt, the reason, the wait).

The retry loop is `tenacity`'s (imported on the first model call only, so that ``import
threadlog`` stays small). The wait is injectable (`RetryPolicy.sleep`): tests pass one that
returns at once.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from threadlog._dataclass import dataclass
from threadlog.errors import UsageError
from threadlog.model.events import ProviderInterrupted, ProviderStarted
from threadlog.runtime.bus import Bus, Progress
from threadlog.runtime.models import Completed, ProviderError, TextDelta

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from tenacity import RetryCallState

    from threadlog.model.envelope import Record
    from threadlog.model.events import Event
    from threadlog.model.state import ThreadState
    from threadlog.runtime.models import Model, ModelRequest

__all__ = [
    "RetryDeps",
    "RetryPolicy",
    "StepAttempts",
    "StepHost",
    "attempts_for",
    "call_with_retries",
]

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a runtime retries a model request that failed with a retryable `ProviderError`."""

    attempts: int = 3
    """Tries of one request, the first included (1: never retry). A thread's
    ``model_attempts`` setting overrides it."""
    base: float = 1.0
    """Seconds: the backoff's scale (the n-th wait is at most ``base * 2**n``)."""
    max_wait: float = 30.0
    """Seconds: the longest wait between two tries."""
    sleep: Callable[[float], Awaitable[None]] | None = None
    """How to wait (default `asyncio.sleep`); a test passes one that returns at once."""

    def __post_init__(self) -> None:
        if isinstance(self.attempts, bool) or not isinstance(self.attempts, int):
            raise UsageError("attempts must be an integer")
        if self.attempts < 1:
            raise UsageError("attempts must be at least 1")
        if self.base < 0 or self.max_wait < 0:
            raise UsageError("base and max_wait must not be negative")


def attempts_for(config: dict[str, Any], policy: RetryPolicy) -> int:
    """Tries of one request in a thread: its ``model_attempts`` setting, else the policy's."""
    value = config.get("model_attempts")
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    return policy.attempts


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, ProviderError) and exc.retryable


async def call_with_retries(
    attempt: Callable[[int], Awaitable[_T]],
    *,
    policy: RetryPolicy,
    attempts: int,
    on_retry: Callable[[ProviderError, int, float], Awaitable[None]],
) -> _T:
    """``await attempt(n)`` for n = 1, 2, … until it returns, raises what is not a retryable
    `ProviderError`, or ``attempts`` tries failed (the last error is raised).

    ``on_retry(error, n, wait)`` runs after try ``n`` failed and before the wait of ``wait``
    seconds that precedes the next one (it records the failed try).
    """
    # Imported here, not at the top: only a model call needs it (see the module docstring).
    from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt
    from tenacity.wait import wait_random_exponential

    async def before_sleep(state: RetryCallState) -> None:
        assert state.outcome is not None
        error = state.outcome.exception()
        assert isinstance(error, ProviderError)
        await on_retry(error, state.attempt_number, state.upcoming_sleep)

    retrying = AsyncRetrying(
        sleep=policy.sleep or asyncio.sleep,
        stop=stop_after_attempt(attempts),
        wait=wait_random_exponential(multiplier=policy.base, max=policy.max_wait),
        retry=retry_if_exception(_retryable),
        before_sleep=before_sleep,
        reraise=True,
    )
    async for try_ in retrying:
        with try_:
            return await attempt(try_.retry_state.attempt_number)
    raise AssertionError("unreachable: tenacity either returns or raises")  # pragma: no cover


class RetryDeps(Protocol):
    """What `StepAttempts` needs of the runtime (`threadlog.runtime.deps.SessionDeps`)."""

    @property
    def retry(self) -> RetryPolicy:
        """How a failed request is tried again."""
        ...


class StepHost(Protocol):
    """What `StepAttempts` needs of a session (`threadlog.runtime.session.Session`)."""

    @property
    def state(self) -> ThreadState:
        """The thread's state (its settings)."""
        ...

    @property
    def runtime(self) -> RetryDeps:
        """The retry policy."""
        ...

    async def append(
        self, event: Event, *, durable: bool | None = None, id: str | None = None
    ) -> Record:
        """Append through the session's pipeline."""
        ...


class StepAttempts:
    """The tries of one step's model request, each recorded (see the module docstring).

    ``text`` is what the last try streamed before it failed (the ``partial`` of the step's
    final ``provider.interrupted``, which the turn driver records).
    """

    def __init__(
        self,
        host: StepHost,
        bus: Bus,
        model: Model,
        request: ModelRequest,
        turn_id: str,
        step_id: str,
    ) -> None:
        self._host = host
        self._bus = bus
        self._publish = bus.publish
        self._model = model
        self._request = request
        self._turn_id = turn_id
        self._step_id = step_id
        self._partial: list[str] = []

    @property
    def step_id(self) -> str:
        return self._step_id

    @property
    def text(self) -> str:
        """The text the current (or last) try has streamed."""
        return "".join(self._partial)

    async def run(self) -> Completed:
        """The complete response, after up to the thread's ``model_attempts`` tries; raises
        the last `ProviderError` (or what is not one) as it comes."""
        policy = self._host.runtime.retry
        self._bus.streaming = self  # what a subscriber that starts mid-answer is given first
        try:
            return await call_with_retries(
                self._attempt,
                policy=policy,
                attempts=attempts_for(self._host.state.config, policy),
                on_retry=self._on_retry,
            )
        finally:
            self._bus.streaming = None

    async def _attempt(self, n: int) -> Completed:
        step_id = self._step_id
        if n > 1:  # the first try's provider.started is recorded with the step
            await self._host.append(
                ProviderStarted(
                    turn_id=self._turn_id,
                    step_id=step_id,
                    provider=self._model.provider,
                    model=self._request.model,
                    attempt=n,
                )
            )
        self._partial.clear()
        completed: Completed | None = None
        self._publish(Progress("thinking", {"step_id": step_id}))
        async for event in self._model.stream(self._request):
            if isinstance(event, TextDelta):
                self._partial.append(event.text)
                self._publish(Progress("text", {"step_id": step_id, "text": event.text}))
            elif isinstance(event, Completed):
                completed = event
        if completed is None:
            raise ProviderError("the stream ended without a complete response", partial=self.text)
        return completed

    async def _on_retry(self, exc: ProviderError, n: int, wait: float) -> None:
        await self._host.append(
            ProviderInterrupted(
                turn_id=self._turn_id,
                step_id=self._step_id,
                reason=str(exc),
                partial=self.text or exc.partial,
                retryable=True,
                attempt=n,
            )
        )
        self._partial.clear()  # recorded: the next try streams its answer anew
        self._publish(
            Progress(
                "retrying",
                {"step_id": self._step_id, "attempt": n + 1, "reason": str(exc), "wait": wait},
            )
        )
