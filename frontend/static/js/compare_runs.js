// Runs compared: each run's series fetched from /api/runs/<id>/series and drawn as one line per
// run (per-domain reward and pass rate for the chosen domain, mean reward, tokens/s); the
// settings table's equal rows are shown on demand.
"use strict";

(() => {
  const { el, api } = Temper;
  const page = Temper.pageData("page-data");
  const PALETTE = ["#3b5bdb", "#e8590c", "#2f9e44", "#c2255c", "#1098ad", "#7048e8"];
  const select = document.getElementById("compare-domain");
  for (const d of page.domains) select.append(el("option", { value: d, text: d }));
  const cache = new Map(); // `${run}|${key}` -> series
  let smoothing = 0.6;

  function ema(values, alpha) {
    const out = [];
    let acc = 0, weight = 0;
    for (const v of values) { acc = alpha * acc + (1 - alpha) * v; weight = alpha * weight + (1 - alpha); out.push(acc / weight); }
    return out;
  }

  async function series(runId, keys) {
    const missing = keys.filter((k) => !cache.has(`${runId}|${k}`));
    if (missing.length) {
      const resp = await api("GET", `/api/runs/${runId}/series?key=${encodeURIComponent(missing.join(","))}`);
      for (const k of missing) cache.set(`${runId}|${k}`, resp.series[k] || null);
    }
    return keys.map((k) => cache.get(`${runId}|${k}`));
  }

  async function draw(id, key, yrange) {
    const traces = [];
    for (const [i, run] of page.runs.entries()) {
      const [s] = await series(run.id, [key]);
      if (!s || !s.step.length) continue;
      traces.push({ x: s.step, y: smoothing ? ema(s.last, smoothing) : s.last, type: "scatter", mode: "lines",
        name: `#${run.id} ${run.name}`, meta: run.id, line: { width: 2, color: PALETTE[i % PALETTE.length] },
        hovertemplate: `#${run.id}: %{y:.4g}<br>step %{x}<extra></extra>` });
    }
    const node = document.getElementById(id);
    await Plotly.react(node, traces, {
      margin: { l: 48, r: 12, t: 24, b: 36 }, height: 260, showlegend: true, legend: { orientation: "h", y: 1.02, yanchor: "bottom" },
      xaxis: { title: { text: "step" } }, yaxis: yrange ? { range: yrange } : { rangemode: "tozero" },
    }, { responsive: true, displaylogo: false });
    node.dataset.runs = traces.map((t) => t.meta).join(",");
  }

  async function drawAll() {
    const d = select.value;
    document.querySelectorAll(".cmp-domain").forEach((n) => { n.textContent = d || "–"; });
    await Promise.all([
      draw("cmp-reward-mean", "reward/mean", [0, 1.05]),
      d ? draw("cmp-reward", `reward/${d}`, [0, 1.05]) : null,
      d ? draw("cmp-pass", `pass_rate/${d}`, [0, 1.05]) : null,
      draw("cmp-throughput", "perf/tokens_per_s"),
    ]);
    document.body.dataset.drawn = String(Date.now());
  }

  select.addEventListener("change", drawAll);
  document.getElementById("compare-smoothing").addEventListener("input", (e) => { smoothing = Number(e.target.value); drawAll(); });
  document.getElementById("diff-all").addEventListener("change", (e) => {
    document.querySelectorAll("#settings-diff tr.same").forEach((tr) => { tr.hidden = !e.target.checked; });
  });
  const start = () => (window.Plotly ? drawAll() : setTimeout(start, 50));
  start();
})();
