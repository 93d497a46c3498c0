// threadlog UI: the thread page — the calls waiting for a human, the conversation with its
// tool-call cards, the composer (new turn, steering, cancel), the tree (fork, continue from
// an entry), the plan, the memory and the live feed.
//
// The page follows the thread's stream (stream.js); each record schedules a refresh of the
// thread view (`GET /v1/threads/{t}/view`), which redraws the page. A redraw keeps what the
// person was doing: the reason being typed, open arguments, loaded artifacts, the focus and
// the scroll position.

import {
  ago, append, badge, clean, clear, duration, el, json, markdown, plain, short,
} from "./dom.js";
import { follow, readProgress } from "./stream.js";
import { $main, api, guard, hooks, setConn, TOKEN_KEY, Unauthorized } from "./api.js";

function recordSummary(record) {
  const d = record.data && typeof record.data === "object" ? record.data : {};
  switch (record.type) {
    case "model.responded": return short(d.message?.content || "(tool calls)", 70);
    case "tool_call.proposed": return `${d.tool}(${short(JSON.stringify(d.args), 50)})`;
    case "turn.started": return short(d.input, 70);
    case "input.queued": return short(d.text, 70);
    case "turn.ended": return d.outcome + (d.reason ? `: ${short(d.reason, 50)}` : "");
    case "tool_call.unknown": return short(d.reason, 70);
    case "tool_call.resolved": return `${d.decision} by ${d.by}`;
    case "tool_call.approved": case "tool_call.denied": return `by ${d.by}`;
    default: return "";
  }
}

