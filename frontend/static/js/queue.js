// The quotas & queue page: the scheduler changes it every tick, so its body is re-rendered from
// the server every 3 s.
"use strict";

setInterval(async () => {
  const r = await fetch("?partial=1", { credentials: "same-origin" });
  if (r.ok) {
    document.getElementById("queue-body").innerHTML = await r.text();
    document.getElementById("refreshed").textContent = "updated " + new Date().toLocaleTimeString();
  }
}, 3000);
