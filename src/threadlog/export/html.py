"""The ``html`` export: the UI's thread page as one self-contained file, with no script.

The page draws the thread view (`threadlog.export.view`), the same projection the browser UI
draws: a header (title, status, model, tokens and cost, records, principal, lineage), the
calls that were waiting for a human when it was exported, the conversation along the active
branch (Markdown rendered; each assistant message with its tool calls as cards: name, state,
arguments, timing, approval, resolution and result), then the whole conversation tree with
every branch (entries off the active branch folded), the plan, and the thread's memory with
the entry each fact came from.

Large outputs are folded with ``<details>`` (their head and tail shown, the rest one click
away), so the file reads without any script. Everything taken from the log is escaped
(`threadlog.export.markdown` escapes before it adds a tag); the page declares a
Content-Security-Policy that allows no script and nothing from the network, and its style
is inline, so it opens from disk or from any server as it is.
"""

from __future__ import annotations

import html
from datetime import datetime
from typing import TYPE_CHECKING, Any

import orjson

from threadlog.export.markdown import clean, markdown
from threadlog.export.view import thread_view

if TYPE_CHECKING:
    from collections.abc import Sequence

    from threadlog.model.envelope import Record

__all__ = ["to_html"]

HEAD_LINES = 12
TAIL_LINES = 6

_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"

_STYLE = """
body{margin:0;background:#f6f7f9;color:#1f2937;font:15px/1.5 system-ui,-apple-system,"Segoe UI",
Roboto,"Noto Sans","DejaVu Sans",sans-serif}main{max-width:980px;margin:0 auto;padding:24px 20px 60px}
h1{font-size:24px;margin:0 0 6px;overflow-wrap:anywhere}h2{font-size:13px;text-transform:uppercase;
letter-spacing:.04em;color:#6b7280;margin:28px 0 10px}code,pre{font-family:ui-monospace,Menlo,
Consolas,"DejaVu Sans Mono",monospace;font-size:13px}pre{white-space:pre-wrap;overflow-wrap:anywhere;
margin:0}.meta{display:flex;flex-wrap:wrap;gap:4px 14px;color:#6b7280;font-size:13px}
.badge{display:inline-block;font-size:12px;font-weight:600;padding:1px 9px;border-radius:999px;
background:#f3f4f6;color:#6b7280}.s-running{background:#dbeafe;color:#2563eb}
.s-waiting,.s-unknown{background:#fef3c7;color:#b45309}.s-interrupted,.s-cancelled{background:#ffedd5;
color:#c2410c}.s-failed,.s-denied,.s-aborted,.s-damaged{background:#fee2e2;color:#b91c1c}
.s-finished,.s-done,.s-approved{background:#dcfce7;color:#15803d}
.msg{background:#fff;border:1px solid #e5e7eb;border-left:4px solid #d1d5db;border-radius:10px;
padding:10px 16px;margin:12px 0}.k-user{border-left-color:#2563eb}.k-assistant{border-left-color:#7c3aed}
.k-system,.k-compaction,.k-branch_summary{border-left-color:#d97706;background:#fffbeb}
.who{display:flex;gap:8px;font-size:13px;font-weight:600;color:#6b7280}.ord{margin-left:auto;
font-weight:400;color:#9ca3af;font-family:ui-monospace,monospace;font-size:12px}
.label{background:#ede9fe;color:#7c3aed;border-radius:6px;padding:0 6px;font-size:12px}
.call{border:1px solid #e5e7eb;border-radius:8px;margin:10px 0 4px;padding:8px 12px;background:#fafafa}
.tool{font-family:ui-monospace,monospace;font-weight:700}.note{margin:4px 0 0;font-size:13px;color:#6b7280}
.out{background:#fff;border:1px solid #e5e7eb;border-radius:6px;padding:6px 8px;margin-top:6px}
.err{color:#b91c1c;background:#fee2e2;border-radius:6px;padding:6px 8px;margin-top:6px}
summary{cursor:pointer;color:#6b7280;font-size:13px}.md pre{background:#0f172a;color:#e2e8f0;
padding:10px 12px;border-radius:8px}.md code{background:#f3f4f6;padding:0 4px;border-radius:4px}
.md pre code{background:none}.md p{margin:6px 0;overflow-wrap:anywhere}.waiting{background:#fef3c7;
border:1px solid #fcd34d;border-radius:10px;padding:10px 16px;margin-top:16px}
.waiting h2{margin:4px 0}
.tree{list-style:none;padding:0;margin:0;background:#fff;border:1px solid #e5e7eb;border-radius:10px;
padding:8px 12px}.tree li{padding:2px 0;font-size:14px}.tree .off{color:#9ca3af}
.tree .bp>span.k::after{content:" ⑂";color:#7c3aed}.card{background:#fff;border:1px solid #e5e7eb;
border-radius:10px;padding:10px 16px}footer{color:#9ca3af;font-size:12px;margin-top:40px}
@media (max-width:700px){main{padding:14px 10px 40px}}
"""