export function threadPage(threadId) {
  const ctl = {
    stopped: false, cursor: 0, view: null, selected: null, timer: null, abort: null,
    openResults: new Set(), openArgs: new Set(), reasons: new Map(), artifacts: new Map(),
    streaming: new Map(), doneSteps: new Set(), toolProgress: new Map(), progressOpen: false, progressAbort: null, feed: [], drawn: false,
  };
  const head = el("div.thead");
  const flash = el("div", { id: "flash", "aria-live": "assertive" });
  const waiting = el("section.waiting", { "aria-label": "Waiting for you", hidden: true });
  const convo = el("ol.convo", { "aria-label": "Conversation (active branch)" });
  const composer = composerBox(threadId, ctl);
  const tree = el("ol.tree", { "aria-label": "Conversation tree" });
  const entry = el("section.entry.card", { "aria-label": "Selected entry", hidden: true });
  const side = el("div.side");
  const feed = el("ol.feed", { "aria-label": "Live events", "aria-live": "off" });
  append(side, [
    el("section.card", el("h2", { text: "Tree" }), tree),
    entry,
    el("section.card.plan", { id: "plan" }),
    el("section.card.memory", { id: "memory" }),
    el("section.card", el("h2", { text: "Live events" }), feed),
  ]);
  append(clear($main()), [
    head, flash, waiting,
    el("div.layout", el("div.mainc", convo, composer.node), side),
  ]);

  const refresh = async () => {
    ctl.timer = null;
    try {
      ctl.view = await api(`/v1/threads/${encodeURIComponent(threadId)}/view`);
    } catch (error) {
      if (error instanceof Unauthorized) return hooks.signIn(true);
      clear(flash).append(el("p.error", { role: "alert", text: error.message }));
      return;
    }
    if (ctl.stopped) return;
    // a redraw keeps what the person was doing: the reason being typed, the focus, the
    // scroll position (and follows the conversation when they were at its end)
    const atEnd = window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 60;
    const focused = document.activeElement?.id;
    drawHead(head, ctl.view);
    drawWaiting(waiting, ctl, threadId);
    drawConvo(convo, ctl, threadId);
    if (ctl.drawn && atEnd) window.scrollTo(0, document.documentElement.scrollHeight);
    ctl.drawn = true;
    drawTree(tree, ctl, () => drawEntry(entry, ctl, threadId));
    drawEntry(entry, ctl, threadId);
    drawPlan(document.getElementById("plan"), ctl.view);
    drawMemory(document.getElementById("memory"), ctl.view);
    composer.update(ctl.view);
    if (ctl.view.status === "running" && ctl.view.live) readProgress(threadId, ctl);
    else if (ctl.streaming.size) {
      ctl.streaming.clear(); // no turn runs: nothing is being written
      drawLive(convo, ctl);
    }
    if (focused && document.activeElement?.id !== focused) document.getElementById(focused)?.focus({ preventScroll: true });
  };
  ctl.refresh = () => { if (!ctl.timer) ctl.timer = setTimeout(refresh, 120); };
  ctl.onConnect = () => ctl.refresh();
  ctl.onProgress = ({ kind, data }) => {
    // the two streams race: a delta may come after its step's record, which supersedes it
    if (data?.step_id && ctl.doneSteps.has(data.step_id)) return;
    if (kind === "thinking") ctl.streaming.set(data.step_id, "");
    else if (kind === "text") ctl.streaming.set(data.step_id, (ctl.streaming.get(data.step_id) || "") + data.text);
    else if (kind === "text_so_far") ctl.streaming.set(data.step_id, data.text); // a late start: all of it
    else if (kind === "tool_progress") ctl.toolProgress.set(data.call_id, data);
    else return;
    drawLive(convo, ctl);
  };
  ctl.onRecord = (record) => {
    if (record.type === "model.responded" || record.type === "provider.interrupted") {
      ctl.doneSteps.add(record.data?.step_id);
      ctl.streaming.delete(record.data?.step_id);
    }
    if (record.type === "tool_call.finished" || record.type === "tool_call.unknown") ctl.toolProgress.delete(record.data?.call_id);
    ctl.feed.push(record);
    if (ctl.feed.length > 60) ctl.feed.shift();
    feed.prepend(el("li", { "data-ord": record.ord },
      el("span.ord", { text: `#${record.ord}` }), el("span.type", { text: record.type }),
      el("span.sum", { text: recordSummary(record) })));
    while (feed.childElementCount > 60) feed.lastElementChild.remove();
    ctl.refresh();
  };
  ctl.headers = () => {
    const token = sessionStorage.getItem(TOKEN_KEY);
    return token ? { Authorization: `Bearer ${token}` } : {};
  };
  ctl.onState = setConn;
  ctl.onUnauthorized = () => hooks.signIn(true);
  ctl.onGone = () => ctl.refresh(); // the view's answer says why (ThreadNotFound)
  follow(threadId, ctl);
  return {
    stop() {
      ctl.stopped = true;
      clearTimeout(ctl.timer);
      ctl.abort?.abort();
      ctl.progressAbort?.abort();
    },
  };
}

function drawHead(head, view) {
  const usage = view.usage || {};
  const tokens = (usage.input_tokens || 0) + (usage.output_tokens || 0);
  const cost = typeof usage.cost === "number" ? ` · $${usage.cost.toFixed(4)}` : "";
  const status = view.status;
  clear(head).append(
    el("a.back", { href: "#/", text: "← Threads" }),
    el("h1", { id: "thread-title", text: view.title || "(untitled)" }),
    el("div.meta",
      badge(status),
      el("span", { text: view.model ? `model ${view.model}` : "" }),
      el("span", { id: "usage", text: `${tokens.toLocaleString()} tokens (${(usage.input_tokens || 0).toLocaleString()} in, ${(usage.output_tokens || 0).toLocaleString()} out)${cost}` }),
      el("span", { text: `${view.last_ord} records` }),
      view.lineage?.thread ? el("a", { href: `#/t/${view.lineage.thread}`, text: `forked from ${view.lineage.thread.slice(0, 13)} at #${view.lineage.ord}` }) : null,
      el("code.tid", { text: view.thread_id })),
  );
}

