// threadlog UI: DOM building, the safe Markdown renderer and formatting helpers.
//
// Nothing here parses HTML: `el()` builds elements and text nodes, and `markdown()` turns
// Markdown into DOM nodes the same way, keeping a link only for an http(s) URL. Terminal
// escapes (ESC) are shown as the visible symbol ␛ (`clean()`).

// ---------------------------------------------------------------------------------- DOM

/** Terminal escapes shown as a visible symbol, never interpreted. */
export function clean(text) {
  return String(text ?? "").replace(/\u001b/g, "\u241b");
}

/** An element: `el("div.card.open", {attrs}, child, "text", …)`. Strings become text nodes. */
export function el(spec, attrs, ...children) {
  const [tag, ...classes] = spec.split(".");
  const node = document.createElement(tag || "div");
  if (classes.length) node.className = classes.join(" ");
  if (attrs && (typeof attrs !== "object" || attrs instanceof Node || Array.isArray(attrs))) {
    children.unshift(attrs);
    attrs = null;
  }
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "on") {
      for (const [event, handler] of Object.entries(value)) node.addEventListener(event, handler);
    } else if (key === "text") {
      node.textContent = clean(value);
    } else {
      node.setAttribute(key, value === true ? "" : String(value));
    }
  }
  append(node, children);
  return node;
}

export function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(clean(child)));
  }
  return node;
}

export function clear(node) {
  while (node.firstChild) node.firstChild.remove();
  return node;
}

// ----------------------------------------------------------------------------- Markdown

/** A small, safe Markdown renderer: paragraphs, headings, fenced code, lists, quotes,
 * inline code, bold, italics and http(s) links, all built as DOM nodes. */
export function markdown(source) {
  const root = el("div.md");
  const lines = clean(source).replace(/\r\n?/g, "\n").split("\n");
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = line.match(/^\s*(```|~~~)\s*([\w+-]*)\s*$/);
    if (fence) {
      const body = [];
      i += 1;
      while (i < lines.length && !lines[i].trim().startsWith(fence[1])) body.push(lines[i++]);
      i += 1;
      root.append(el("pre", el("code", { text: body.join("\n") })));
      continue;
    }
    if (!line.trim()) {
      i += 1;
      continue;
    }
    const heading = line.match(/^(#{1,6})\s+(.*)$/);
    if (heading) {
      const level = Math.min(6, heading[1].length + 2);
      root.append(append(el(`h${level}`), inline(heading[2])));
      i += 1;
      continue;
    }
    const bullet = /^\s*([-*+]|\d+[.)])\s+/;
    if (bullet.test(line)) {
      const ordered = /^\s*\d/.test(line);
      const list = el(ordered ? "ol" : "ul");
      while (i < lines.length && bullet.test(lines[i])) {
        list.append(append(el("li"), inline(lines[i].replace(bullet, ""))));
        i += 1;
      }
      root.append(list);
      continue;
    }
    if (/^\s*>/.test(line)) {
      const quoted = [];
      while (i < lines.length && /^\s*>/.test(lines[i])) quoted.push(lines[i++].replace(/^\s*>\s?/, ""));
      root.append(append(el("blockquote"), inline(quoted.join("\n"))));
      continue;
    }
    const para = [lines[i++]]; // the first line always, so that any line is consumed
    while (
      i < lines.length && lines[i].trim() && !bullet.test(lines[i]) &&
      !/^\s*(```|~~~|#{1,6}\s|>)/.test(lines[i])
    ) para.push(lines[i++]);
    const p = el("p");
    para.forEach((text, n) => {
      if (n) p.append(el("br"));
      append(p, inline(text));
    });
    root.append(p);
  }
  return root;
}

export const INLINE = /(`+)([^`]+?)\1|\*\*([^*]+)\*\*|__([^_]+)__|\*([^*\s][^*]*)\*|\b_([^_\s][^_]*)_\b|\[([^\]]+)\]\(([^)\s]+)\)|(https?:\/\/[^\s<>()]+[^\s<>().,;:!?'"])/;

export function inline(text) {
  const out = [];
  let rest = text;
  while (rest) {
    const m = rest.match(INLINE);
    if (!m) {
      out.push(rest);
      break;
    }
    if (m.index) out.push(rest.slice(0, m.index));
    if (m[2] !== undefined) out.push(el("code", { text: m[2] }));
    else if (m[3] !== undefined || m[4] !== undefined) out.push(append(el("strong"), inline(m[3] ?? m[4])));
    else if (m[5] !== undefined || m[6] !== undefined) out.push(append(el("em"), inline(m[5] ?? m[6])));
    else if (m[7] !== undefined) out.push(link(m[8], m[7]));
    else out.push(link(m[9], m[9]));
    rest = rest.slice(m.index + m[0].length);
  }
  return out;
}

export function link(href, label) {
  let url = null;
  try {
    url = new URL(href);
  } catch {
    url = null;
  }
  if (!url || (url.protocol !== "http:" && url.protocol !== "https:")) return `[${label}](${href})`;
  return el("a", { href: url.href, rel: "noopener noreferrer nofollow", target: "_blank", text: label });
}

// ------------------------------------------------------------------------------- format

export function ago(ts) {
  if (!ts) return "";
  const seconds = Math.max(0, (Date.now() - Date.parse(ts)) / 1000);
  if (seconds < 60) return `${Math.round(seconds)} s ago`;
  if (seconds < 3600) return `${Math.round(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.round(seconds / 3600)} h ago`;
  return new Date(ts).toLocaleDateString();
}

export function duration(a, b) {
  if (!a || !b) return null;
  const ms = Date.parse(b) - Date.parse(a);
  return ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(ms < 10000 ? 1 : 0)} s`;
}

export const STATE_LABEL = {
  running: "running", waiting: "waiting for you", interrupted: "interrupted",
  damaged: "damaged", idle: "idle",
};

export function badge(state, text) {
  return el(`span.badge.s-${state}`, { text: text || STATE_LABEL[state] || state });
}

export function json(value) {
  return JSON.stringify(value, null, 2);
}

/** Text with the Markdown marks a one-line summary does not need taken out. */
export function plain(text) {
  return String(text ?? "").replace(/\*\*|`+|^#+\s*/gm, "");
}

export function short(text, n = 80) {
  const one = clean(text).replace(/\s+/g, " ").trim();
  return one.length > n ? `${one.slice(0, n - 1)}…` : one;
}

