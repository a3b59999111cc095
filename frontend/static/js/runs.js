// The runs list: rows update in place from /ws/runs/ (state, progress, latest reward, priority);
// a run that appears for the team being looked at is added at the top, unless the list is filtered
// or sorted (the server chose its rows: a new run may not belong there, and the top is not its place).
"use strict";

(() => {
  const table = document.querySelector("#runs tbody");
  const filtered = document.getElementById("runs").hasAttribute("data-filtered");
  const team = Temper.pageData("current-team");
  const { el, fmt } = Temper;

  function row(run) {
    return el("tr", { "data-run": run.id, "data-team": run.team },
      el("td", {}, el("input", { type: "checkbox", name: "run", value: run.id, "aria-label": `compare run ${run.id}`,
                                 "data-testid": `compare-run-${run.id}` })),
      el("td", { text: run.id }),
      el("td", {}, el("a", { href: `/runs/${run.id}/`, text: run.name })),
      el("td", {}, el("span", { class: "state " + run.state, "data-field": "state", text: run.state })),
      el("td", { text: run.team }),
      el("td", {}, el("progress", { max: run.budget_steps, value: run.step, "data-field": "progress" }), " ",
        el("span", { "data-field": "step", text: run.step }), ` / ${run.budget_steps}`),
      el("td", { "data-field": "reward", text: fmt(run.reward) }),
      el("td", { "data-field": "priority", text: run.priority }),
      el("td", { text: "just now" }));
  }

  function update(run) {
    let tr = table.querySelector(`tr[data-run="${run.id}"]`);
    if (!tr) {
      if (filtered || (team && run.team !== team)) return;
      table.querySelector("tr.empty")?.remove();
      table.prepend(row(run));
      return;
    }
    const state = tr.querySelector('[data-field="state"]');
    state.textContent = run.state;
    state.className = "state " + run.state;
    tr.querySelector('[data-field="progress"]').value = run.step;
    tr.querySelector('[data-field="step"]').textContent = run.step;
    tr.querySelector('[data-field="reward"]').textContent = fmt(run.reward);
    tr.querySelector('[data-field="priority"]').textContent = run.priority;
  }

  const badge = document.getElementById("live-state");
  Temper.liveSocket("/ws/runs/", {
    onMessage(m) {
      if (m.type !== "runs") return;
      m.runs.slice().reverse().forEach(update);
      table.dataset.synced = "1";  // the rows have met the server's state once
    },
    onState(s, detail) { badge.textContent = detail || s; badge.dataset.state = s; },
  });
})();
