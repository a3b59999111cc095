// The run page asks for its first chart's data at once, while plotly.min.js loads and parses;
// run_detail.js takes the promise from window.TemperPrefetch. Loaded without defer or async, so
// document.currentScript is this script tag and its data-url the series to fetch.
"use strict";

window.TemperPrefetch = {
  reward: fetch(document.currentScript.dataset.url, { credentials: "same-origin", headers: { Accept: "application/json" } }),
};
