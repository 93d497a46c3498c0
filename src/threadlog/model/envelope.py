"""The envelope: one log record, its canonical bytes and its place in the hash chain.

A record is ``{"v", "id", "thread", "ord", "parent", "ts", "type", "data", "prev", "hash"}``.
``hash`` is the SHA-256 (hex) of the canonical JSON of the record *without* ``hash``; ``prev`` is
the previous record's hash (``null`` for ord 1). Changing any byte of any record breaks its own
hash or, through ``prev``, the next one, so tampering and torn writes are detectable.

On disk (a JSONL rollout line) the record is its canonical bytes with ``"hash"`` appended as the
last key::

    {"data":{…},"id":"…","ord":7,"parent":"…","prev":"…","thread":"…","ts":"…","type":"…","v":1,"hash":"…"}\\n

so a verifier hashes the line minus its fixed-size suffix, without re-encoding anything, and
``json.loads`` of the line still gives the whole record. The backend never looks inside
``data``.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Final, NamedTuple

import orjson

__all__ = [
    "FORMAT_VERSION",
    "BadRecord",
    "Record",
    "encode_record",
    "line_hash",
    "parse_line",
    "rehome_lines",
    "record_from_obj",
    "valid_type_name",
]

FORMAT_VERSION: Final = 1
"""The envelope format version written in ``v`` of every record."""

_TYPE_RE = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+){0,4}$")
_KEYS: Final = frozenset(
    ("v", "id", "thread", "ord", "parent", "ts", "type", "data", "prev", "hash")
)
_HASH_HEAD: Final = b',"hash":"'
_SUFFIX_LEN: Final = len(_HASH_HEAD) + 64 + len(b'"}\n')


class BadRecord(ValueError):
    """A line or object that is not a valid record; the message says why."""


class Record(NamedTuple):
    """One log record (the envelope). Backends read and write only this.

    An immutable named tuple (cheap to build: a store creates one per append and a reader
    one per line), with the fields in envelope order.
    """

    v: int
    """Format version of the envelope."""
    id: str
    """Stable event id: UUIDv7, or derived from a key for events that must de-duplicate."""
    thread: str
    """The thread this record belongs to."""
    ord: int
    """Gap-free per-thread ordinal, starting at 1 with ``thread.created``."""
    parent: str | None
    """The record this one continues on the conversation tree (None for a root)."""
    ts: str
    """When the store accepted the record: RFC 3339, UTC, microseconds."""
    type: str
    """Event type, e.g. ``turn.started`` or ``custom.my_app.thing``."""
    data: Any
    """The payload (plain JSON). Backends never interpret it."""
    prev: str | None
    """Hash of the previous record of this thread (None for ord 1)."""
    hash: str
    """SHA-256 of this record's canonical JSON without ``hash``."""

    def to_dict(self) -> dict[str, Any]:
        """The record as a plain dict (the documented ``--json`` / JSONL shape)."""
        return {
            "v": self.v,
            "id": self.id,
            "thread": self.thread,
            "ord": self.ord,
            "parent": self.parent,
            "ts": self.ts,
            "type": self.type,
            "data": self.data,
            "prev": self.prev,
            "hash": self.hash,
        }

    def same_content(self, type: str, data: Any, parent: str | None) -> bool:
        """Whether an append of (type, data, parent) under this record's id is a replay."""
        return self.type == type and self.parent == parent and self.data == data


def valid_type_name(name: object) -> bool:
    """Syntax check: dotted lower-case words, at most 64 characters."""
    return isinstance(name, str) and len(name) <= 64 and _TYPE_RE.fullmatch(name) is not None


def encode_record(
    *,
    id: str,
    thread: str,
    ord: int,
    parent: str | None,
    ts: str,
    type: str,
    data_json: bytes,
    prev: str | None,
    v: int = FORMAT_VERSION,
) -> tuple[bytes, str]:
    """Encode a record as its rollout line; returns ``(line, hash)``.

    ``data_json`` must already be canonical (see `threadlog.model.codec.canonical`); it is
    embedded as is.
    """
    # The keys in canonical (sorted) order: the same bytes as dumping the dict with
    # OPT_SORT_KEYS (a test pins it), without building and sorting a dict. Ids, the thread,
    # the timestamp and the type need no JSON escaping when they are plain printable ASCII
    # without quotes or backslashes (what threadlog writes); anything else goes through orjson.
    plain = id + thread + ts + type
    if plain.isascii() and plain.isprintable() and '"' not in plain and "\\" not in plain:
        parent_json = "null" if parent is None else orjson.dumps(parent).decode()
        prev_json = "null" if prev is None else orjson.dumps(prev).decode()
        tail = (
            f',"id":"{id}","ord":{ord},"parent":{parent_json},"prev":{prev_json},'
            f'"thread":"{thread}","ts":"{ts}","type":"{type}","v":{v}}}'
        )
        body = b'{"data":' + data_json + tail.encode()
    else:
        dumps = orjson.dumps
        body = b"".join(
            (
                b'{"data":',
                data_json,
                b',"id":',
                dumps(id),
                b',"ord":',
                dumps(ord),
                b',"parent":',
                dumps(parent),
                b',"prev":',
                dumps(prev),
                b',"thread":',
                dumps(thread),
                b',"ts":',
                dumps(ts),
                b',"type":',
                dumps(type),
                b',"v":',
                dumps(v),
                b"}",
            )
        )
    digest = hashlib.sha256(body).hexdigest()
    return body[:-1] + _HASH_HEAD + digest.encode() + b'"}\n', digest