function drawWaiting(box, ctl, threadId) {
  const calls = Object.values(ctl.view.calls).filter((c) => c.needs);
  box.hidden = !calls.length;
  clear(box);
  if (!calls.length) return;
  box.append(el("h2", { text: calls.length === 1 ? "A call waits for you" : `${calls.length} calls wait for you` }));
  for (const call of calls) {
    const base = `/v1/threads/${encodeURIComponent(threadId)}/tool-calls/${encodeURIComponent(call.call_id)}`;
    const asks = call.needs === "decision";
    const reason = el("input", {
      id: `why-${call.call_id}`, placeholder: asks ? "Reason (optional)" : "Note (optional)",
      on: { input: () => ctl.reasons.set(call.call_id, reason.value) },
    });
    reason.value = ctl.reasons.get(call.call_id) || "";
    const buttons = [];
    const decide = (path, extra) => async () => {
      for (const b of buttons) b.disabled = true;
      const text = reason.value.trim();
      const note = text ? (path === "resolve" ? { note: text } : { reason: text }) : {};
      await guard(() => api(`${base}/${path}`, { method: "POST", body: { ...extra, ...note } }));
      ctl.refresh();
    };
    const button = (cls, label, path, extra) => {
      const id = `${extra.as || path}-${call.call_id}`;
      const b = el(`button${cls}`, { id, type: "button", on: { click: decide(path, extra) }, text: label });
      buttons.push(b);
      return b;
    };
    if (asks) {
      button(".primary", "Approve", "approve", {});
      button(".danger", "Deny", "deny", {});
    } else {
      button(".primary", "It was done", "resolve", { as: "done" });
      button("", "Retry it", "resolve", { as: "retry" });
      button(".danger", "Abort it", "resolve", { as: "abort" });
    }
    box.append(el("div.wait", { "data-call": call.call_id },
      el("div.what",
        badge(`c-${call.state}`, asks ? "needs approval" : "outcome unknown"),
        el("strong", { text: call.tool }), el("code", { text: short(JSON.stringify(call.args), 120) })),
      asks ? null : el("p.reason", { text: `Why: ${call.reason || "the process stopped while it ran"}` }),
      el("div.actions", el("label.sr", { for: `why-${call.call_id}`, text: asks ? "Reason" : "Note" }), reason, buttons)));
  }
}

const ROLE = { user: "You", assistant: "Agent", system: "Note", compaction: "Compaction", branch_summary: "Branch summary", interrupted: "Interrupted", config: "Settings" };

function drawConvo(list, ctl, threadId) {
  const view = ctl.view;
  clear(list);
  const onPath = view.entries.filter((e) => e.active && e.kind !== "root");
  const shownCalls = new Set();
  for (const entry of onPath) {
    if (entry.kind === "tool") continue; // drawn inside its call's card
    const item = el(`li.msg.k-${entry.kind}`, { "data-entry": entry.id, "data-ord": entry.ord },
      el("div.who", el("span", { text: ROLE[entry.kind] || entry.kind }),
        entry.label ? el("span.label", { text: entry.label }) : null,
        entry.branch ? el("span.bp", { text: `branch point · ${entry.children}`, title: "Several branches continue from here" }) : null,
        el("span.ord", { text: `#${entry.ord}` })));
    if (entry.text) item.append(entry.kind === "config" ? el("p.muted", { text: entry.text }) : markdown(entry.text));
    for (const callId of entry.calls || []) {
      const call = view.calls[callId];
      if (call) {
        shownCalls.add(callId);
        item.append(callCard(call, ctl, threadId));
      }
    }
    list.append(item);
  }
  // calls of the running turn proposed on steps not yet shown (none, usually)
  for (const call of Object.values(view.calls)) {
    if (!shownCalls.has(call.call_id) && call.turn_id === view.active_turn) list.append(el("li.msg", callCard(call, ctl, threadId)));
  }
  drawLive(list, ctl);
  if (view.status === "waiting") list.append(el("li.typing", { text: "Waiting for you: see the top of the page." }));
  else if (view.active_turn) list.append(el("li.typing", { text: "The agent is working…" }));
}

/** The model's answer as it streams, and running tools' progress (transient: replaced by the
 * records when they are written). */
