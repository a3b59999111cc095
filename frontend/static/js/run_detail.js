// The live run page. The first view of each chart comes from GET /api/runs/<id>/series (min/max/last
// buckets, at most ~1000 per series); new points stream over /ws/runs/<id>/ from that cursor and
// are appended; zooming asks the server for the zoomed range, re-bucketed. Charts redraw at most
// once per animation frame.
"use strict";

(() => {
  const { el, api, fmt } = Temper;
  const page = Temper.pageData("page-data");
  const runId = page.run.id;
  const domains = page.domains;
  const evalDomains = page.eval_domains || domains;  // the held-out chart's: the run's and its suite's
  const OUTCOME_COLORS = {
    pass: "#2f9e44", fail: "#e03131", partial: "#f59f00", timeout: "#9c36b5", memory_limit: "#5f3dc4",
    output_limit: "#1c7ed6", runtime_error: "#e8590c", parse_error: "#868e96", sandbox_error: "#343a40", judge_error: "#c2255c",
  };
  const RUN_KEYS = {
    throughput: ["perf/tokens_per_s", "perf/completions_per_s", "perf/verifications_per_s"],
    stages: ["stage/generate_s", "stage/verify_s", "stage/update_s", "stage/sync_s", "stage/step_s"],
    policy: ["policy/kl", "mismatch/kl", "policy/entropy"],
    length: ["perf/generator_idle_frac", "response/length"],
  };

  // ------------------------------------------------------------------ state
  const store = new Map(); // key -> {step:[], time:[], min:[], max:[], last:[]} (time in ms)
  let cursor = null;       // the live log's position: every point with a larger id comes by socket
  let eventCursor = 0;
  let xAxis = "step";        // step | relative (minutes since the run's start) | time (wall clock)
  let smoothing = 0.6;
  let logY = false;
  let syncZoom = true;        // zooming one chart zooms them all
  let showEvents = true;      // pause, resume, weights, checkpoints, alerts as lines on the charts
  const marks = [];           // those events: {kind, at (ms), step (or null), text}
  const visible = new Set(domains.slice(0, page.visible_at_first));
  let outcomeDomain = domains[0] || "";
  const zoom = {};         // chart id -> {lo, hi, series} while zoomed
  const dirty = new Set();
  const drawn = [];        // {key, step, t}: when a point first reached the screen (bench/live_latency.py)
  // prefetch.js may already have noted the server-drawn chart's first frame (firstDrawMs)
  window.TemperLive = Object.assign(window.TemperLive || {}, { drawn, store, ready: false });

  function series(key) {
    let s = store.get(key);
    if (!s) { s = { step: [], time: [], min: [], max: [], last: [] }; store.set(key, s); }
    return s;
  }

  let following = false;      // the socket is open: later loads leave its cursor alone
  const fetching = new Map(); // key -> live points that arrived while its series was being fetched

  // A fetched series replaces what the page had for its keys; points that came over the socket
  // while it was in flight are added after it (those it already holds are skipped).
  function load(resp, keys) {
    for (const [key, v] of Object.entries(resp.series)) {
      store.set(key, { step: v.step, time: v.time, min: v.min, max: v.max, last: v.last });
    }
    for (const key of keys) {
      series(key);
      const early = fetching.get(key) || [];
      fetching.delete(key);
      append(early);
    }
    if (!following) cursor = cursor === null ? resp.cursor : Math.min(cursor, resp.cursor);
  }

  // Points after the cursor; a point at or before a series' last step is already there (a bucket
  // read a moment after the cursor may hold it), so nothing is drawn twice. Points of series the
  // page has not loaded are dropped (a later fetch reads them from the database), unless that
  // fetch is in flight.
  function append(points) {
    for (const point of points) {
      const [, step, , key, value, timeMs] = point;
      const s = store.get(key);
      if (!s) { fetching.get(key)?.push(point); continue; }
      const n = s.step.length;
      if (n && step <= s.step[n - 1]) {
        // Held-out points are written when a checkpoint's evaluation completes, not always in
        // step order (the base model's may come after a checkpoint's): one the series lacks goes
        // in its place.
        if (!key.startsWith("eval/") || s.step.includes(step)) continue;
        const at = s.step.findIndex((x) => x > step);
        s.step.splice(at, 0, step); s.time.splice(at, 0, timeMs); s.min.splice(at, 0, value);
        s.max.splice(at, 0, value); s.last.splice(at, 0, value);
        markDirtyFor(key);
        continue;
      }
      s.step.push(step); s.time.push(timeMs); s.min.push(value); s.max.push(value); s.last.push(value);
      markDirtyFor(key);
    }
  }

  // ------------------------------------------------------------------ charts
  const CHARTS = {
    "chart-reward": { keys: () => domains.filter((d) => visible.has(d)).map((d) => `reward/${d}`), label: (k) => k.slice(7), yrange: [0, 1.05] },
    "chart-pass": { keys: () => domains.filter((d) => visible.has(d)).map((d) => `pass_rate/${d}`), label: (k) => k.slice(10), yrange: [0, 1.05] },
    "chart-eval": { keys: () => evalDomains.filter((d) => visible.has(d) || !domains.includes(d)).map((d) => `eval/reward/${d}`), label: (k) => k.slice(12), yrange: [0, 1.05], markers: true },
    "chart-outcomes": { keys: () => page.outcomes.map((o) => `outcome/${outcomeDomain}/${o}`), label: (k) => k.split("/").pop(), stacked: true },
    "chart-throughput": { keys: () => RUN_KEYS.throughput, label: (k) => k.split("/").pop(),
      y2: ["perf/completions_per_s", "perf/verifications_per_s"], y2title: "completions, verifications /s", ytitle: "tokens/s" },
    "chart-stages": { keys: () => RUN_KEYS.stages, label: (k) => k.split("/").pop() },
    "chart-policy": { keys: () => RUN_KEYS.policy, label: (k) => k },
    "chart-length": { keys: () => RUN_KEYS.length, label: (k) => k, y2: ["response/length"], y2title: "response/length" },
    "chart-level": { keys: () => domains.filter((d) => visible.has(d)).map((d) => `sampler/level/${d}`), label: (k) => k.slice(14), ytitle: "curriculum level", step: true },
    // The sandbox pool of each visible domain (workers/sandbox/elastic.py): its size and creations per
    // second, and the waits for a sandbox (p50, p99) on the right axis.
    "chart-sandbox": { keys: () => domains.filter((d) => visible.has(d)).flatMap((d) => ["pool_size", "creations_per_s", "wait_p50_s", "wait_p99_s"].map((n) => `sandbox/${d}/${n}`)),
      label: (k) => k.slice(8), y2: (k) => k.includes("/wait_"), y2title: "wait for a sandbox (s)", ytitle: "sandboxes, creations/s" },
  };

  let chartsOfKey = null; // key -> chart ids, rebuilt when the visible keys change
  function markDirtyFor(key) {
    if (chartsOfKey === null) {
      chartsOfKey = new Map();
      for (const [id, spec] of Object.entries(CHARTS)) for (const k of spec.keys()) chartsOfKey.set(k, [...(chartsOfKey.get(k) || []), id]);
    }
    for (const id of chartsOfKey.get(key) || []) dirty.add(id);
    scheduleDraw();
  }

  let frame = null;
  function scheduleDraw() {
    if (frame === null) frame = requestAnimationFrame(drawDirty);
  }

  function ema(values, alpha) {
    if (!alpha) return values;
    const out = new Array(values.length);
    let acc = 0, weight = 0;
    for (let i = 0; i < values.length; i++) {
      acc = alpha * acc + (1 - alpha) * values[i];
      weight = alpha * weight + (1 - alpha);
      out[i] = acc / weight; // debiased, so the first points are not pulled towards 0
    }
    return out;
  }

  const PALETTE = ["#3b5bdb", "#e8590c", "#2f9e44", "#c2255c", "#1098ad", "#f59f00", "#7048e8", "#5c940d", "#d6336c", "#495057"];

  function traces(id, spec) {
    const source = zoom[id] ? zoom[id].series : null;
    const keys = spec.keys();
    const out = [];
    keys.forEach((key, i) => {
      const s = source ? source[key] : store.get(key);
      if (!s || !s.step.length) return;
      const x = xValues(s);
      const color = spec.stacked ? OUTCOME_COLORS[key.split("/").pop()] : PALETTE[i % PALETTE.length];
      const name = spec.label(key);
      const yaxis = spec.y2 && (typeof spec.y2 === "function" ? spec.y2(key) : spec.y2.includes(key)) ? "y2" : "y";
      if (spec.stacked) {
        out.push({ x, y: s.last, customdata: s.step, meta: key, name, type: "scatter", mode: "lines", stackgroup: "one",
          line: { width: 0.5, color }, fillcolor: color, hovertemplate: `${name}: %{y}<br>step %{customdata}<extra></extra>` });
        return;
      }
      const bucketed = s.min.some((v, j) => v !== s.max[j]);
      if (bucketed && keys.length <= 10) { // the min..max envelope of each bucket, faint
        out.push({ x, y: s.max, type: "scatter", mode: "lines", line: { width: 0, color }, showlegend: false, hoverinfo: "skip", yaxis, legendgroup: key });
        out.push({ x, y: s.min, type: "scatter", mode: "lines", line: { width: 0, color }, fill: "tonexty", opacity: 0.15,
          fillcolor: color + "22", showlegend: false, hoverinfo: "skip", yaxis, legendgroup: key });
      }
      if (smoothing > 0) {
        out.push({ x, y: s.last, customdata: s.step, meta: key, type: "scatter", mode: "lines", name: name + " (raw)", showlegend: false,
          line: { width: 1, color }, opacity: 0.25, yaxis, legendgroup: key, hovertemplate: `${name} raw: %{y}<br>step %{customdata}<extra></extra>` });
      }
      if (spec.step) { // a level holds until it changes: steps, not a smoothed line
        out.push({ x, y: s.last, customdata: s.step, type: "scatter", mode: "lines", name, line: { width: 2, color, shape: "hv" },
          hovertemplate: `${name}: level %{y}<br>step %{customdata}<extra></extra>` });
        return;
      }
      if (spec.markers) { // evaluations are few and already averaged over a held-out set: no smoothing
        out.push({ x, y: s.last, customdata: s.step, type: "scatter", mode: "lines+markers", name, line: { width: 2, color },
          hovertemplate: `${name} held-out: %{y:.4g}<br>step %{customdata}<extra></extra>` });
        return;
      }
      out.push({ x, y: ema(s.last, smoothing), customdata: s.step, meta: key, type: "scatter", mode: "lines", name,
        line: { width: 2, color }, yaxis, legendgroup: key, hovertemplate: `${name}: %{y:.4g}<br>step %{customdata}<extra></extra>` });
    });
    return out;
  }

  // The run's start: the first point's time of any series loaded (minutes since it, "relative").
  function startMs() {
    if (page.run.started_at) return Date.parse(page.run.started_at);
    let t0 = Infinity;
    for (const s of store.values()) if (s.time.length && s.time[0] < t0) t0 = s.time[0];
    return Number.isFinite(t0) ? t0 : 0;
  }
  function xValues(s) {
    if (xAxis === "step") return s.step;
    if (xAxis === "time") return s.time;
    const t0 = startMs();
    return s.time.map((t) => (t - t0) / 60000);
  }
  const X_TITLE = { step: "step", relative: "minutes since start", time: "wall time" };

  // Where an event goes on the x-axis: its step where it names one (checkpoints, alerts, weights),
  // else the step (or time) the run was at when it happened.
  const MARK_COLORS = { paused: "#f08c00", resumed: "#2f9e44", preempted: "#f08c00", weights: "#7048e8", weights_applied: "#7048e8",
                        checkpoint: "#868e96", alert: "#c0392b", state: "#495057", level: "#1c7ed6" };
  function markX(m) {
    if (xAxis === "step") return m.step !== null ? m.step : stepAt(m.at, [...store.keys()].filter((k) => k.startsWith("reward/")));
    if (xAxis === "time") return m.at;
    return (m.at - startMs()) / 60000;
  }
  function markOf(e) {
    const d = e.data || {};
    let kind = e.kind;
    if (kind === "state") { if (d.to === "paused") kind = "paused"; else if (d.to === "running" && d.from === "paused") kind = "resumed"; else return null; }
    if (!(kind in MARK_COLORS) || kind === "state") return null;
    // A curriculum level change is named by its domain and level ("sorting L1"), not its kind alone.
    const label = kind === "level" ? `${String(d.domain || "").replace(/^builtin-/, "")} L${d.to}` : kind.replace(/_/g, " ");
    return { kind, label, at: Date.parse(e.at), step: Number.isFinite(d.step) ? d.step : null, text: e.message || kind };
  }

  const markedStep = (() => { const v = Number(new URLSearchParams(location.search).get("step")); return Number.isFinite(v) && v > 0 ? v : null; })();

  function layout(id, spec) {
    const l = {
      margin: { l: 48, r: spec.y2 ? 48 : 12, t: 24, b: 36 }, height: 280, showlegend: true,
      legend: { orientation: "h", x: 0, y: 1.02, yanchor: "bottom", font: { size: 11 } },
      hovermode: "closest", datarevision: revision,
      xaxis: { title: { text: X_TITLE[xAxis] }, type: xAxis === "time" ? "date" : "linear" },
      yaxis: logY && !spec.stacked ? { type: "log" } : (spec.yrange ? { range: spec.yrange } : { rangemode: "tozero" }),
      uirevision: xAxis + id + logY,
    };
    if (spec.ytitle) l.yaxis.title = { text: spec.ytitle };
    if (spec.step && !logY) l.yaxis.dtick = 1; // levels are whole numbers
    if (spec.y2) l.yaxis2 = { overlaying: "y", side: "right", title: { text: spec.y2title }, type: logY ? "log" : "linear",
                              ...(logY ? {} : { rangemode: "tozero" }) };
    if (zoom[id]) l.xaxis.range = zoom[id].range;
    l.shapes = [];
    if (showEvents) {
      // Labels take turns at three heights in the order of their places, so marks a few steps
      // apart stay readable.
      const placed = marks.map((m) => [markX(m), m]).filter(([x]) => x !== null && x !== undefined)
        .sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
      placed.forEach(([x, m], i) => {
        l.shapes.push({ type: "line", x0: x, x1: x, yref: "paper", y0: 0, y1: [1, 0.86, 0.72][i % 3], name: m.kind,
                        line: { dash: "dot", width: 1, color: MARK_COLORS[m.kind] },
                        label: { text: m.label, textposition: "end", textangle: 0, xanchor: "left",
                                 font: { size: 11, color: MARK_COLORS[m.kind] } } });
      });
    }
    if (markedStep !== null && xAxis === "step") { // an alert's link (?step=N): the step it fired at
      l.shapes.push({ type: "line", x0: markedStep, x1: markedStep, yref: "paper", y0: 0, y1: 1, line: { dash: "dot", width: 1.5, color: "#c0392b" } });
    }
    return l;
  }

  const charted = new Set();
  let revision = 0; // arrays grow in place, so tell Plotly.react that the data changed
  function drawDirty() {
    frame = null;
    revision += 1;
    if (!window.Plotly) { setTimeout(scheduleDraw, 50); return; }
    const ids = [...dirty];
    dirty.clear();
    const now = Date.now();
    for (const id of ids) {
      const spec = CHARTS[id];
      const node = document.getElementById(id);
      node.querySelector(":scope > .sketch")?.remove(); // the server-drawn chart, replaced in place
      Plotly.react(node, traces(id, spec), layout(id, spec), { responsive: true, displaylogo: false });
      if (!charted.has(id)) { charted.add(id); wireChart(id, node); }
      node.dataset.points = String(spec.keys().reduce((n, k) => n + (store.get(k)?.step.length || 0), 0));
      node.dataset.drawnAt = String(now);
      const t = Date.now();
      for (const key of spec.keys()) {
        const s = store.get(key);
        if (!s) continue;
        if (s.drawnLen === undefined) { s.drawnLen = s.step.length; continue; } // the initial load is not "live"
        for (let i = s.drawnLen; i < s.step.length; i++) drawn.push({ key, step: s.step[i], t });
        s.drawnLen = s.step.length;
      }
      if (id === "chart-reward" && window.TemperLive.plotlyDrawMs === undefined && node.dataset.points !== "0") {
        window.TemperLive.plotlyDrawMs = performance.now(); // plotly's first reward chart with points
        if (window.TemperLive.firstDrawMs === undefined) window.TemperLive.firstDrawMs = window.TemperLive.plotlyDrawMs;
      }
    }
    if (drawn.length > 20000) drawn.splice(0, drawn.length - 10000);
  }

  // ------------------------------------------------------------------ zoom: re-bucket on the server
  function stepAt(time, keys) {
    for (const key of keys) {
      const s = store.get(key);
      if (!s || !s.time.length) continue;
      let lo = 0, hi = s.time.length - 1;
      while (lo < hi) { const mid = (lo + hi) >> 1; if (s.time[mid] < time) lo = mid + 1; else hi = mid; }
      return s.step[lo];
    }
    return 0;
  }

  // Plotly's date axes hold UTC milliseconds and report ranges as "YYYY-MM-DD HH:MM:SS.sss" (UTC).
  function plotlyDate(v) { return typeof v === "number" ? v : Date.parse(String(v).replace(" ", "T") + "Z"); }

  // A zoom's x range as steps: the server re-buckets the series between them.
  function stepsOf(a, b, keys) {
    if (xAxis === "step") { const lo = Math.max(0, Math.floor(a)); return [lo, Math.max(lo, Math.ceil(b))]; }
    const toMs = (v) => (xAxis === "time" ? plotlyDate(v) : startMs() + Number(v) * 60000);
    const lo = stepAt(toMs(a), keys);
    return [lo, Math.max(lo, stepAt(toMs(b), keys))];
  }

  async function zoomTo(id, a, b) {
    const keys = CHARTS[id].keys();
    const timeKeys = keys.length ? keys : ["perf/tokens_per_s"];
    const [lo, hi] = stepsOf(a, b, [...timeKeys, ...[...store.keys()].filter((k) => k.startsWith("reward/"))]);
    const resp = keys.length ? await api("GET", `/api/runs/${runId}/series?key=${encodeURIComponent(keys.join(","))}&lo=${lo}&hi=${hi}`)
      : { series: {}, width: 1 };
    const zoomed = {};
    for (const [key, v] of Object.entries(resp.series)) {
      zoomed[key] = { step: v.step, time: v.time, min: v.min, max: v.max, last: v.last };
    }
    zoom[id] = { lo, hi, range: [a, b], series: zoomed, width: resp.width };
    const node = document.getElementById(id);
    node.dataset.zoomWidth = String(resp.width);
    node.dataset.zoomRange = `${lo}-${hi}`;
    dirty.add(id);
    scheduleDraw();
  }

  function wireChart(id, node) {
    node.on("plotly_relayout", async (ev) => {
      const targets = syncZoom ? Object.keys(CHARTS) : [id];
      if (ev["xaxis.autorange"]) {
        for (const t of targets) { delete zoom[t]; delete document.getElementById(t).dataset.zoomRange; dirty.add(t); }
        scheduleDraw();
        return;
      }
      const a = ev["xaxis.range[0]"], b = ev["xaxis.range[1]"];
      if (a === undefined || b === undefined) return;
      await Promise.all(targets.map((t) => zoomTo(t, a, b)));
    });
    node.on("plotly_click", (ev) => {
      const pt = ev.points && ev.points[0];
      if (!pt || !pt.data.meta) return;
      const parts = pt.data.meta.split("/");
      const domain = parts[0] === "outcome" ? parts[1] : parts.slice(1).join("/");
      const step = Array.isArray(pt.customdata) ? pt.customdata[0] : pt.customdata;
      showTrajectories(domains.includes(domain) ? { step, domain } : { step });
    });
  }

  // ------------------------------------------------------------------ trajectory explorer
  // Filters by step, domain, outcome, reward and length, one task across steps, or one trajectory;
  // the view's filters live in the page's URL (t.step=..., t.trajectory=...), so a link shares it.
  const TRAJ_FIELDS = ["step", "domain", "outcome", "min_reward", "max_reward", "min_length", "max_length", "task_id", "flag", "trajectory"];
  const trajForm = document.getElementById("traj-filters");
  for (const d of domains) trajForm.elements.domain.append(el("option", { value: d, text: d }));
  for (const o of page.outcomes) trajForm.elements.outcome.append(el("option", { value: o, text: o }));
  let trajFilter = {};

  function trajUrl(filter) {
    const u = new URL(location.href);
    for (const k of [...u.searchParams.keys()]) if (k.startsWith("t.")) u.searchParams.delete(k);
    for (const [k, v] of Object.entries(filter)) u.searchParams.set("t." + k, v);
    return u.toString();
  }
  function readTrajForm() {
    const f = {};
    for (const k of TRAJ_FIELDS) {
      const v = trajForm.elements[k] ? trajForm.elements[k].value.trim() : "";
      if (v !== "") f[k] = v;
    }
    return f;
  }
  function describe(f) {
    if (f.trajectory) return `trajectory ${f.trajectory}`;
    const parts = [f.step !== undefined ? `step ${f.step}` : "all steps"];
    if (f.task_id) parts.push(`task ${f.task_id}`);
    if (f.domain) parts.push(f.domain);
    if (f.outcome) parts.push(f.outcome);
    if (f.min_reward || f.max_reward) parts.push(`reward ${f.min_reward ?? "…"}–${f.max_reward ?? "…"}`);
    if (f.min_length || f.max_length) parts.push(`length ${f.min_length ?? "…"}–${f.max_length ?? "…"}`);
    if (f.flag) parts.push({ canary: "canaries", tampered: "tampered", regrade: "regrade failed" }[f.flag] || f.flag);
    return parts.join(" · ");
  }
  function verdictText(t, field) {
    const d = (t.details && t.details.details) || {};
    const v = field === "expected" ? (d.expected ?? d.judge_reference ?? d.answer) : d.found;
    if (v === undefined || v === null) return null;
    return typeof v === "string" ? v : JSON.stringify(v);
  }

  // A CAD answer's solid, drawn by the verifier (a small PNG data URL; nothing else is shown as an image).
  function thumbnailOf(verifier) {
    const src = verifier && verifier.thumbnail;
    if (typeof src !== "string" || !src.startsWith("data:image/png;base64,")) return null;
    return el("img", { src, class: "thumb", alt: "the solid the script made", "data-testid": "traj-thumbnail", width: 72, height: 72 });
  }

  // A multi-turn episode: the model's turns and the tool outputs between them (masked out of the
  // loss: shown apart, never trained on); the completion column holds what the verifier judged.
  // A shell episode's observation also names its command and how it ended (exit status or the
  // limit that killed it): shown as "$ command" above the output, with the ending as a badge.
  function turnView(x) {
    if (x.role === "model") {
      return el("div", { class: "turn model" }, el("div", { class: "muted small", text: "model" }), el("pre", { text: x.text }));
    }
    const shell = typeof x.command === "string";
    const ok = x.exit === "exit 0";
    return el("div", { class: "turn tool", "data-testid": shell ? "traj-command" : null },
      el("div", { class: "muted small", text: shell ? "command output (not trained on)" : "tool output (not trained on)" }),
      shell ? el("pre", { class: "command", "data-testid": "traj-command-line", text: `$ ${x.command}` }) : null,
      el("pre", { text: x.text }),
      shell && x.exit ? el("span", { class: `badge ${ok ? "exit-ok" : "exit-bad"}`, "data-testid": "traj-exit", text: x.exit }) : null);
  }

  function transcriptView(transcript) {
    const turns = transcript.filter((x) => x.role === "model").length;
    const commands = transcript.filter((x) => typeof x.command === "string").length;
    return el("details", { "data-testid": "traj-transcript" },
      el("summary", { text: `${turns} turn${turns === 1 ? "" : "s"}${commands ? ` · ${commands} command${commands === 1 ? "" : "s"}` : ""}` }),
      ...transcript.map(turnView));
  }

  // Files the verification handed back (a final diff, a test report, a solid): name and size, a
  // download for the stored ones (served as attachments, never rendered), why not for the others.
  function sizeText(n) {
    return n < 1024 ? `${n} B` : n < 1 << 20 ? `${(n / 1024).toFixed(1)} KiB` : `${(n / (1 << 20)).toFixed(1)} MiB`;
  }
  function artifactsView(artifacts) {
    if (!artifacts || !artifacts.length) return null;
    return el("div", { class: "artifacts", "data-testid": "traj-artifacts" },
      el("div", { class: "muted small", text: "artifacts" }),
      el("ul", {}, ...artifacts.map((a) => el("li", { "data-testid": "traj-artifact", "data-name": a.name },
        a.url ? el("a", { href: a.url, download: a.name.split("/").pop(), text: a.name }) : el("span", { text: a.name }),
        el("span", { class: "muted small", text: ` ${sizeText(a.size)}${a.truncated ? " (truncated)" : ""}${a.refused ? " · " + a.refused : ""}` })))));
  }

  async function showTrajectories(filter) {
    trajFilter = { ...filter };
    for (const k of TRAJ_FIELDS) if (trajForm.elements[k]) trajForm.elements[k].value = trajFilter[k] ?? "";
    history.replaceState(null, "", trajUrl(trajFilter));
    const box = document.getElementById("trajectories");
    box.hidden = false;
    box.scrollIntoView({ block: "start" }); // its title and filters in view at once, before the rows load
    const title = document.getElementById("traj-title");
    title.textContent = `${describe(trajFilter)} · loading…`;
    let page_;
    try {
      page_ = await api("GET", `/api/runs/${runId}/trajectories?${new URLSearchParams({ ...trajFilter, limit: 100 })}`);
    } catch (e) {
      title.textContent = `${describe(trajFilter)} · ${e.message}`;
      box.querySelector("tbody").replaceChildren();
      return;
    }
    const items = page_.items || page_;
    const total = page_.count ?? items.length;
    title.textContent = `${describe(trajFilter)} · ${total} sampled`;
    document.getElementById("traj-more").hidden = total <= items.length;
    box.querySelector("tbody").replaceChildren(...items.map((t) => {
      const expected = verdictText(t, "expected"), found = verdictText(t, "found");
      const across = el("button", { type: "button", class: "secondary small", "data-testid": "traj-across",
        title: "This task at every step it was sampled", text: "across steps" });
      across.addEventListener("click", () => showTrajectories({ domain: t.domain, task_id: t.task_id }));
      const link = el("a", { href: trajUrl({ trajectory: t.id }), "data-testid": "traj-link", text: "link" });
      const { details: verifier, transcript, ...rest } = t.details || {};
      return el("tr", { "data-testid": "trajectory", "data-id": t.id, "data-outcome": t.outcome },
        el("td", { text: String(t.step) }),
        el("td", {}, el("div", { text: `${t.domain} ${t.task_id}` }), t.task_id ? across : null),
        el("td", {}, el("span", { class: `outcome ${t.outcome}`, text: t.outcome }),
          rest.canary ? el("div", { class: "badge audit-warn", "data-testid": "traj-canary", title: `impossible twin of task ${rest.canary.of} (${rest.canary.recipe}): never trained on; a pass is evidence of gaming`, text: "canary" }) : null,
          verifier && verifier.tampered && verifier.tampered.length
            ? el("div", { class: "muted small", "data-testid": "traj-tampered", text: `changed ${verifier.tampered.join(", ")}` }) : null,
          rest.regrade ? el("div", { class: "badge audit-warn", "data-testid": "traj-regrade", title: "a stricter grading of the same task (more cases, fresh inputs) did not pass it",
            text: `regrade: ${rest.regrade.outcome}` }) : null),
        el("td", { text: fmt(t.reward) }),
        el("td", {}, el("pre", { class: "expected", "data-testid": "traj-expected", text: expected ?? "–" })),
        el("td", {}, found !== null && found !== t.completion ? el("div", { class: "muted small", "data-testid": "traj-found", text: `read as: ${found}` }) : null,
          thumbnailOf(verifier),
          el("pre", { text: t.completion })),
        el("td", {},
          el("details", {}, el("summary", { text: "prompt" }), el("pre", { text: t.prompt })),
          transcript && transcript.length ? transcriptView(transcript) : null,
          artifactsView(t.artifacts),
          el("details", { "data-testid": "traj-verifier" }, el("summary", { text: `verifier${verifier && verifier.stage ? ": " + verifier.stage : ""}` }),
            el("pre", { class: "details", text: JSON.stringify({ ...(verifier || {}), ...rest }, null, 1) })),
          link));
    }));
    if (!items.length) box.querySelector("tbody").append(el("tr", {}, el("td", { colspan: 7, text: "No sampled trajectory matches." })));
    box.scrollIntoView({ block: "start" }); // again: the charts above may have grown while the rows loaded
  }

  trajForm.addEventListener("submit", (e) => { e.preventDefault(); showTrajectories(readTrajForm()); });
  document.getElementById("traj-clear").addEventListener("click", () => showTrajectories({}));
  document.getElementById("traj-share").addEventListener("click", async (e) => {
    const url = trajUrl(trajFilter);
    e.target.dataset.url = url;
    try { await navigator.clipboard.writeText(url); e.target.textContent = "Link copied"; }
    catch (_) { window.prompt("Link to this view", url); }
  });
  { // a shared link opens the explorer on its view
    const shared = {};
    for (const [k, v] of new URLSearchParams(location.search)) if (k.startsWith("t.") && TRAJ_FIELDS.includes(k.slice(2))) shared[k.slice(2)] = v;
    if (Object.keys(shared).length) showTrajectories(shared);
  }

  // ------------------------------------------------------------------ status, waiting on, events
  function setStatus(s) {
    const badge = document.getElementById("run-state");
    badge.textContent = s.state;
    badge.className = "state " + s.state;
    document.getElementById("run-step").textContent = s.step;
    document.getElementById("run-progress").value = s.step;
    page.run.state = s.state;
    renderControls();
    renderWaiting(s);
  }

  let lastStatus = null;
  function renderWaiting(s) {
    lastStatus = s || lastStatus;
    const box = document.getElementById("waiting");
    if (!lastStatus) return;
    const st = lastStatus;
    if (st.state === "queued") {
      const q = st.queued || {};
      box.replaceChildren(el("p", { text: q.reason || "waiting for the scheduler" }),
        el("p", { class: "muted", text: [q.position && `position ${q.position}`, q.binding && `bound by ${q.binding}`,
          q.limit !== undefined && q.limit !== null && `${q.used}/${q.limit}`].filter(Boolean).join(" · ") }));
      return;
    }
    if (st.state === "paused") {
      const note = st.paused || {};
      box.replaceChildren(el("p", { text: note.reason || "paused by a user; resume it to continue" }),
        el("p", { class: "muted", text: [note.binding && `bound by ${note.binding}`,
          note.resume_when_served && `resumes by itself once a worker serves ${note.resume_when_served}`].filter(Boolean).join(" · ") }));
      return;
    }
    const inflight = st.inflight || {};
    if (st.state !== "running" || !inflight.phase) {
      box.replaceChildren(el("p", { class: "muted", text: st.state === "running" ? "starting…" : `nothing: the run is ${st.state}` }));
      return;
    }
    const age = inflight.since ? ((Date.now() - Date.parse(inflight.since)) / 1000).toFixed(1) + " s" : "";
    const rows = Object.entries(inflight.per_domain || {}).map(([d, n]) =>
      el("tr", {}, el("td", { text: d }), el("td", { text: n }), el("td", { text: age })));
    box.replaceChildren(el("p", {}, el("b", { text: inflight.phase }), ` for ${age}`, st.driver ? ` on ${st.driver}` : "",
      st.preempt_requested ? " · preemption requested" : ""),
      rows.length ? el("table", { class: "grid compact" }, el("thead", {}, el("tr", {}, el("th", { text: "domain" }), el("th", { text: "in flight" }), el("th", { text: "age" }))), el("tbody", {}, ...rows)) : "");
  }
  setInterval(() => renderWaiting(), 1000);

  // The driver resumed from a checkpoint: the steps after it were forgotten and are trained again.
  const rewound = (e) => e.kind === "resumed" && e.data && e.data.checkpoint_step !== undefined;
  function addEvents(events) {
    const list = document.getElementById("events");
    let marked = false;
    for (const e of events) {
      list.prepend(el("li", { "data-kind": e.kind }, el("time", { text: new Date(e.at).toLocaleTimeString() }), " ",
        el("b", { text: e.kind }), " ", e.message || ""));
      if (rewound(e) && window.TemperLive.ready) reloadAll();
      const m = markOf(e);
      if (m) { marks.push(m); marked = true; }
    }
    if (marked && showEvents) redrawAll(Object.keys(CHARTS));
  }

  // ------------------------------------------------------------------ controls
  function renderControls() {
    const s = page.run.state;
    const ended = ["completed", "failed", "cancelled"].includes(s);
    const weights = document.getElementById("weights-form");
    if (weights && ended) { // an ended run's mix is history: nothing to apply it to
      weights.querySelectorAll("input, button").forEach((n) => { n.disabled = true; });
      weights.dataset.state = "ended";
    }
    const box = document.getElementById("controls");
    if (!box) return;
    const allowed = { pause: s === "running", resume: s === "paused", cancel: !ended };
    box.querySelectorAll("button[data-action]").forEach((b) => { b.disabled = !allowed[b.dataset.action]; });
  }

  document.getElementById("controls")?.addEventListener("click", async (e) => {
    const action = e.target.dataset.action;
    if (!action) return;
    if (action === "cancel" && !confirm("Cancel this run? It cannot be resumed.")) return;
    e.target.disabled = true;
    try {
      const run = await api("POST", `/api/runs/${runId}/${action}`);
      setStatus({ ...(lastStatus || {}), state: run.state, step: run.current_step });
    } catch (err) {
      Temper.flash(`${action}: ${err.detail}`);
      renderControls();
    }
  });

  const weightsForm = document.getElementById("weights-form");
  if (weightsForm) {
    weightsForm.querySelector("tbody").replaceChildren(...Object.entries(page.weights).map(([d, w]) =>
      el("tr", {}, el("td", { text: d }), el("td", {}, el("input", { type: "number", step: "any", min: "0", name: d, value: w, "data-testid": `run-weight-${d}` })))));
    weightsForm.addEventListener("submit", async (e) => {
      e.preventDefault();
      const weights = {};
      weightsForm.querySelectorAll("input").forEach((i) => { weights[i.name] = Number(i.value); });
      const status = document.getElementById("weights-error");
      try {
        await api("POST", `/api/runs/${runId}/weights`, { weights });
        const paused = Object.keys(weights).filter((d) => weights[d] === 0);
        status.textContent = "saved; applied at the next step" + (paused.length ? ` (${paused.join(", ")} paused)` : "");
        status.className = "field-ok";
      } catch (err) {
        status.textContent = (err.errors || []).map((x) => `${x.path}: ${x.message}`).join("; ") || err.detail;
        status.className = "field-error";
      }
    });
  }

  // ------------------------------------------------------------------ toolbar
  const toggles = document.getElementById("domain-toggles");
  function renderToggles() {
    const all = el("button", { type: "button", class: "link", text: visible.size === domains.length ? "none" : "all", onclick: () => {
      if (visible.size === domains.length) visible.clear(); else domains.forEach((d) => visible.add(d));
      renderToggles(); showDomains();
    } });
    toggles.replaceChildren(el("span", { class: "muted", text: `domains (${visible.size}/${domains.length}): ` }), all,
      ...domains.map((d) => {
        const box = el("input", { type: "checkbox", "data-testid": `toggle-${d}` });
        box.checked = visible.has(d);
        box.addEventListener("change", () => { box.checked ? visible.add(d) : visible.delete(d); renderToggles(); showDomains(); });
        return el("label", { class: "inline toggle" }, box, " " + d);
      }));
  }
  const outcomeSelect = document.getElementById("outcome-domain");
  domains.forEach((d) => outcomeSelect.append(el("option", { value: d, text: d })));
  outcomeSelect.addEventListener("change", async () => {
    outcomeDomain = outcomeSelect.value;
    await fetchMissing(CHARTS["chart-outcomes"].keys());
    redrawAll(["chart-outcomes"]);
  });

  const PER_DOMAIN = ["chart-reward", "chart-pass", "chart-eval", "chart-level", "chart-sandbox"];
  async function showDomains() {
    await fetchMissing(PER_DOMAIN.flatMap((id) => CHARTS[id].keys()));
    redrawAll(PER_DOMAIN);
  }
  document.getElementById("x-axis").addEventListener("change", (e) => {
    xAxis = e.target.value;
    Object.keys(zoom).forEach((k) => delete zoom[k]);
    redrawAll(Object.keys(CHARTS));
  });
  const smoothingInput = document.getElementById("smoothing");
  smoothingInput.addEventListener("input", () => {
    smoothing = Number(smoothingInput.value);
    document.getElementById("smoothing-value").textContent = smoothing.toFixed(2);
    redrawAll(Object.keys(CHARTS).filter((id) => !CHARTS[id].stacked));
  });

  document.getElementById("log-y").addEventListener("change", (e) => { logY = e.target.checked; redrawAll(Object.keys(CHARTS)); });
  document.getElementById("sync-zoom").addEventListener("change", (e) => { syncZoom = e.target.checked; });
  document.getElementById("show-events").addEventListener("change", (e) => { showEvents = e.target.checked; redrawAll(Object.keys(CHARTS)); });

  // ------------------------------------------------------------------ export: CSV and PNG of any chart
  function csvOf(id) {
    const rows = [["key", "step", "time", "value", "min", "max"]];
    for (const key of CHARTS[id].keys()) {
      const s = zoom[id] ? zoom[id].series[key] : store.get(key);
      if (!s) continue;
      for (let i = 0; i < s.step.length; i++) {
        rows.push([key, s.step[i], new Date(s.time[i]).toISOString(), s.last[i], s.min[i], s.max[i]]);
      }
    }
    return rows.map((r) => r.map((v) => (/[",\n]/.test(String(v)) ? `"${String(v).replace(/"/g, '""')}"` : String(v))).join(",")).join("\n") + "\n";
  }
  function download(name, blob) {
    const a = el("a", { href: URL.createObjectURL(blob), download: name });
    document.body.append(a);
    a.click();
    setTimeout(() => { URL.revokeObjectURL(a.href); a.remove(); }, 0);
  }
  for (const id of Object.keys(CHARTS)) {
    const title = document.getElementById(id)?.closest("section")?.querySelector("h2");
    if (!title) continue;
    const name = `run-${runId}-${id.slice(6)}`;
    const csv = el("button", { type: "button", class: "secondary small", "data-testid": `csv-${id}`, text: "CSV" });
    csv.addEventListener("click", () => download(`${name}.csv`, new Blob([csvOf(id)], { type: "text/csv" })));
    const png = el("button", { type: "button", class: "secondary small", "data-testid": `png-${id}`, text: "PNG" });
    png.addEventListener("click", () => window.Plotly && Plotly.downloadImage(document.getElementById(id), { format: "png", filename: name, width: 1000, height: 400 }));
    title.append(" ", csv, " ", png);
  }

  function redrawAll(ids) { chartsOfKey = null; ids.forEach((id) => dirty.add(id)); scheduleDraw(); }

  // ------------------------------------------------------------------ loading and the socket
  async function fetchSeries(keys, prefetched) {
    if (!keys.length) return null;
    keys.forEach((k) => fetching.set(k, []));
    let resp;
    if (prefetched) { // started by the page's head, before plotly.min.js loaded
      const r = await prefetched;
      if (!r.ok) throw { status: r.status, detail: r.statusText, errors: [] };
      resp = await r.json();
    } else {
      resp = await api("GET", `/api/runs/${runId}/series?${new URLSearchParams({ key: keys.join(",") })}`);
    }
    load(resp, keys);
    return resp;
  }

  function fetchMissing(keys) {
    return fetchSeries(keys.filter((k) => !store.has(k) && !fetching.has(k)));
  }

  // What the page shows first: the visible domains' series, the chosen domain's outcomes and the
  // run-wide charts. Each chart is drawn as soon as its data is in.
  async function reloadAll() {
    store.clear();
    const show = (ids) => () => redrawAll(ids);
    const prefetched = window.TemperPrefetch && window.TemperPrefetch.reward;
    if (window.TemperPrefetch) delete window.TemperPrefetch.reward;
    await Promise.all([
      fetchSeries(CHARTS["chart-reward"].keys(), prefetched).then(show(["chart-reward"])),
      fetchSeries(CHARTS["chart-pass"].keys()).then(show(["chart-pass"])),
      fetchSeries(CHARTS["chart-eval"].keys()).then(show(["chart-eval"])),
      outcomeDomain ? fetchSeries(CHARTS["chart-outcomes"].keys()).then(show(["chart-outcomes"])) : null,
      fetchSeries(CHARTS["chart-level"].keys()).then(show(["chart-level"])),
      fetchSeries(CHARTS["chart-sandbox"].keys()).then(show(["chart-sandbox"])),
      fetchSeries(Object.values(RUN_KEYS).flat()),
    ]);
    redrawAll(Object.keys(CHARTS));
    window.TemperLive.loads = (window.TemperLive.loads || 0) + 1;
  }

  renderToggles();
  renderControls();
  const badge = document.getElementById("live-state");
  reloadAll().then(() => {
    window.TemperLive.ready = true;
    following = true;
    Temper.liveSocket(`/ws/runs/${runId}/`, {
      hello: () => ({ cursor, event_cursor: eventCursor }),
      onMessage(m) {
        if (m.type === "metrics") { append(m.points); cursor = m.cursor; }
        else if (m.type === "events") { addEvents(m.events); eventCursor = m.event_cursor; }
        else if (m.type === "status") setStatus(m);
        else if (m.type === "feed") {  // the server's updates: live, or catching up after a broker fault
          badge.textContent = m.state === "live" ? "live" : "catching up";
          badge.dataset.state = m.state;
          badge.title = m.reason || "";
        }
        else if (m.type === "error") Temper.flash(m.message);
      },
      onState(s, detail) { badge.textContent = detail || s; badge.dataset.state = s; },
    });
  }).catch((err) => Temper.flash(`could not load the run's metrics: ${err.detail || err}`));
})();
