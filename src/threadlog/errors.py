"""The threadlog exception tree.

Errors are split by audience (who has to act on them)::

    ThreadlogError                  base of everything threadlog raises on purpose
    ├── UsageError                  the caller's mistake: bad arguments, bad data, unknown thread
    │   ├── ThreadNotFound          no thread with that id in this store
    │   ├── InvalidEventType        a type name that is malformed or not in the catalogue
    │   ├── InvalidData             data that cannot be encoded canonically (NaN, non-str keys…)
    │   └── RecordTooLarge          a record over the store's size limit
    ├── ConflictError               concurrency: somebody else got there first
    │   ├── OrdinalConflict         append(expect_ord=N) but the log is elsewhere
    │   ├── DuplicateEventConflict  the same event id with different content
    │   ├── LeaseHeld               another process holds the thread's single-writer lease
    │   ├── LeaseLost               this writer's lease passed to another (fencing token stale)
    │   └── ThreadExists            create_thread(thread_id=…) with other settings, or deleted
    ├── IntegrityError              the log on disk is damaged: carries thread, ord and offset
    ├── StorageError                an I/O failure; the log that saw it is fail-stopped
    │   └── InsecureHome            a home, folder or file that other users own or may write
    ├── RunError                    a failure while running a turn
    │   └── ProviderError           the model provider failed (threadlog.runtime.models)
    └── InvalidTransition           the reducer refused an event for the current state
        (also a UsageError: the event is wrong, the log is not)

`IntegrityError` is never raised for a *torn tail* (a final record cut short by a crash):
that is repaired when the thread is next opened for writing. It is raised for damage that a
crash cannot explain, such as a valid record following an invalid one, and it names the first
bad ordinal so that nothing is ever silently dropped.
"""

from __future__ import annotations

__all__ = [
    "ConflictError",
    "DuplicateEventConflict",
    "InsecureHome",
    "IntegrityError",
    "InvalidData",
    "InvalidEventType",
    "InvalidTransition",
    "LeaseHeld",
    "LeaseLost",
    "OrdinalConflict",
    "ThreadExists",
    "RecordTooLarge",
    "RunError",
    "StorageError",
    "ThreadNotFound",
    "ThreadlogError",
    "UsageError",
]


class ThreadlogError(Exception):
    """Base class of every error threadlog raises on purpose."""


class UsageError(ThreadlogError):
    """The caller asked for something that cannot be done as asked."""


class ThreadNotFound(UsageError):
    """No thread with this id exists in the store."""

    def __init__(self, thread_id: str, *, deleted: bool = False) -> None:
        super().__init__(
            f"thread {thread_id!r} was deleted from this store (its id is not handed out again)"
            if deleted
            else f"no thread {thread_id!r} in this store"
        )
        self.thread_id = thread_id
        self.deleted = deleted
        """Whether the store remembers deleting it (`Retention.deleted`)."""


class InvalidEventType(UsageError):
    """The event type name is malformed or unknown (use ``custom.<name>`` for your own)."""


class InvalidData(UsageError):
    """The event data cannot be stored: not canonical-JSON encodable, or wrong for its type."""


class RecordTooLarge(UsageError):
    """The encoded record is over the store's limit."""


class InvalidTransition(UsageError):
    """The reducer refused an event: it is illegal in the current state. Nothing changed."""

    def __init__(self, message: str, *, ord: int | None = None) -> None:
        super().__init__(message if ord is None else f"ord {ord}: {message}")
        self.ord = ord
        self.reason = message
        """What is wrong, without the ordinal."""


class ConflictError(ThreadlogError):
    """A concurrency conflict: another writer or an earlier append got there first."""


class OrdinalConflict(ConflictError):
    """``append(expect_ord=N)`` found the log at another ordinal."""

    def __init__(self, thread_id: str, expected: int, actual: int) -> None:
        super().__init__(
            f"thread {thread_id}: expected to append ord {expected}, but the next ord is {actual}"
        )
        self.thread_id = thread_id
        self.expected = expected
        self.actual = actual


class DuplicateEventConflict(ConflictError):
    """An event with this id is already in the log, with different content."""

    def __init__(self, thread_id: str, event_id: str, ord: int) -> None:
        super().__init__(
            f"thread {thread_id}: event {event_id} is already stored at ord {ord} "
            "with different content"
        )
        self.thread_id = thread_id
        self.event_id = event_id
        self.ord = ord


class LeaseHeld(ConflictError):
    """Another live process holds this thread's single-writer lease."""

    def __init__(self, thread_id: str, holder: str) -> None:
        super().__init__(f"thread {thread_id} is open for writing by {holder}")
        self.thread_id = thread_id
        self.holder = holder


class LeaseLost(ConflictError):
    """This writer's lease on the thread passed to another holder: its fencing token is stale.

    The database refused the append (nothing of it was written), and every later append of
    this store to the thread is refused too: the writer must stop, because another one now
    continues the log. `Store.release` acknowledges the loss; the next append then takes the
    lease again (when it is free) and continues from the log as the database holds it.
    """

    def __init__(self, thread_id: str, token: int | None, holder: str | None = None) -> None:
        by = f" (now held by {holder})" if holder else ""
        super().__init__(
            f"thread {thread_id}: this writer's lease (fencing token {token}) was lost{by}; "
            "its appends are refused"
        )
        self.thread_id = thread_id
        self.token = token
        self.holder = holder


class ThreadExists(ConflictError):
    """``create_thread(thread_id=…)`` names a thread held with other settings, or one that was
    deleted (a deleted id is never silently reused)."""

    def __init__(self, thread_id: str, why: str) -> None:
        super().__init__(f"thread {thread_id} {why}")
        self.thread_id = thread_id


class IntegrityError(ThreadlogError):
    """The log on disk is damaged in a way a crash cannot explain.

    Attributes:
        thread_id: the damaged thread.
        ord: the first ordinal that is missing or bad (the record after the last good one).
        offset: the byte offset of the damage in the rollout file, when known.
        reason: what is wrong, in words.
    """

    def __init__(self, thread_id: str, ord: int, reason: str, *, offset: int | None = None) -> None:
        where = f" at byte {offset}" if offset is not None else ""
        super().__init__(f"thread {thread_id}: ord {ord}{where}: {reason}")
        self.thread_id = thread_id
        self.ord = ord
        self.offset = offset
        self.reason = reason


class StorageError(ThreadlogError):
    """An I/O operation failed. The log that saw it acknowledges nothing more until reopened.

    After a failed ``fsync`` the kernel may have dropped the dirty pages and mark them clean,
    so retrying would acknowledge data that is not on disk (PostgreSQL's "fsyncgate"). The
    writer is therefore poisoned; reopening the thread re-reads the file from disk.
    """


class InsecureHome(StorageError):
    """A home, one of its folders or files is owned by another user or writable by others.

    The store refuses it (as ssh refuses such a key): anyone who can write there can put
    records into the threads' logs. The message says the ``chmod``/``chown`` that fixes it.
    """


class RunError(ThreadlogError):
    """A failure while running a turn (the provider, the session's state)."""
