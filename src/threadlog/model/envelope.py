"""The envelope: one log record, its canonical bytes and its place in the hash chain.

A record is ``{"v", "id", "thread", "ord", "parent", "ts", "type", "data", "prev", "hash"}``.
``hash`` is the SHA-256 (hex) of the canonical JSON of the record *without* ``hash``; ``prev`` is
the previous record's hash (``null`` for ord 1; a fork's ord 2 follows the hash its lineage
names, `threadlog.model.lineage`). Changing any byte of any record breaks its own hash or,
through ``prev``, the next one, so tampering and torn writes are detectable.

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
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import orjson

if TYPE_CHECKING:
    from types import EllipsisType

__all__ = [
    "FORMAT_VERSION",
    "HASH_TAIL",
    "BadRecord",
    "Record",
    "encode_record",
    "line_hash",
    "line_ids",
    "parse_line",
    "parse_next",
    "parse_run",
    "record_from_obj",
    "record_hash",
    "record_line",
    "valid_type_name",
    "verify_lines",
]

FORMAT_VERSION: Final = 1
"""The envelope format version written in ``v`` of every record."""

_TYPE_RE = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+){0,4}$")
_KEYS: Final = frozenset(
    ("v", "id", "thread", "ord", "parent", "ts", "type", "data", "prev", "hash")
)
_HASH_HEAD: Final = b',"hash":"'
_SUFFIX_LEN: Final = len(_HASH_HEAD) + 64 + len(b'"}\n')
HASH_TAIL: Final = _SUFFIX_LEN - 1
"""Bytes from a line's ``,"hash":"`` field to its newline: the hashed body ends there."""


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
    """The thread that wrote this record: this log's own, or in a fork's inherited prefix
    (ords 2..``lineage.ord``) an ancestor's (see `threadlog.model.lineage`)."""
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
    """Hash of the previous record in this log (None for ord 1; in a fork, ord 2 follows
    ``lineage.copied.prev``)."""
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
    # without quotes or backslashes (what threadlog writes), and so do the parent and prev
    # (an id and a hash, or null); anything else goes through orjson.
    plain = (
        "".join((id, thread, ts, type, parent or "", prev or ""))
        if isinstance(parent, str | None) and isinstance(prev, str | None)
        else '"'
    )
    if plain.isascii() and plain.isprintable() and '"' not in plain and "\\" not in plain:
        parent_json = "null" if parent is None else f'"{parent}"'
        prev_json = "null" if prev is None else f'"{prev}"'
        tail = (
            f',"id":"{id}","ord":{ord},"parent":{parent_json},"prev":{prev_json},'
            f'"thread":"{thread}","ts":"{ts}","type":"{type}","v":{v}'
        ).encode()
    else:
        dumps = orjson.dumps
        tail = b"".join(
            (
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
            )
        )
    # The body (what is hashed) and the line are each joined once from the same pieces: the
    # line is the body with the hash as its last key.
    digest = hashlib.sha256(b"".join((b'{"data":', data_json, tail, b"}"))).hexdigest()
    return b"".join((b'{"data":', data_json, tail, _HASH_HEAD, digest.encode(), b'"}\n')), digest


def record_hash(record: Record, data_json: bytes) -> str:
    """The hash ``record`` should carry, recomputed from its fields, with ``data_json`` the
    canonical JSON of its data (what a verifier holding records, not lines, checks)."""
    return record_line(record, data_json)[1]


def record_line(record: Record, data_json: bytes) -> tuple[bytes, str]:
    """``(line, hash)`` of ``record`` encoded again from its fields (`encode_record`), with
    ``data_json`` the canonical JSON of its data."""
    return encode_record(
        id=record.id,
        thread=record.thread,
        ord=record.ord,
        parent=record.parent,
        ts=record.ts,
        type=record.type,
        data_json=data_json,
        prev=record.prev,
        v=record.v,
    )


