// The run page asks for its first chart's data at once, while plotly.min.js loads and parses;
// run_detail.js takes the promise from window.TemperPrefetch. Loaded without defer or async, so
// document.currentScript is this script tag and its data-url the series to fetch.
//
// The page arrives with its first reward chart drawn by the server (runs/_reward_sketch.html);
// TemperLive.firstDrawMs is the frame in which that chart, with its points, is first rendered:
// the first animation frame after the parser inserted it (plotly's chart replaces it later, at
// TemperLive.plotlyDrawMs).
"use strict";

window.TemperPrefetch = {
  reward: fetch(document.currentScript.dataset.url, { credentials: "same-origin", headers: { Accept: "application/json" } }),
};

(() => {
  const live = (window.TemperLive = window.TemperLive || {});
  const seen = () => {
    const sketch = document.querySelector("[data-testid=reward-sketch]");
    // its last element parsed: the whole chart is in the document
    if (!sketch || sketch.dataset.points === "0" || !sketch.querySelector(".sk-xtitle")) return false;
    requestAnimationFrame(() => {
      if (live.firstDrawMs === undefined) live.firstDrawMs = performance.now();
      live.sketchMs = live.firstDrawMs;
    });
    return true;
  };
  const watch = new MutationObserver(() => { if (seen()) watch.disconnect(); });
  watch.observe(document.documentElement, { childList: true, subtree: true });
  document.addEventListener("DOMContentLoaded", () => { watch.disconnect(); });
})();