function drawLive(list, ctl) {
  let bubble = list.querySelector(".streaming");
  const text = [...ctl.streaming.values()].filter(Boolean).join("\n\n");
  if (!text) {
    bubble?.remove();
  } else {
    if (!bubble) {
      bubble = el("li.msg.k-assistant.streaming", { "aria-live": "polite" },
        el("div.who", el("span", { text: "Agent" }), el("span.ord", { text: "writing…" })), el("p.stext"));
      const typing = list.querySelector(".typing");
      if (typing) typing.before(bubble);
      else list.append(bubble);
    }
    bubble.querySelector(".stext").textContent = clean(text);
  }
  for (const [callId, p] of ctl.toolProgress) {
    const slot = list.querySelector(`.call[data-call="${CSS.escape(callId)}"] .progress`);
    if (slot) slot.textContent = clean(`${p.message || ""}${typeof p.fraction === "number" ? ` (${Math.round(p.fraction * 100)} %)` : ""}`);
  }
}

const CALL_LABEL = {
  proposed: "proposed", waiting: "waiting for approval", approved: "approved", running: "running",
  finished: "finished", failed: "failed", unknown: "outcome unknown", denied: "denied",
  cancelled: "cancelled", done: "resolved: done", aborted: "resolved: aborted",
};

function callCard(call, ctl, threadId) {
  const took = duration(call.started_ts, call.finished_ts);
  const card = el(`div.call.c-${call.state}`, { "data-call": call.call_id, "data-state": call.state },
    el("div.chead", el("span.tool", { text: call.tool }), badge(`c-${call.state}`, CALL_LABEL[call.state] || call.state),
      el("span.muted", { text: [call.side_effect.replace("_", "-"), call.attempt > 1 ? `attempt ${call.attempt}` : null, took].filter(Boolean).join(" · ") })),
    el("details.args", {
      open: ctl.openArgs.has(call.call_id),
      on: { toggle: (event) => { if (event.target.open) ctl.openArgs.add(call.call_id); else ctl.openArgs.delete(call.call_id); } },
    }, el("summary", { text: `arguments ${short(JSON.stringify(call.args), 60)}` }), el("pre", { text: json(call.args) })));
  if (call.state === "running") card.append(el("p.note.progress", { "aria-live": "polite" }));
  if (call.decision) card.append(el("p.note", { text: `${call.decision.as} by ${call.decision.by}${call.decision.reason ? `: ${call.decision.reason}` : ""}` }));
  if (call.status === "unknown" || call.resolution) card.append(el("p.note", { text: `outcome unknown: ${call.reason || ""}` }));
  if (call.resolution) card.append(el("p.note", { text: `resolved ${call.resolution.as} by ${call.resolution.by}${call.resolution.note ? `: ${call.resolution.note}` : ""}` }));
  if (call.error) card.append(el("pre.err", { text: call.error }));
  if (call.result_text !== null && call.result_text !== undefined) card.append(output(call.result_text, call.call_id, ctl));
  if (call.artifact && ctl.artifacts.has(call.artifact.sha256)) {
    card.append(output(ctl.artifacts.get(call.artifact.sha256), call.call_id, ctl));
  } else if (call.artifact) {
    const box = el("div.artifact");
    const load = el("button", { type: "button", text: `Load the full output (${call.artifact.size.toLocaleString()} bytes)` });
    load.addEventListener("click", async () => {
      load.disabled = true;
      const text = await guard(() => api(`/v1/threads/${encodeURIComponent(threadId)}/artifacts/${call.artifact.sha256}`, { headers: { Accept: "application/octet-stream" } }), box);
      if (text === null) return;
      // a blob holds the value's canonical JSON (a tool's text result is a JSON string)
      let value = text;
      try {
        value = JSON.parse(text);
      } catch { /* not JSON: shown as it is */ }
      const shown = typeof value === "string" ? value : json(value);
      ctl.artifacts.set(call.artifact.sha256, shown); // kept across redraws
      clear(box).append(output(shown, call.call_id, ctl));
    });
    append(box, [el("p.muted", { text: call.artifact.summary || "stored as an artifact" }), load]);
    card.append(box);
  }
  return card;
}