def parse_line(line: bytes) -> Record:
    """Parse and verify one rollout line (with its trailing newline).

    Checks the framing, the JSON, the field types, that the bytes are canonical and that the
    hash matches. Does not check the chain (``prev``/``ord``); the reader does that. Every read
    runs this on every line, so it copies the line once and checks types by class.

    Raises:
        BadRecord: with the reason.
    """
    if not line.endswith(b"\n"):
        raise BadRecord("line has no terminating newline (torn write)")
    body_end = len(line) - _SUFFIX_LEN
    if body_end < 2 or not line.startswith(_HASH_HEAD, body_end):
        raise BadRecord("line does not end with the hash field")
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise BadRecord(f"not valid JSON: {exc}") from None
    # Ten keys, and each of the ten looked up below: exactly the envelope's fields (cheaper
    # than comparing the key set, on every line of every read).
    if obj.__class__ is not dict or len(obj) != _NKEYS:
        raise BadRecord("not an object with exactly the envelope's fields")
    try:
        hash_ = obj.pop("hash")  # what remains is the hashed content
        v, id_, thread, ord_, parent = obj["v"], obj["id"], obj["thread"], obj["ord"], obj["parent"]
        ts, type_, prev, data = obj["ts"], obj["type"], obj["prev"], obj["data"]
    except KeyError:
        raise BadRecord("not an object with exactly the envelope's fields") from None
    head = line[:body_end]
    check = hashlib.sha256(head)
    check.update(b"}")
    if hash_.__class__ is not str or check.hexdigest() != hash_:
        raise BadRecord("hash does not match the record's bytes")
    canon = orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)
    if len(canon) != body_end + 1 or not canon.startswith(head):
        raise BadRecord("record bytes are not canonical JSON")
    if v.__class__ is not int or ord_.__class__ is not int or ord_ < 1:
        raise BadRecord("v and ord must be integers, ord >= 1")
    if not (id_.__class__ is str and thread.__class__ is str and ts.__class__ is str):
        raise BadRecord("id, thread and ts must be strings")
    known = _SEEN_TYPES.get(type_) if type_.__class__ is str else None
    if known is None:
        if not valid_type_name(type_):
            raise BadRecord(f"invalid type name {type_!r:.80}")
        if len(_SEEN_TYPES) < 4096:
            _SEEN_TYPES[type_] = type_
    else:
        type_ = known  # one string object per type name for all the records read
    if parent is not None and parent.__class__ is not str:
        raise BadRecord("parent must be a string or null")
    if prev is not None and prev.__class__ is not str:
        raise BadRecord("prev must be a string or null")
    return _new_record(Record, (v, id_, thread, ord_, parent, ts, type_, data, prev, hash_))


def parse_next(
    data: bytes,
    view: memoryview,
    pos: int,
    end: int,
    thread: str,
    ord: int,
    prev: str,
    last_id: str | None,
    known_canonical: bool = False,
) -> Record | None:
    """The line ``data[pos:end]`` (``view`` is ``memoryview(data)``; ``end`` is just past the
    newline the caller found) as a `Record`, if it is valid and is ``thread``'s own record
    number ``ord`` chained on ``prev``; else None, and the caller runs `parse_line` and its own
    checks for the reason (so the messages are theirs).

    ``known_canonical`` skips re-encoding the record to check that its bytes are canonical
    (about a third of the cost of a line) and hashes the line's body as it is instead. Only a
    caller that will check the chain this line is part of against a hash it verified before,
    canonical bytes included, may pass it (`threadlog.store.embedded.rollout.scan_file` with
    a checkpoint): a chain that ends in that hash holds the same bytes, by SHA-256's collision
    resistance, and a chain that does not is read again with every check.

    A scan spends most of its time here, once per line: this is `parse_line` (every check it
    makes, the hash and the canonical bytes included) fused with the scan's checks of the
    thread, ordinal and chain, which also settle the class checks they imply. It compares the
    line's body through ``view`` (no copy of it), hashes the canonical bytes once they are found
    equal to it, and builds the record once, sharing the strings a log repeats (the thread id,
    the previous hash, the previous record's id as ``parent``, the type name) instead of a copy
    each: a long read holds a fifth less memory.
    """
    body_end = end - _SUFFIX_LEN
    if body_end - pos < 2 or not data.startswith(_HASH_HEAD, body_end):
        return None
    try:
        obj = _loads(data[pos:end])  # (a bytes slice: cheaper for orjson than a view)
        hash_ = obj.pop("hash")
        v, id_, owner, ord_, parent = obj["v"], obj["id"], obj["thread"], obj["ord"], obj["parent"]
        ts, type_, prev_, data_ = obj["ts"], obj["type"], obj["prev"], obj["data"]
    except (orjson.JSONDecodeError, AttributeError, TypeError, KeyError):
        return None  # not JSON, not an object, or not the envelope's fields
    # Equal to the expected str, int and str, the thread, ordinal and prev have their classes
    # too (orjson builds exact str and int; the class check on ord keeps out true and 2.0).
    if (
        owner != thread
        or ord_ != ord
        or ord_.__class__ is not int
        or prev_ != prev
        or len(obj) != _NKEYS - 1
        or v.__class__ is not int
        or id_.__class__ is not str
        or ts.__class__ is not str
        or type_.__class__ is not str
    ):
        return None
    if parent == last_id:
        parent = last_id
    elif parent is not None and parent.__class__ is not str:
        return None
    known = _SEEN_TYPES.get(type_)
    if known is None:
        return None  # a type name not checked yet: `parse_line` checks and learns it
    if known_canonical:
        check = _sha256(view[pos:body_end])
        check.update(b"}")
        if check.hexdigest() != hash_:
            return None
        return _new_record(Record, (v, id_, thread, ord_, parent, ts, known, data_, prev, hash_))
    canon = _dumps(obj, option=orjson.OPT_SORT_KEYS)
    # The canonical bytes equal to the line's body and its closing brace, their hash is the
    # body's: hashing them is the check `parse_line` makes on the line.
    if (
        len(canon) != body_end - pos + 1
        or not canon.startswith(view[pos:body_end])
        or _sha256(canon).hexdigest() != hash_
    ):
        return None
    return _new_record(Record, (v, id_, thread, ord_, parent, ts, known, data_, prev, hash_))


