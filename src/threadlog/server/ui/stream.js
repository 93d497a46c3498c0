// threadlog UI: the thread's Server-Sent Events read with fetch() (EventSource cannot send
// the Authorization header), resumed from the cursor after any drop.
//
// `ctl` is the page's controller: `cursor` (the last ordinal seen), `stopped`, `abort` (set
// here), and the callbacks `headers()` (the auth headers), `onConnect()`, `onRecord(record)`,
// `onState("live" | "reconnecting")`, `onUnauthorized()` and `onGone()` (404: not the
// caller's thread, or no longer there). Backoff: 250 ms doubling to 5 s.

export async function follow(threadId, ctl) {
  let delay = 250;
  while (!ctl.stopped) {
    const abort = new AbortController();
    ctl.abort = abort;
    try {
      const headers = { Accept: "text/event-stream", ...ctl.headers() };
      if (ctl.cursor > 0) headers["Last-Event-ID"] = String(ctl.cursor);
      const response = await fetch(`/v1/threads/${encodeURIComponent(threadId)}/stream`, { headers, signal: abort.signal });
      if (response.status === 401) return ctl.onUnauthorized();
      if (response.status === 404) return ctl.onGone();
      if (!response.ok || !response.body) throw new Error(`stream: ${response.status}`);
      ctl.onState("live");
      ctl.onConnect();
      delay = 250;
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let cut;
        while ((cut = buffer.search(/\r?\n\r?\n/)) >= 0) {
          const frame = buffer.slice(0, cut);
          buffer = buffer.slice(cut).replace(/^\r?\n\r?\n/, "");
          handleFrame(frame, ctl);
        }
      }
    } catch (error) {
      if (ctl.stopped) return;
    }
    if (ctl.stopped) return;
    ctl.onState("reconnecting");
    await new Promise((resolve) => setTimeout(resolve, delay));
    delay = Math.min(5000, delay * 2);
  }
}

function handleFrame(frame, ctl) {
  let event = "message";
  let id = null;
  const data = [];
  for (const line of frame.split(/\r?\n/)) {
    if (!line || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "event") event = value;
    else if (field === "id") id = value;
    else if (field === "data") data.push(value);
  }
  if (event !== "message" || !data.length) return; // `end` and other control events
  const record = JSON.parse(data.join("\n"));
  const ord = Number(id ?? record.ord);
  if (ord <= ctl.cursor) return; // already seen
  ctl.cursor = ord;
  ctl.onRecord(record);
}


/** Reads the thread's transient progress once (`GET …/progress`): model text as it streams
 * and tool progress, never logged. The stream ends when no turn runs; the page opens it again
 * when one does (`ctl.progressOpen` says whether it is open). */
export async function readProgress(threadId, ctl) {
  if (ctl.progressOpen || ctl.stopped) return;
  ctl.progressOpen = true;
  const abort = new AbortController();
  ctl.progressAbort = abort;
  try {
    const headers = { Accept: "text/event-stream", ...ctl.headers() };
    const response = await fetch(`/v1/threads/${encodeURIComponent(threadId)}/progress`, { headers, signal: abort.signal });
    if (!response.ok || !response.body) return;
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      let cut;
      while ((cut = buffer.search(/\r?\n\r?\n/)) >= 0) {
        const frame = buffer.slice(0, cut);
        buffer = buffer.slice(cut).replace(/^\r?\n\r?\n/, "");
        const { event, data } = parse(frame);
        if (event === "progress" && data) ctl.onProgress(JSON.parse(data));
      }
    }
  } catch {
    // a dropped progress stream loses only transient updates: the records carry the rest
  } finally {
    ctl.progressOpen = false;
  }
}

function parse(frame) {
  let event = "message";
  const data = [];
  for (const line of frame.split(/\r?\n/)) {
    if (!line || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "event") event = value;
    else if (field === "data") data.push(value);
  }
  return { event, data: data.length ? data.join("\n") : null };
}
