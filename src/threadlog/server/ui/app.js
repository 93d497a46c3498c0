// threadlog's browser UI: sign-in, the thread list and routing (thread.js draws a thread).
// Vanilla ES modules (app, thread, api, stream, dom), no build step, no dependency.
//
// How it works
// ------------
// * Routing is the URL fragment: `#/` lists the caller's threads, `#/t/THREAD` shows one.
// * Every request goes through `api()`, which adds `Authorization: Bearer <token>` when the
//   person gave one (kept in sessionStorage). A 401 shows the token form; in open mode
//   (a loopback server with no tokens) no token is ever asked for.
// * A thread page reads the thread's Server-Sent Events with fetch() and a stream parser
//   (EventSource cannot send the Authorization header). The cursor is the last ordinal seen;
//   after any drop (a server restart, a network cut, `event: end`) it reconnects with
//   `Last-Event-ID: <cursor>` after a backoff, so the page catches up with no gap.
// * Each record that arrives goes to the live feed and schedules a refresh of the thread
//   view (`GET /v1/threads/{t}/view`, the projection the HTML export draws too), which
//   redraws the conversation, the tree, the cards and the side panels.
// * Nothing from the server is ever parsed as HTML: every node is built with
//   createElement/textContent, including the Markdown (`markdown()` in dom.js), and links are
//   kept only for http(s) URLs. The page runs under a CSP with no inline script.

import { ago, append, badge, clear, el, STATE_LABEL } from "./dom.js";
import { $main, api, guard, hooks, setConn, TOKEN_KEY, Unauthorized } from "./api.js";
import { threadPage } from "./thread.js";

let page = null; // the current page's controller: { stop() }

function tokenForm(again) {
  stopPage();
  document.getElementById("signout").hidden = true;
  const input = el("input", {
    id: "token", name: "token", type: "password", autocomplete: "off", required: true,
    "aria-describedby": "token-help",
  });
  const form = el("form.card.login", { "aria-labelledby": "login-title" },
    el("h1", { id: "login-title", text: "Sign in to threadlog" }),
    el("p", { id: "token-help", class: "muted", text: "Paste a token from `threadlog token add NAME`. It stays in this tab only (sessionStorage)." }),
    again ? el("p.error", { role: "alert", text: "That token was not accepted." }) : null,
    el("label", { for: "token", text: "Token" }), input,
    el("button.primary", { type: "submit", text: "Open" }),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    route();
  });
  append(clear($main()), [form]);
  input.focus();
}

// --------------------------------------------------------------------------- list page

function count(n, word) {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

function listPage() {
  const state = { threads: [], query: "", filter: "all", timer: null, stopped: false };
  const search = el("input", { id: "q", type: "search", placeholder: "Search titles and ids", "aria-label": "Search threads" });
  const filter = el("select", { id: "filter", "aria-label": "Filter by status" },
    ["all", "running", "waiting", "interrupted", "damaged", "idle"].map((s) =>
      el("option", { value: s, text: s === "all" ? "All statuses" : STATE_LABEL[s] })));
  const rows = el("ul.threads", { "aria-label": "Threads", "aria-live": "polite" });
  const title = el("input", { id: "new-title", name: "title", placeholder: "Title (optional)" });
  const input = el("input", { id: "new-input", name: "input", placeholder: "What should the agent do?" });
  const cwd = el("input", { id: "new-cwd", name: "cwd", placeholder: "Folder (optional)" });
  const create = el("form.new", { "aria-label": "New thread" },
    el("label.sr", { for: "new-title", text: "Title" }), title,
    el("label.sr", { for: "new-input", text: "First message" }), input,
    el("label.sr", { for: "new-cwd", text: "Working folder" }), cwd,
    el("button.primary", { type: "submit", text: "New thread" }));
  create.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body = { title: title.value.trim() || null };
    if (input.value.trim()) body.input = input.value;
    if (cwd.value.trim()) body.cwd = cwd.value.trim();
    const made = await guard(() => api("/v1/threads", { method: "POST", body }));
    if (made) location.hash = `#/t/${made.thread_id}`;
  });
  const draw = () => {
    const q = state.query.toLowerCase();
    const shown = state.threads.filter((t) =>
      (state.filter === "all" || t.state === state.filter) &&
      (!q || `${t.title || ""} ${t.thread_id} ${t.model || ""}`.toLowerCase().includes(q)));
    clear(rows);
    if (!shown.length) rows.append(el("li.empty", { text: state.threads.length ? "No thread matches." : "No threads yet." }));
    for (const t of shown) {
      rows.append(el("li.thread", { "data-thread": t.thread_id, "data-state": t.state },
        el("a.row", { href: `#/t/${t.thread_id}` },
          badge(t.state),
          el("span.title", { text: t.title || "(untitled)" }),
          el("span.meta", { text: [t.model, count(t.turns, "turn"), count(t.tool_calls, "call"), t.forked_from ? "fork" : null].filter(Boolean).join(" · ") }),
          el("time.when", { datetime: t.last_ts || "", text: ago(t.last_ts) }),
          el("span.tid", { text: t.thread_id.slice(0, 13) }))));
    }
  };
  search.addEventListener("input", () => { state.query = search.value; draw(); });
  filter.addEventListener("change", () => { state.filter = filter.value; draw(); });
  const load = async () => {
    try {
      state.threads = (await api("/v1/ui/threads")).threads;
      setConn("live");
      draw();
    } catch (error) {
      if (error instanceof Unauthorized) return tokenForm(Boolean(sessionStorage.getItem(TOKEN_KEY)));
      setConn("offline");
    }
    if (!state.stopped) state.timer = setTimeout(load, 2000);
  };
  append(clear($main()), [
    el("div.listhead", el("h1", { text: "Threads" }), el("div.tools", search, filter)),
    create, rows,
  ]);
  load();
  return { stop() { state.stopped = true; clearTimeout(state.timer); } };
}

// ------------------------------------------------------------------------------ router

function stopPage() {
  if (page) page.stop();
  page = null;
}

function route() {
  stopPage();
  document.getElementById("signout").hidden = !sessionStorage.getItem(TOKEN_KEY);
  const match = location.hash.match(/^#\/t\/([^/?#]+)/);
  page = match ? threadPage(decodeURIComponent(match[1])) : listPage();
  $main().focus({ preventScroll: true });
}

hooks.signIn = tokenForm;
window.addEventListener("hashchange", route);
document.getElementById("signout").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  route();
});
route();