const HEAD = 12;
const TAIL = 6;

function output(text, key, ctl) {
  const lines = clean(text).split("\n");
  if (lines.length <= HEAD + TAIL + 4 && text.length <= 4000) return el("pre.out", { text });
  const open = ctl.openResults.has(key);
  const box = el("div.big");
  const draw = (full) => {
    clear(box);
    if (full) {
      box.append(el("pre.out", { text }));
    } else {
      const many = lines.length > HEAD + TAIL;
      const head = many ? lines.slice(0, HEAD).join("\n").slice(0, 2000) : text.slice(0, 2000);
      const tail = many ? lines.slice(-TAIL).join("\n").slice(-1000) : text.slice(-1000);
      box.append(el("pre.out", { text: head }),
        el("p.gap", { text: `… folded (${lines.length.toLocaleString()} lines, ${text.length.toLocaleString()} characters) …` }),
        el("pre.out", { text: tail }));
    }
    box.append(el("button.link", {
      type: "button", "aria-expanded": String(full),
      on: { click: () => { if (full) ctl.openResults.delete(key); else ctl.openResults.add(key); draw(!full); } },
      text: full ? "Collapse" : "Show all",
    }));
  };
  draw(open);
  return box;
}

function drawTree(list, ctl, onSelect) {
  const top = list.scrollTop;
  clear(list);
  for (const entry of ctl.view.entries) {
    const pick = el("button.node", {
      id: `node-${entry.ord}`, type: "button", "aria-pressed": String(ctl.selected === entry.id),
      "aria-label": `#${entry.ord} ${ROLE[entry.kind] || entry.kind}: ${short(entry.text, 60)}${entry.leaf ? " (leaf)" : ""}`,
      on: {
        click: () => {
          ctl.selected = entry.id;
          drawTree(list, ctl, onSelect);
          onSelect();
          document.getElementById(`node-${entry.ord}`)?.focus();
        },
      },
    },
    el("span.ord", { text: `#${entry.ord}` }),
    el(`span.dot.k-${entry.kind}`, { "aria-hidden": "true" }),
    el("span.txt", { text: entry.kind === "root" ? "start" : short(plain(entry.text), 48) || entry.type }),
    entry.label ? el("span.label", { text: entry.label }) : null,
    entry.leaf ? el("span.leafmark", { text: "leaf" }) : null);
    list.append(el("li", {
      class: [entry.active ? "on" : "off", entry.branch ? "bp" : ""].join(" "),
      "data-entry": entry.id, "data-depth": Math.min(entry.depth, 8),
    }, pick));
  }
  list.scrollTop = top;
}

function drawEntry(box, ctl, threadId) {
  const entry = ctl.view.entries.find((e) => e.id === ctl.selected);
  box.hidden = !entry;
  if (!entry) return;
  const running = Boolean(ctl.view.active_turn);
  // A fork never starts inside a turn (the server snaps back to the turn's start): forking
  // "from" an entry keeps the whole turn it belongs to, once that turn has ended.
  const turn = ctl.view.turns.find((t) => t.started_ord <= entry.ord && (t.ended_ord === null || t.ended_ord >= entry.ord));
  const at = turn && turn.ended_ord !== null ? turn.ended_ord : entry.ord;
  const fork = el("button.primary", { id: "fork-here", type: "button", text: "Fork from here" });
  fork.addEventListener("click", async () => {
    const made = await guard(() => api(`/v1/threads/${encodeURIComponent(threadId)}/fork`, { method: "POST", body: { at } }), box);
    if (made) location.hash = `#/t/${made.thread_id}`;
  });
  const move = el("button", { id: "move-leaf", type: "button", disabled: running || entry.leaf, text: "Continue from here", title: running ? "Wait until the turn ends" : "Move the active leaf here" });
  move.addEventListener("click", async () => {
    await guard(() => api(`/v1/threads/${encodeURIComponent(threadId)}/leaf`, { method: "POST", body: { to: entry.id } }), box);
    ctl.refresh();
  });
  clear(box).append(
    el("h2", { text: `Entry #${entry.ord}` }),
    el("p.muted", { text: `${entry.type} · ${new Date(entry.ts).toLocaleString()}${entry.active ? " · on the active branch" : ""}` }),
    el("div.entrytext", entry.text ? markdown(entry.text) : null),
    el("p.muted", { text: turn ? (turn.ended_ord === null ? "Its turn is still running: a fork keeps the turns before it." : `A fork keeps everything up to the end of its turn (#${turn.ended_ord}).`) : `A fork keeps everything up to #${entry.ord}.` }),
    el("div.actions", fork, move),
  );
}

