// The review page's "new queue" form (admins only): POST /api/review/queues, then open the queue.
"use strict";

document.getElementById("queue-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const f = e.target, out = document.getElementById("queue-errors");
  out.textContent = "";
  const body = { team: f.dataset.team, name: f.name.value, domain: f.domain.value, judge: f.judge.value,
                 strategy: f.strategy.value, size: Number(f.size.value), reviewers_per_item: Number(f.reviewers_per_item.value) };
  try {
    const q = await Temper.api("POST", "/api/review/queues", body);
    location.assign(`/review/queues/${q.id}/`);
  } catch (err) {
    out.textContent = (err.errors || []).map((x) => `${x.path}: ${x.message}`).join("; ") || err.detail;
  }
});