_ROLE = {
    "user": "You",
    "assistant": "Agent",
    "system": "Note",
    "compaction": "Compaction",
    "branch_summary": "Branch summary",
    "interrupted": "Interrupted",
    "config": "Settings",
    "root": "Start",
    "tool": "Tool result",
}

_CALL_LABEL = {
    "waiting": "waiting for approval",
    "unknown": "outcome unknown",
    "done": "resolved: done",
    "aborted": "resolved: aborted",
}


def _e(value: Any) -> str:
    """Escaped text (terminal escapes made visible)."""
    return html.escape(clean("" if value is None else str(value)), quote=True)


def _json(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()


def _short(text: str, n: int = 80) -> str:
    one = " ".join(text.split())
    return one if len(one) <= n else one[: n - 1] + "…"


def _badge(state: str, text: str | None = None) -> str:
    return f'<span class="badge s-{_e(state)}">{_e(text or state)}</span>'


def _output(text: str) -> str:
    """A result: whole when short, else its head and tail with the whole folded."""
    lines = text.split("\n")
    if len(lines) <= HEAD_LINES + TAIL_LINES + 4 and len(text) <= 4000:
        return f'<pre class="out">{_e(text)}</pre>'
    if len(lines) > HEAD_LINES + TAIL_LINES:
        head = "\n".join(lines[:HEAD_LINES])[:2000]
        tail = "\n".join(lines[-TAIL_LINES:])[-1000:]
    else:  # few long lines: cut by characters
        head, tail = text[:2000], text[-1000:]
    size = f"{len(lines):,} lines, {len(text):,} characters"
    return (
        f'<pre class="out">{_e(head)}</pre>'
        f'<p class="note">… folded ({size}) …</p>'
        f'<pre class="out">{_e(tail)}</pre>'
        f"<details><summary>Show all ({size})</summary>"
        f'<pre class="out">{_e(text)}</pre></details>'
    )


def _duration(start: str | None, end: str | None) -> str | None:
    if not start or not end:
        return None

    def parse(ts: str) -> datetime:
        return datetime.fromisoformat(ts.replace("Z", "+00:00"))

    ms = int((parse(end) - parse(start)).total_seconds() * 1000)
    return f"{ms} ms" if ms < 1000 else f"{ms / 1000:.1f} s"


def _card(call: dict[str, Any]) -> str:
    state = call["state"]
    facts = [call["side_effect"].replace("_", "-")]
    if call["attempt"] > 1:
        facts.append(f"attempt {call['attempt']}")
    took = _duration(call.get("started_ts"), call.get("finished_ts"))
    if took:
        facts.append(took)
    args = orjson.dumps(call["args"]).decode()
    parts = [
        f'<div class="call c-{_e(state)}"><div><span class="tool">{_e(call["tool"])}</span> '
        f"{_badge(state, _CALL_LABEL.get(state, state))} "
        f'<span class="note">{_e(" · ".join(facts))}</span></div>',
        f"<details><summary>arguments {_e(_short(args, 60))}</summary>"
        f'<pre class="out">{_e(_json(call["args"]))}</pre></details>',
    ]
    decision = call.get("decision")
    if decision:
        why = f": {decision['reason']}" if decision.get("reason") else ""
        said = f"{decision['as']} by {decision['by']}{why}"
        parts.append(f'<p class="note">{_e(said)}</p>')
    if call["status"] == "unknown" or call.get("resolution"):
        parts.append(f'<p class="note">outcome unknown: {_e(call.get("reason") or "")}</p>')
    resolution = call.get("resolution")
    if resolution:
        note = f": {resolution['note']}" if resolution.get("note") else ""
        said = f"resolved {resolution['as']} by {resolution['by']}{note}"
        parts.append(f'<p class="note">{_e(said)}</p>')
    if call.get("error"):
        parts.append(f'<pre class="err">{_e(call["error"])}</pre>')
    if call.get("result_text") is not None:
        parts.append(_output(call["result_text"]))
    elif call.get("artifact"):
        ref = call["artifact"]
        parts.append(
            f'<p class="note">{_e(ref.get("size"))} bytes stored as artifact '
            f"{_e(str(ref.get('sha256'))[:12])}: {_e(ref.get('summary') or '')}</p>"
        )
    parts.append("</div>")
    return "".join(parts)


def _message(entry: dict[str, Any], calls: dict[str, dict[str, Any]]) -> str:
    kind = entry["kind"]
    label = f'<span class="label">{_e(entry["label"])}</span>' if entry.get("label") else ""
    body = (
        f'<p class="note">{_e(entry["text"])}</p>'
        if kind == "config"
        else f'<div class="md">{markdown(entry["text"] or "")}</div>'
    )
    cards = "".join(_card(calls[c]) for c in entry.get("calls") or [] if c in calls)
    return (
        f'<section class="msg k-{_e(kind)}" id="e{entry["ord"]}"><div class="who">'
        f"<span>{_e(_ROLE.get(kind, kind))}</span>{label}"
        f'<span class="ord">#{entry["ord"]}</span></div>{body}{cards}</section>'
    )


def _tree(entries: list[dict[str, Any]]) -> str:
    rows = []
    for entry in entries:
        classes = ("on" if entry["active"] else "off") + (" bp" if entry["branch"] else "")
        pad = f' style="padding-left:{min(entry["depth"], 8) * 16}px"' if entry["depth"] else ""
        text = "start" if entry["kind"] == "root" else _short(entry["text"] or entry["type"], 90)
        label = f' <span class="label">{_e(entry["label"])}</span>' if entry.get("label") else ""
        leaf = ' <span class="badge">leaf</span>' if entry.get("leaf") else ""
        head = (
            f'<span class="ord">#{entry["ord"]}</span> <span class="k">'
            f"{_e(_ROLE.get(entry['kind'], entry['kind']))}</span>: {_e(text)}{label}{leaf}"
        )
        if entry["active"] or entry["kind"] == "root":
            rows.append(f'<li class="{classes}"{pad}>{head}</li>')
        else:
            rows.append(
                f'<li class="{classes}"{pad}><details><summary>{head}</summary>'
                f'<div class="md">{markdown(entry["text"] or "")}</div></details></li>'
            )
    return f'<ol class="tree">{"".join(rows)}</ol>'


def _header(view: dict[str, Any], records: int) -> str:
    usage = view.get("usage") or {}
    tokens_in = int(usage.get("input_tokens") or 0)
    tokens_out = int(usage.get("output_tokens") or 0)
    cost = usage.get("cost")
    facts = [
        _badge(view["status"]),
        f"<span>{records} records · principal {_e(view['principal'])}</span>",
        f"<span>{tokens_in + tokens_out:,} tokens ({tokens_in:,} in, {tokens_out:,} out)"
        + (f" · ${cost:.4f}" if isinstance(cost, int | float) else "")
        + "</span>",
    ]
    if view.get("model"):
        facts.append(f"<span>model {_e(view['model'])}</span>")
    lineage = view.get("lineage") or {}
    if lineage.get("thread"):
        facts.append(
            f"<span>forked from {_e(lineage['thread'])} at #{_e(lineage.get('ord'))}</span>"
        )
    facts.append(f"<code>{_e(view['thread_id'])}</code>")
    return (
        f'<h1>{_e(view["title"] or view["thread_id"])}</h1><div class="meta">{"".join(facts)}</div>'
    )


def _waiting(view: dict[str, Any]) -> str:
    calls = [c for c in view["calls"].values() if c.get("needs")]
    if not calls:
        return ""
    rows = "".join(
        f"<p>{_badge(c['state'], 'needs approval' if c['needs'] == 'decision' else 'outcome unknown')} "
        f'<span class="tool">{_e(c["tool"])}</span> <code>{_e(_short(orjson.dumps(c["args"]).decode(), 120))}</code>'
        + (f"<br>Why: {_e(c.get('reason') or '')}" if c["needs"] == "resolution" else "")
        + "</p>"
        for c in calls
    )
    return f'<section class="waiting"><h2>Waiting for a human when exported</h2>{rows}</section>'


def _step(step: Any) -> str:
    """One step of a plan: its status badge and its text (a dict's title, text or step)."""
    if not isinstance(step, dict):
        return _e(step if isinstance(step, str) else orjson.dumps(step).decode())
    status = step.get("status")
    text = step.get("title") or step.get("text") or step.get("step") or orjson.dumps(step).decode()
    return (_badge(f"p-{status}", str(status)) + " " if status else "") + _e(text)


def _plan(view: dict[str, Any]) -> str:
    plan = view.get("plan")
    if plan is None:
        return ""
    title = f"Plan (v{view.get('plan_version')})"
    steps = plan.get("steps") if isinstance(plan, dict) else plan
    if isinstance(plan, str):
        body = f'<div class="md">{markdown(plan)}</div>'
    elif isinstance(steps, list):
        body = "<ol>" + "".join(f"<li>{_step(step)}</li>" for step in steps) + "</ol>"
    else:
        body = f'<pre class="out">{_e(_json(plan))}</pre>'
    reason = (view.get("plan_source") or {}).get("reason")
    why = f'<p class="note">why: {_e(reason)}</p>' if reason else ""
    return f'<h2>{_e(title)}</h2><div class="card">{body}{why}</div>'


def _memory(view: dict[str, Any]) -> str:
    live = [m for m in view.get("memories") or [] if not m.get("revoked")]
    if not live:
        return ""
    rows = "".join(
        f'<li>{_e(m["fact"])} <span class="note">— {_e(m["scope"])}'
        + (f" · {_e(m['key'])}" if m.get("key") else "")
        + (
            f' · from <a href="#e{m["source_ord"]}">#{m["source_ord"]}</a>'
            if m.get("source_ord")
            else ""
        )
        + "</span></li>"
        for m in live
    )
    return f'<h2>Memory</h2><ul class="card">{rows}</ul>'


def to_html(records: Sequence[Record]) -> str:
    """The page for a thread's records (its whole log, artifacts loaded), ending in a
    newline."""
    view = thread_view(records)
    calls = view["calls"]
    path = [e for e in view["entries"] if e["active"] and e["kind"] not in ("root", "tool")]
    conversation = "".join(_message(e, calls) for e in path)
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
        f"<title>{_e(view['title'] or view['thread_id'])} · threadlog</title>"
        f"<style>{_STYLE}</style></head><body><main>"
        + _header(view, len(records))
        + _waiting(view)
        + "<h2>Conversation (active branch)</h2>"
        + conversation
        + "<h2>Conversation tree (every branch)</h2>"
        + _tree(view["entries"])
        + _plan(view)
        + _memory(view)
        + f"<footer>Exported by threadlog from {len(records)} records; "
        "no script, nothing loaded from the network.</footer></main></body></html>\n"
    )