def parse_run(
    data: bytes,
    pos: int,
    stop: int,
    thread: str,
    ord: int,
    prev: str,
    last_id: str | None,
    records: list[Record],
    offsets: list[int],
    seen: set[str],
    base: int,
    last_ord: int,
) -> tuple[int, int, str, str | None]:
    """Parse the lines of ``data[pos:stop]``, bytes this store verified before (a chunk whose
    digest the caller checks: `threadlog.store.embedded.rollout.scan_file`'s ``chunks``), as
    ``thread``'s records from
    number ``ord`` on (up to ``last_ord``), chained on ``prev``: each is appended to
    ``records``, its offset (``base + `` its position) to ``offsets`` and its id to ``seen``.
    Returns ``(pos, ord, prev, last_id)`` after the last line taken: it stops at ``stop``,
    after ``last_ord``, or before a line that is not the next record of the chain (or whose
    fields, type or id it does not take), which the caller then judges with every check.

    `parse_next`'s checks (the thread, ordinal and chain, the envelope's fields and their
    classes, the type, the ids) but neither the line's hash nor its canonical form, which the
    chunk's digest and the checkpoint's hash prove, a line after another in one loop."""
    find, loads, new, types, record = data.find, _loads, _new_record, _SEEN_TYPES, Record
    while pos < stop and ord <= last_ord:
        nl = find(b"\n", pos, stop)
        if nl < 0:
            break
        try:
            obj = loads(data[pos : nl + 1])
            hash_ = obj.pop("hash")
            v, id_, ord_, parent = obj["v"], obj["id"], obj["ord"], obj["parent"]
            ts, data_ = obj["ts"], obj["data"]
            if (
                ord_ != ord
                or obj["prev"] != prev
                or obj["thread"] != thread
                or len(obj) != _NKEYS - 1
                or ord_.__class__ is not int
                or v.__class__ is not int
                or id_.__class__ is not str
                or ts.__class__ is not str
                or (parent is not None and parent.__class__ is not str)
            ):
                break
            type_ = types.get(obj["type"])
            if type_ is None or id_ in seen:
                break
        except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError):
            break
        seen.add(id_)
        records.append(
            new(
                record,
                (
                    v,
                    id_,
                    thread,
                    ord,
                    last_id if parent == last_id else parent,
                    ts,
                    type_,
                    data_,
                    prev,
                    hash_,
                ),
            )
        )
        offsets.append(base + pos)
        prev, last_id, ord, pos = hash_, id_, ord + 1, nl + 1
    return pos, ord, prev, last_id


# (module globals: `parse_next` finds each in one lookup a line, not a global and an attribute)
_loads = orjson.loads
_dumps = orjson.dumps
_sha256 = hashlib.sha256


_NKEYS: Final = len(_KEYS)
_new_record = tuple.__new__
"""Builds a `Record` from its ten fields without the named tuple's Python-level ``__new__``
(a read builds one per line)."""

_SEEN_TYPES: dict[str, str] = {}
"""Type names `parse_line` has already found valid (a log repeats a few dozen), each mapped to
the one string object the records it parses share (at most 4,096 kept)."""


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


