// threadlog UI: requests to the service, with the person's token, and what the pages share.
//
// `api()` adds `Authorization: Bearer <token>` when the person gave one (sessionStorage,
// this tab only) and turns an error answer into an Error with the service's `type: message`;
// a 401 is `Unauthorized`, which `guard()` answers with `hooks.signIn(true)` (the token form,
// set by app.js). `setConn()` shows the live-stream state in the header.

export const TOKEN_KEY = "threadlog.token";
export const $main = () => document.getElementById("main");
export const hooks = { signIn: (again) => {} };

// ---------------------------------------------------------------------------------- API

export class Unauthorized extends Error {}

export async function api(path, { method = "GET", body, signal, headers = {} } = {}) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const h = { Accept: "application/json", ...headers };
  if (token) h.Authorization = `Bearer ${token}`;
  if (body !== undefined) h["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method, headers: h, signal, body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (response.status === 401) throw new Unauthorized("a token is needed");
  if (!response.ok) {
    let message = `${response.status} ${response.statusText}`;
    try {
      const error = (await response.json()).error;
      if (error) message = `${error.type}: ${error.message}`;
    } catch { /* not JSON */ }
    throw new Error(message);
  }
  const type = response.headers.get("content-type") || "";
  return type.includes("json") ? response.json() : response.text();
}

export function setConn(state) {
  const node = document.getElementById("conn");
  node.dataset.state = state;
  node.textContent = { live: "● live", reconnecting: "● reconnecting…", offline: "● offline" }[state] || "";
}

export async function guard(action, where) {
  try {
    return await action();
  } catch (error) {
    if (error instanceof Unauthorized) return hooks.signIn(true);
    const box = where || document.getElementById("flash");
    if (box) {
      clear(box).append(el("p.error", { role: "alert", text: error.message }));
    }
    return null;
  }
}

/** Reads the thread's SSE stream with fetch(), resuming from the cursor after any drop. */
