// Shared helpers: the REST API with the session's CSRF token, inline field errors, and a
// websocket that reconnects and resumes from its cursor.
"use strict";

const Temper = (() => {
  function cookie(name) {
    const m = document.cookie.match(new RegExp("(?:^|; )" + name + "=([^;]*)"));
    return m ? decodeURIComponent(m[1]) : "";
  }

  // fetch JSON from the API; rejects with {status, detail, errors:[{path, message}]} on failure.
  async function api(method, url, body) {
    const init = { method, headers: { Accept: "application/json" }, credentials: "same-origin" };
    if (method !== "GET") init.headers["X-CSRFToken"] = cookie("csrftoken");
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const response = await fetch(url, init);
    const text = await response.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (e) { data = { detail: text }; }
    if (!response.ok) {
      const err = { status: response.status, detail: (data && data.detail) || response.statusText, errors: (data && data.errors) || [] };
      throw err;
    }
    return data;
  }

  function pageData(id) {
    const el = document.getElementById(id);
    return el ? JSON.parse(el.textContent) : null;
  }

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else if (v !== undefined && v !== null && v !== false) node.setAttribute(k, v === true ? "" : v);
    }
    for (const c of children) if (c !== null && c !== undefined) node.append(c);
    return node;
  }

  function fmt(v, digits = 3) {
    if (v === null || v === undefined || Number.isNaN(v)) return "–";
    if (typeof v !== "number") return String(v);
    if (Math.abs(v) >= 1000) return v.toFixed(0);
    return Number(v.toPrecision(digits)).toString();
  }

  function flash(message, kind = "error") {
    const box = document.getElementById("flash");
    if (!box) { alert(message); return; }
    box.textContent = message;
    box.className = "flash " + kind;
    box.hidden = false;
  }

  // Close codes the server refuses a socket with (controlplane/live/consumers.py): reconnecting
  // cannot help, so the socket stops and the page says why.
  const REFUSED = { 4401: "signed out", 4403: "no access", 4404: "run not found" };

  // A websocket that reconnects with backoff. `hello()` is sent on every (re)connect and should
  // carry the client's cursors, so a reconnect resumes exactly where the page left off.
  // onState(state, detail): "live", "reconnecting", or "refused" with REFUSED's words as detail.
  function liveSocket(path, { hello, onMessage, onState }) {
    let ws = null, attempt = 0, closedByUs = false;
    const url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + path;
    function connect() {
      ws = new WebSocket(url);
      ws.onopen = () => { attempt = 0; onState && onState("live"); const h = hello && hello(); if (h) ws.send(JSON.stringify(h)); };
      ws.onmessage = (e) => onMessage(JSON.parse(e.data));
      ws.onclose = (e) => {
        if (closedByUs) return;
        if (REFUSED[e.code]) { onState && onState("refused", REFUSED[e.code]); return; }
        onState && onState("reconnecting");
        attempt += 1;
        setTimeout(connect, Math.min(10000, 250 * 2 ** attempt));
      };
    }
    connect();
    return { close() { closedByUs = true; ws && ws.close(); }, get socket() { return ws; } };
  }

  return { api, pageData, el, fmt, flash, liveSocket, cookie, REFUSED };
})();

// A <select data-autosubmit> submits its form when changed (the team switch, the comparison's
// suite): a listener here, since the Content-Security-Policy runs no inline onchange=.
document.addEventListener("change", (e) => {
  if (e.target instanceof HTMLSelectElement && e.target.hasAttribute("data-autosubmit") && e.target.form) e.target.form.submit();
});

// The service worker (/sw.js) caches plotly.js from the first page a user opens, so the first
// run page finds it compiled (frontend/templates/sw.js). Browsers allow one only on HTTPS or
// the loopback; elsewhere the pages load plotly.js as before.
if ("serviceWorker" in navigator && window.isSecureContext) {
  window.addEventListener("load", () => navigator.serviceWorker.register("/sw.js").catch(() => {}));
}