def verify_lines(
    data: bytes,
    start: int,
    end: int,
    *,
    prev: str | None | EllipsisType,
    thread: str | None = None,
) -> str | None:
    """Verify the rollout lines in ``data[start:end]`` on their bytes, without decoding them.

    Checks what damage on disk can break: each line is complete and framed, its hash matches
    its bytes, its ``prev`` is the previous line's hash (the first line's is ``prev``, unless
    ``prev`` is ``...``: the first line's is not checked) and, given ``thread``, that thread
    wrote it. In canonical order ``prev`` and ``thread`` come
    after ``data``, so they are found from the end of the line. Returns the last line's hash
    (``prev`` if there are none). A fork runs this over the records it copies, at a fraction
    of `parse_line`'s cost; `parse_line` checks everything else on every read.

    Raises:
        BadRecord: with ``.index`` (the line's position in the range) and ``.offset``.
    """
    sha256 = hashlib.sha256
    view = memoryview(data)
    find, rfind, startswith = data.find, data.rfind, data.startswith
    writer = None if thread is None else b',"thread":"' + thread.encode() + b'"'
    pos, index = start, 0
    last = None if prev is ... else prev
    expect = b"" if prev is ... else b"null" if prev is None else b'"' + prev.encode() + b'"'
    chained = prev is not ...  # (else from the second line on)
    while pos < end:
        nl = find(b"\n", pos, end)
        if nl < 0:
            raise _bad("line has no terminating newline (torn write)", index, pos)
        body_end = nl - HASH_TAIL
        if body_end <= pos:
            raise _bad("line is too short to be a record", index, pos)
        check = sha256(view[pos:body_end])
        check.update(b"}")
        digest = check.hexdigest().encode()
        if not (
            startswith(digest, body_end + 9)
            and startswith(_HASH_HEAD, body_end)
            and startswith(b'"}', nl - 2)
        ):
            raise _bad("hash does not match the record's bytes", index, pos)
        p = rfind(b',"prev":', pos, body_end) + 8
        if not chained:
            expect = data[p : p + (4 if startswith(b"null", p) else 66)]
            chained = True
        if p < 8 or not startswith(expect, p):
            raise _bad("prev does not match the previous record's hash (chain broken)", index, pos)
        if writer is not None and not startswith(writer, p + len(expect)):
            raise _bad(f"the record does not belong to thread {thread}", index, pos)
        expect = b'"' + digest + b'"'
        pos, index = nl + 1, index + 1
    return last if index == 0 else expect[1:-1].decode("ascii")


def _bad(reason: str, index: int, offset: int) -> BadRecord:
    exc = BadRecord(reason)
    exc.index = index  # type: ignore[attr-defined]
    exc.offset = offset  # type: ignore[attr-defined]
    return exc


def line_ids(data: bytes, start: int, end: int) -> tuple[list[str], list[int]]:
    """The event id and offset of each line in ``data[start:end]`` (whole lines), found on
    the bytes: nothing is decoded or verified but the id.

    In canonical order ``id`` is the first envelope key after ``data``, and every field after
    it is a number, a null or a string that cannot hold ``,"id":"`` unescaped, so the last
    ``,"id":"`` of a line is the record's own. For the lines a caller already verified (a
    writer completing the ids of a log it opened from a checkpoint, `threadlog.store.embedded.
    rolloutlog`): about a tenth of the cost of parsing them.

    Raises:
        BadRecord: a line without a newline or an id (``.index`` and ``.offset`` say where).
    """
    ids: list[str] = []
    offsets: list[int] = []
    find, rfind = data.find, data.rfind
    pos, index = start, 0
    while pos < end:
        nl = find(b"\n", pos, end)
        if nl < 0:
            raise _bad("line has no terminating newline (torn write)", index, pos)
        at = rfind(b',"id":"', pos, nl) + 7
        close = find(b'"', at, nl)
        if at < 7 or close < 0:
            raise _bad("line has no event id", index, pos)
        raw = data[at:close]
        ids.append(raw.decode() if b"\\" not in raw else parse_line(data[pos : nl + 1]).id)
        offsets.append(pos)
        pos, index = nl + 1, index + 1
    return ids, offsets


def line_hash(line: bytes) -> str:
    """The hash field of a rollout line (not verified)."""
    return line[-_SUFFIX_LEN + len(_HASH_HEAD) : -3].decode("ascii")