function drawPlan(box, view) {
  clear(box).append(el("h2", { text: view.plan_version ? `Plan (v${view.plan_version})` : "Plan" }));
  if (view.plan === null || view.plan === undefined) return box.append(el("p.muted", { text: "No plan yet." }));
  const plan = view.plan;
  const steps = Array.isArray(plan) ? plan : Array.isArray(plan?.steps) ? plan.steps : null;
  if (steps) {
    box.append(el("ol", steps.map((s) => el("li", typeof s === "object" && s !== null
      ? [s.status ? badge(`p-${s.status}`, s.status) : null, " ", s.title || s.text || s.step || json(s)]
      : [String(s)]))));
  } else {
    box.append(typeof plan === "string" ? markdown(plan) : el("pre", { text: json(plan) }));
  }
  if (view.plan_source?.reason) box.append(el("p.muted", { text: `why: ${view.plan_source.reason}` }));
}

function drawMemory(box, view) {
  clear(box).append(el("h2", { text: "Memory" }));
  const live = view.memories.filter((m) => !m.revoked);
  if (!live.length) return box.append(el("p.muted", { text: "Nothing remembered in this thread." }));
  box.append(el("ul.mem", live.map((m) => el("li", el("span", { text: m.fact }),
    el("span.muted", { text: ` — ${m.scope}${m.key ? ` · ${m.key}` : ""} · from #${m.source_ord ?? "?"} · ${ago(m.written_at)}` })))));
}

function composerBox(threadId, ctl) {
  const text = el("textarea", { id: "say", rows: 2, placeholder: "Message the agent…" });
  const send = el("button.primary", { type: "submit", text: "Send" });
  const cancel = el("button.danger", { type: "button", text: "Cancel turn", hidden: true });
  const queued = el("ul.queued", { "aria-label": "Queued steering", "aria-live": "polite" });
  const label = el("label", { for: "say", text: "Message" });
  const form = el("form.composer", { "aria-label": "Send a message" }, queued, label, text, el("div.actions", send, cancel));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const value = text.value;
    if (!value.trim()) return;
    const running = Boolean(ctl.view?.active_turn);
    send.disabled = true;
    const path = running ? "steer" : "turns";
    const body = running ? { text: value } : { input: value };
    const headers = running ? {} : { "Idempotency-Key": crypto.randomUUID() };
    const done = await guard(() => api(`/v1/threads/${encodeURIComponent(threadId)}/${path}`, { method: "POST", body, headers }));
    send.disabled = false;
    if (done) text.value = "";
    ctl.refresh();
  });
  text.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) form.requestSubmit();
  });
  cancel.addEventListener("click", async () => {
    cancel.disabled = true;
    await guard(() => api(`/v1/threads/${encodeURIComponent(threadId)}/cancel`, { method: "POST", body: {} }));
    cancel.disabled = false;
    ctl.refresh();
  });
  return {
    node: form,
    update(view) {
      const running = Boolean(view.active_turn);
      label.textContent = running ? "Steer the running turn (taken at its next safe point)" : "Start a new turn";
      send.textContent = running ? "Steer" : "Send";
      cancel.hidden = !running;
      clear(queued);
      for (const q of view.queued) queued.append(el("li", badge("queued", "queued"), el("span", { text: q.text })));
    },
  };
}

