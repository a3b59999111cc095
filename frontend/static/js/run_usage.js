// The run page's usage card: what the run consumed and its projection, re-rendered by the server
// every 15 s while the run has not ended (usage grows with each step).
"use strict";

(() => {
  const card = document.getElementById("usage");
  if (!card || !card.dataset.live) return;
  const timer = setInterval(async () => {
    const r = await fetch(card.dataset.url, { credentials: "same-origin" });
    if (!r.ok) return;
    card.innerHTML = await r.text();
    const state = document.getElementById("run-state");
    if (state && ["completed", "failed", "cancelled"].includes(state.textContent.trim())) clearInterval(timer);
  }, 15000);
})();
