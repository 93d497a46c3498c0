"""The contract of the optional `Mailbox` capability: commands left for a thread's session.

A posted command is pending until it is marked done, in posting order, for its thread only
(and a store that says which threads have mail, `MailboxIndex`, names exactly those);
``done`` is idempotent; a command with ill-typed fields, a malformed thread id and a thread
that does not exist are refused and leave nothing behind. A store without the capability
skips these tests.
"""

from __future__ import annotations

import pytest

from threadlog.errors import ThreadNotFound, UsageError
from threadlog.model.commands import Approve, Cancel, Submit
from threadlog.store.protocol import Mailbox, MailboxIndex, Store
from threadlog.testing.contract._common import MISSING_THREAD

__all__ = ["MailboxTests"]


def _mailbox(store: Store) -> Mailbox:
    if not isinstance(store, Mailbox):
        pytest.skip("this store has no mailbox (an optional capability)")
    return store


class MailboxTests:
    """Post, pending, done."""

    def test_posted_commands_are_pending_in_order_until_done(self, store: Store) -> None:
        mailbox = _mailbox(store)
        thread, other = store.create_thread("a"), store.create_thread("a")
        assert mailbox.pending(thread) == []
        first = mailbox.post(thread, Approve(call_id="c1", by="bob"))
        second = mailbox.post(thread, Cancel(turn_id="t1"))
        mailbox.post(other, Submit(text="elsewhere"))
        pending = mailbox.pending(thread)
        assert [(m.id, m.thread_id, m.command) for m in pending] == [
            (first, thread, Approve(call_id="c1", by="bob")),
            (second, thread, Cancel(turn_id="t1")),
        ]
        assert mailbox.pending(thread) == pending  # reading takes nothing away
        mailbox.done(pending[0])
        mailbox.done(pending[0])  # idempotent
        assert [m.id for m in mailbox.pending(thread)] == [second]
        assert [m.command for m in mailbox.pending(other)] == [Submit(text="elsewhere")]
        if isinstance(store, MailboxIndex):  # which threads have mail, in one call
            assert mailbox.pending(store.create_thread("a")) == []
            assert store.addressed() == {thread, other}
            mailbox.done(mailbox.pending(thread)[0])
            assert store.addressed() == {other}

    def test_posting_nothing_sensible_is_refused(self, store: Store) -> None:
        mailbox = _mailbox(store)
        thread = store.create_thread("a")
        with pytest.raises(UsageError, match="call_id"):
            mailbox.post(thread, Approve(call_id=5))  # type: ignore[arg-type]
        with pytest.raises(UsageError, match="not a thread id"):
            mailbox.post("../elsewhere", Submit(text="hi"))
        with pytest.raises(ThreadNotFound):
            mailbox.post(MISSING_THREAD, Submit(text="hi"))
        assert mailbox.pending(thread) == []

    def test_posting_appends_nothing_to_the_log(self, store: Store) -> None:
        mailbox = _mailbox(store)
        thread = store.create_thread("a")
        mailbox.post(thread, Submit(text="hi"))
        assert [r.type for r in store.read(thread)] == ["thread.created"]