def parse_line(line: bytes) -> Record:
    """Parse and verify one rollout line (with its trailing newline).

    Checks the framing, the JSON, the field types, that the bytes are canonical and that the
    hash matches. Does not check the chain (``prev``/``ord``); the reader does that.

    Raises:
        BadRecord: with the reason.
    """
    if not line.endswith(b"\n"):
        raise BadRecord("line has no terminating newline (torn write)")
    if (
        len(line) < _SUFFIX_LEN + 2
        or line[-_SUFFIX_LEN : -_SUFFIX_LEN + len(_HASH_HEAD)] != _HASH_HEAD
    ):
        raise BadRecord("line does not end with the hash field")
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise BadRecord(f"not valid JSON: {exc}") from None
    body = line[:-_SUFFIX_LEN] + b"}"
    digest = line[-_SUFFIX_LEN + len(_HASH_HEAD) : -3].decode("ascii", "replace")
    if hashlib.sha256(body).hexdigest() != digest:
        raise BadRecord("hash does not match the record's bytes")
    record = record_from_obj(obj)
    if record.hash != digest:
        raise BadRecord("hash field is duplicated")
    canon = orjson.dumps(
        {k: val for k, val in obj.items() if k != "hash"}, option=orjson.OPT_SORT_KEYS
    )
    if canon != body:
        raise BadRecord("record bytes are not canonical JSON")
    return record


def record_from_obj(obj: Any) -> Record:
    """Build a `Record` from a decoded JSON object, checking field names and types."""
    if not isinstance(obj, dict) or obj.keys() != _KEYS:
        raise BadRecord("not an object with exactly the envelope's fields")
    v, id_, thread, ord_, parent = obj["v"], obj["id"], obj["thread"], obj["ord"], obj["parent"]
    ts, type_, prev, hash_ = obj["ts"], obj["type"], obj["prev"], obj["hash"]
    if type(v) is not int or type(ord_) is not int or ord_ < 1:
        raise BadRecord("v and ord must be integers, ord >= 1")
    if not (isinstance(id_, str) and isinstance(thread, str) and isinstance(ts, str)):
        raise BadRecord("id, thread and ts must be strings")
    if not valid_type_name(type_):
        raise BadRecord(f"invalid type name {type_!r}")
    if parent is not None and not isinstance(parent, str):
        raise BadRecord("parent must be a string or null")
    if prev is not None and not isinstance(prev, str):
        raise BadRecord("prev must be a string or null")
    if not isinstance(hash_, str):
        raise BadRecord("hash must be a string")
    return Record(v, id_, thread, ord_, parent, ts, type_, obj["data"], prev, hash_)


def rehome_lines(
    lines: list[bytes],
    *,
    thread: str,
    prev: str | None,
    expect_prev: str | None,
    source: str | None = None,
) -> tuple[list[bytes], str | None]:
    """Copy verified rollout lines into another thread (same ords, ids, payloads).

    ``lines`` are consecutive records *without* their newlines, the first following a record
    whose hash is ``expect_prev``; in the copy the first follows ``prev``. Returns the new
    lines (with newlines) and the last new hash.

    Works on the bytes, without decoding payloads: in canonical order the envelope's ``prev``
    and ``thread`` come after ``data``, so they are found from the end of the line. Every
    line's own hash and its link to the previous one are checked before it is copied.

    Raises:
        BadRecord: with ``.index`` set to the position of the first line that does not verify.
    """
    sha256 = hashlib.sha256
    suffix = _SUFFIX_LEN - 1  # the lines have no newline
    head = _HASH_HEAD
    thread_field = b',"thread":"' + thread.encode()
    source_field = None if source is None else b',"thread":"' + source.encode()
    old_prev = b"null" if expect_prev is None else b'"' + expect_prev.encode() + b'"'
    new_prev = b"null" if prev is None else b'"' + prev.encode() + b'"'
    out: list[bytes] = []
    append = out.append
    digest = prev
    for index, line in enumerate(lines):
        n = len(line)
        body_end = n - suffix
        if body_end < 2 or line[body_end : body_end + 9] != head or line[-2:] != b'"}':
            raise _bad("not a complete rollout line", index)
        old_digest = line[n - 66 : n - 2]
        if sha256(line[:body_end] + b"}").hexdigest().encode() != old_digest:
            raise _bad("hash does not match the record's bytes", index)
        p = line.rfind(b',"prev":', 0, body_end)
        t = line.find(b',"thread":"', p, body_end) if p >= 0 else -1
        if t < 0:
            raise _bad("envelope fields not found", index)
        if source_field is not None and line[t : t + 47] != source_field:
            raise _bad("the record belongs to another thread", index)
        if line[p + 8 : t] != old_prev:
            raise _bad("prev does not match the previous record's hash (chain broken)", index)
        body = line[: p + 8] + new_prev + thread_field + line[t + 47 : body_end]
        digest = sha256(body + b"}").hexdigest()
        encoded = digest.encode()
        append(body + head + encoded + b'"}\n')
        old_prev = b'"' + old_digest + b'"'
        new_prev = b'"' + encoded + b'"'
    return out, digest


def _bad(reason: str, index: int) -> BadRecord:
    exc = BadRecord(reason)
    exc.index = index  # type: ignore[attr-defined]
    return exc


def line_hash(line: bytes) -> str:
    """The hash field of a rollout line (not verified)."""
    return line[-_SUFFIX_LEN + len(_HASH_HEAD) : -3].decode("ascii")
