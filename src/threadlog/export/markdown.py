"""A small, safe Markdown renderer for the HTML export (the UI has its twin in ``app.js``).

It knows paragraphs, headings, fenced code, bullet and numbered lists, quotes, inline code,
bold, italics and links. Safety comes first: every piece of text is HTML-escaped before it is
wrapped in a tag, so no markup in the source survives as markup; a link is kept only for an
``http`` or ``https`` URL (anything else, ``javascript:`` included, stays text), and it opens
with ``rel="noopener noreferrer nofollow"``. Terminal escapes (``ESC``) are shown as the
visible symbol ␛, never passed through.
"""

from __future__ import annotations

import html
import re
from urllib.parse import urlsplit

__all__ = ["clean", "inline", "markdown"]

_FENCE = re.compile(r"^\s*(```|~~~)\s*([\w+-]*)\s*$")
_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
_BULLET = re.compile(r"^\s*([-*+]|\d+[.)])\s+")
_QUOTE = re.compile(r"^\s*>\s?")
_BREAK = re.compile(r"^\s*(```|~~~|#{1,6}\s|>)")
_INLINE = re.compile(
    r"(`+)(?P<code>[^`]+?)\1"
    r"|\*\*(?P<b1>[^*]+)\*\*|__(?P<b2>[^_]+)__"
    r"|\*(?P<i1>[^*\s][^*]*)\*|\b_(?P<i2>[^_\s][^_]*)_\b"
    r"|\[(?P<label>[^\]]+)\]\((?P<href>[^)\s]+)\)"
    r"|(?P<url>https?://[^\s<>()]+[^\s<>().,;:!?'\"])"
)


def clean(text: str) -> str:
    """``text`` with terminal escapes made visible (``ESC`` → ␛)."""
    return text.replace("\x1b", "\u241b")


def _esc(text: str) -> str:
    return html.escape(text, quote=True)


def _link(href: str, label: str) -> str:
    parts = urlsplit(href)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return _esc(f"[{label}]({href})")
    return (
        f'<a href="{_esc(href)}" rel="noopener noreferrer nofollow">{inline(label)}</a>'
        if label != href
        else f'<a href="{_esc(href)}" rel="noopener noreferrer nofollow">{_esc(label)}</a>'
    )


def inline(text: str) -> str:
    """One line's inline Markdown as escaped HTML."""
    out: list[str] = []
    pos = 0
    for match in _INLINE.finditer(text):
        out.append(_esc(text[pos : match.start()]))
        pos = match.end()
        groups = match.groupdict()
        if groups["code"] is not None:
            out.append(f"<code>{_esc(groups['code'])}</code>")
        elif groups["b1"] is not None or groups["b2"] is not None:
            out.append(f"<strong>{inline(groups['b1'] or groups['b2'] or '')}</strong>")
        elif groups["i1"] is not None or groups["i2"] is not None:
            out.append(f"<em>{inline(groups['i1'] or groups['i2'] or '')}</em>")
        elif groups["label"] is not None:
            out.append(_link(groups["href"] or "", groups["label"]))
        else:
            url = groups["url"] or ""
            out.append(_link(url, url))
    out.append(_esc(text[pos:]))
    return "".join(out)


def markdown(source: str) -> str:
    """``source`` as HTML blocks (see the module docstring)."""
    lines = clean(source).replace("\r\n", "\n").replace("\r", "\n").split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        if fence:
            body: list[str] = []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith(fence.group(1)):
                body.append(lines[i])
                i += 1
            i += 1
            out.append(f"<pre><code>{_esc(chr(10).join(body))}</code></pre>")
            continue
        if not line.strip():
            i += 1
            continue
        heading = _HEADING.match(line)
        if heading:
            level = min(6, len(heading.group(1)) + 2)
            out.append(f"<h{level}>{inline(heading.group(2))}</h{level}>")
            i += 1
            continue
        if _BULLET.match(line):
            tag = "ol" if line.lstrip()[:1].isdigit() else "ul"
            items: list[str] = []
            while i < len(lines) and _BULLET.match(lines[i]):
                items.append(f"<li>{inline(_BULLET.sub('', lines[i], count=1))}</li>")
                i += 1
            out.append(f"<{tag}>{''.join(items)}</{tag}>")
            continue
        if _QUOTE.match(line):
            quoted: list[str] = []
            while i < len(lines) and _QUOTE.match(lines[i]):
                quoted.append(inline(_QUOTE.sub("", lines[i], count=1)))
                i += 1
            out.append(f"<blockquote>{'<br>'.join(quoted)}</blockquote>")
            continue
        para = [inline(line)]  # the first line always (so that any line is consumed)
        i += 1
        while (
            i < len(lines)
            and lines[i].strip()
            and not _BULLET.match(lines[i])
            and not _BREAK.match(lines[i])
        ):
            para.append(inline(lines[i]))
            i += 1
        out.append(f"<p>{'<br>'.join(para)}</p>")
    return "".join(out)
