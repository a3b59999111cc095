/* Review pages: keyboard labelling of a queue, live agreement statistics, judge admin actions.
 *
 * Everything goes through the REST API (/api/review/..., /api/judges/...), so the server's rules
 * hold: blind scores until submit, reservations, and the calibration threshold on promote.
 *
 * Keyboard shortcuts on a queue page:
 *   p or 1 = pass, f or 0 = fail (pass/fail and 0-1 judges);  1-5 = score (ordinal judges)
 *   s = skip (type a reason, Enter confirms, Esc cancels);     n = reload the next item
 *   u = take back your latest label (the item comes back, blind)
 *
 * The next item is fetched while you read this one (its id excluded, and those whose labels are
 * on their way), so a label shows the next item at once; the label's answer (the judge's score,
 * the statistics) follows when the server has it.
 */
(function () {
  "use strict";

  const initialEl = document.getElementById("review-initial");
  const initial = initialEl ? JSON.parse(initialEl.textContent) : {};

  function csrf() {
    const input = document.querySelector("input[name=csrfmiddlewaretoken]");
    if (input) return input.value;
    const m = document.cookie.match(/(?:^|; )csrftoken=([^;]+)/);
    return m ? decodeURIComponent(m[1]) : "";
  }

  async function api(method, path, body) {
    const resp = await fetch(path, {
      method,
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrf() },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    let data = null;
    try { data = await resp.json(); } catch (e) { data = null; }
    if (!resp.ok) {
      const detail = data && data.detail ? data.detail : resp.statusText;
      const fields = data && data.errors && data.errors.length
        ? ": " + data.errors.map((e) => (e.path ? e.path + " " : "") + e.message).join("; ") : "";
      const err = new Error(detail + fields);
      err.status = resp.status;
      throw err;
    }
    return data;
  }

  const $ = (id) => document.getElementById(id);

  function showMessage(text) {
    const el = $("message");
    if (!el) return;
    el.textContent = text || "";
    el.hidden = !text;
  }

  function fmt(x) {
    return x === null || x === undefined ? "–" : Number(x).toFixed(3);
  }

  function flash(el) {
    if (!el) return;
    el.classList.remove("flash");
    void el.offsetWidth; // restart the animation
    el.classList.add("flash");
  }

  // ------------------------------------------------------------------ statistics panel
  function renderStats(stats) {
    if (!stats || !$("stats")) return;
    $("stat-n").textContent = stats.n;
    for (const [name, m] of Object.entries(stats.metrics || {})) {
      const set = (id, text) => { const el = $(id); if (el && el.textContent !== text) { el.textContent = text; flash(el); } };
      set("stat-" + name, fmt(m.value));
      set("stat-" + name + "-ci", m.ci[0] === null ? "–" : "[" + fmt(m.ci[0]) + ", " + fmt(m.ci[1]) + "]");
      set("stat-" + name + "-ipw", fmt(m.ipw));
      set("stat-" + name + "-ipw-ci", m.ipw_ci[0] === null ? "–" : "[" + fmt(m.ipw_ci[0]) + ", " + fmt(m.ipw_ci[1]) + "]");
    }
    const alpha = $("stat-alpha");
    if (alpha) alpha.textContent = stats.krippendorff_alpha === null ? "– (needs two reviewers on an item)" : fmt(stats.krippendorff_alpha);
    const warnings = $("stat-warnings");
    if (warnings) {
      warnings.replaceChildren(...(stats.warnings || []).map((w) => { const li = document.createElement("li"); li.textContent = w; return li; }));
    }
    const conf = $("confusion");
    if (conf && stats.confusion) {
      const labels = stats.confusion.labels;
      const rows = [["judge \\ human", ...labels.map(String)]].concat(
        (stats.confusion.matrix || []).map((row, i) => [String(labels[i]), ...row.map((v) => String(Math.round(v * 100) / 100))]));
      conf.replaceChildren(...rows.map((cells, r) => {
        const tr = document.createElement("tr");
        cells.forEach((c, i) => { const td = document.createElement(r === 0 || i === 0 ? "th" : "td"); td.textContent = c; tr.appendChild(td); });
        return tr;
      }));
    }
    const rel = $("reliability");
    if (rel && stats.reliability) {
      const head = document.createElement("tr");
      ["judge score", "items", "mean score", "human pass rate"].forEach((h) => { const th = document.createElement("th"); th.textContent = h; head.appendChild(th); });
      rel.replaceChildren(head, ...stats.reliability.map((b) => {
        const tr = document.createElement("tr");
        [b.lo.toFixed(1) + "–" + b.hi.toFixed(1), String(b.count), fmt(b.mean_score), fmt(b.human_pass_rate)].forEach((c) => {
          const td = document.createElement("td"); td.textContent = c; tr.appendChild(td);
        });
        return tr;
      }));
    }
  }

  // ------------------------------------------------------------------ labelling
  function queuePage(root) {
    const queueId = root.dataset.queueId;
    const format = root.dataset.format;
    let current = null;      // the item on the screen
    let upcoming = null;     // the next one, fetched ahead and reserved
    let prefetching = null;  // the fetch of `upcoming`, while in flight
    const pending = new Set(); // items whose labels are on their way
    let history = initial.history || [];
    const timing = (window.TemperReview = { shows: [] });  // ms from a label to the next item shown
    // Labels go out faster than their answers come back, and the answers may come back in any
    // order: each request is numbered when sent, history keeps the order labels were given, and
    // the counters and statistics are read afresh from the server once nothing is in flight (an
    // answer that overtook a later one would otherwise leave its older counts on the screen).
    let sent = 0;
    let undosWanted = 0;     // undo presses that came while labels were on their way
    timing.settled = 0;      // times the counters were read afresh after a burst

    function setProgress(p) {
      if (!p) return;
      if ($("progress-mine") && p.mine !== undefined) $("progress-mine").textContent = p.mine;
      if ($("progress-complete")) $("progress-complete").textContent = p.complete;
      if ($("progress-items")) $("progress-items").textContent = p.items;
    }

    function showItem(item) {
      current = item;
      $("item").hidden = !item;
      $("done").hidden = !!item;
      if (document.activeElement === $("skip-reason")) $("skip-reason").blur();
      $("skip-form").hidden = true;
      if (!item) return;
      $("item").dataset.itemId = item.id;
      $("item-id").textContent = item.id;
      $("item-task").textContent = item.task_id || "–";
      $("item-prompt").textContent = item.prompt;
      $("item-completion").textContent = item.completion;
      $("item-reference").textContent = item.reference || "(none)";
      const judge = $("item-judge");
      judge.hidden = item.judge_raw === null || item.judge_raw === undefined;
      if (!judge.hidden) $("item-judge-score").textContent = item.judge_raw + " (" + fmt(item.judge_score) + ")";
    }

    function excluded() {
      return [current ? current.id : null, ...pending].filter((x) => x !== null).join(",");
    }

    function prefetch() {
      upcoming = null;
      if (!current) { prefetching = null; return; }
      const fetching = api("POST", "/api/review/queues/" + queueId + "/next?exclude=" + excluded())
        .then((data) => { if (prefetching === fetching) upcoming = data.item; return data; })
        .catch(() => null)  // the label path fetches again when it finds nothing ahead
        .finally(() => { if (prefetching === fetching) prefetching = null; });
      prefetching = fetching;
    }

    async function next() {
      showMessage("");
      try {
        const data = await api("POST", "/api/review/queues/" + queueId + "/next?exclude=" + [...pending].join(","));
        showItem(data.item);
        setProgress(data.progress);
        prefetch();
      } catch (e) {
        showMessage(e.message);
      }
    }

    function humanWord(value) {
      if (format === "ordinal") return String(value);
      return Number(value) >= 1 ? "pass" : "fail";
    }

    function judgeWord(raw) {
      return format === "ordinal" ? String(raw) : (format === "unit" ? fmt(raw) : humanWord(raw));
    }

    function reveal(data) {
      const box = $("reveal");
      box.hidden = false;
      $("reveal-item").textContent = data.item;
      $("reveal-you").textContent = data.skipped ? "skip" : humanWord(data.value);
      $("reveal-judge").textContent = judgeWord(data.judge_raw);
      $("reveal-score").textContent = fmt(data.judge_score);
      $("reveal-agrees").textContent = data.agrees === null ? "skipped" : (data.agrees ? "you agree" : "you disagree");
      box.classList.toggle("agree", data.agrees === true);
      box.classList.toggle("disagree", data.agrees === false);
    }

    function renderHistory() {
      const list = $("history");
      if (!list) return;
      $("history-empty").hidden = history.length > 0;
      list.replaceChildren(...history.map((h, i) => {
        const li = document.createElement("li");
        li.dataset.testid = "history-row";
        li.dataset.item = h.item;
        li.className = h.agrees === null ? "" : (h.agrees ? "agree" : "disagree");
        const what = document.createElement("span");
        what.textContent = "item " + h.item + (h.task_id ? " · " + h.task_id : "");
        const verdict = document.createElement("span");
        verdict.className = "verdict";
        verdict.textContent = h.skipped ? "skipped: " + h.skip_reason
          : "you " + humanWord(h.value) + ", judge " + judgeWord(h.judge_raw) + (h.agrees ? " (agree)" : " (disagree)");
        li.append(what, verdict);
        if (i === 0) {
          const undo = document.createElement("button");
          undo.type = "button";
          undo.className = "secondary";
          undo.dataset.testid = "undo";
          undo.textContent = "Undo";
          undo.title = "Take back this label (u)";
          undo.addEventListener("click", undoLatest);
          li.append(undo);
        }
        return li;
      }));
    }

    async function undoLatest() {
      if (pending.size) { undosWanted += 1; return; }  // after the labels on their way: then the latest is known
      const latest = history[0];
      if (!latest) return;
      showMessage("");
      try {
        const data = await api("POST", "/api/review/items/" + latest.item + "/undo");
        history = history.slice(1);
        renderHistory();
        setProgress(data.progress);
        $("reveal").hidden = true;
        if (current) { upcoming = current; prefetching = null; }  // still reserved: it comes next again
        showItem(data.item);
        if (undosWanted === 0) await refreshCounts();  // the statistics without the label taken back
      } catch (e) {
        showMessage(e.message);
      }
    }

    async function submit(path, body) {
      if (!current || pending.has(current.id)) return;
      const done = current;
      const started = performance.now();
      const seq = ++sent;
      pending.add(done.id);
      showMessage("");
      // The next item first (fetched ahead; waited for only if its fetch is still in flight).
      if (!upcoming && prefetching) await prefetching;
      if (upcoming) {
        showItem(upcoming);
        timing.shows.push(performance.now() - started);
        prefetch();
      }
      try {
        const data = await api("POST", "/api/review/items/" + done.id + path, body);
        if (seq === sent) reveal(data);  // the answer to the latest label only
        history = [...history, { seq, item: data.item, task_id: done.task_id, value: data.value, skipped: data.skipped,
                                 skip_reason: body.reason || "", judge_raw: data.judge_raw, judge_score: data.judge_score,
                                 agrees: data.agrees }]
          .sort((a, b) => (b.seq ?? 0) - (a.seq ?? 0)).slice(0, 20);
        renderHistory();
        if (pending.size === 1) { renderStats(data.stats); setProgress(data.progress); }  // the last answer of a burst
      } catch (e) {
        showMessage("item " + done.id + ": " + e.message);
        if (e.status !== 409 && e.status !== 404 && current !== done) {
          // Not recorded, still reserved: back on the screen, the one shown instead comes next.
          upcoming = current;
          prefetching = null;
          showItem(done);
        }
      } finally {
        pending.delete(done.id);
      }
      if (pending.size === 0) await settle();
      if (current === done && pending.size === 0 && !upcoming) {
        await next();  // nothing was fetched ahead (the queue's end, or the fetch failed)
      }
    }

    // Once no label is on its way: the counters and statistics as the server has them now, then
    // the undo presses that waited for them.
    async function settle() {
      await refreshCounts();
      while (undosWanted > 0 && pending.size === 0) {
        undosWanted -= 1;
        await undoLatest();
      }
    }

    async function refreshCounts() {
      try {
        const [queue, stats] = await Promise.all([
          api("GET", "/api/review/queues/" + queueId), api("GET", "/api/review/queues/" + queueId + "/stats")]);
        if (pending.size) return;  // a label went out meanwhile: its own settle follows
        setProgress(queue.progress);
        renderStats(stats);
        refreshPromote();
        timing.settled += 1;
      } catch (e) {
        showMessage(e.message);
      }
    }

    const label = (value) => submit("/label", { value: Number(value) });

    function startSkip() {
      if (!current) return;
      $("skip-form").hidden = false;
      $("skip-reason").value = "";
      $("skip-reason").focus();
    }

    document.querySelectorAll(".label-btn").forEach((b) => b.addEventListener("click", () => label(b.dataset.value)));
    if ($("skip")) $("skip").addEventListener("click", startSkip);
    if ($("skip-form")) {
      $("skip-form").addEventListener("submit", (ev) => {
        ev.preventDefault();
        const reason = $("skip-reason").value.trim();
        if (!reason) { showMessage("Say why you skip the item."); return; }
        submit("/skip", { reason });
      });
      $("skip-reason").addEventListener("keydown", (ev) => {
        if (ev.key === "Escape") { $("skip-form").hidden = true; ev.target.blur(); }
      });
    }

    document.addEventListener("keydown", (ev) => {
      const tag = (ev.target && ev.target.tagName) || "";
      if (tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" || ev.ctrlKey || ev.metaKey || ev.altKey) return;
      const k = ev.key.toLowerCase();
      let value = null;
      if (format === "ordinal") {
        if ("12345".includes(k) && k.length === 1) value = k;
      } else if (k === "p" || k === "1") value = 1;
      else if (k === "f" || k === "0") value = 0;
      if (value !== null) { ev.preventDefault(); label(value); return; }
      if (k === "s") { ev.preventDefault(); startSkip(); return; }
      if (k === "u") { ev.preventDefault(); undoLatest(); return; }
      if (k === "n") { ev.preventDefault(); next(); }
    });

    async function refreshPromote() {
      const btn = $("promote");
      if (!btn || !initial.is_admin) return;
      try {
        const check = await api("GET", "/api/judges/" + initial.judge + "/versions/" + initial.version + "/calibration");
        btn.disabled = !check.ok || (check.active && check.calibrated);
        $("promote-threshold").textContent = check.threshold;
        $("promote-status").textContent = check.active && check.calibrated ? "Active and calibrated." : check.reason + ".";
      } catch (e) {
        showMessage(e.message);
      }
    }

    if ($("promote")) {
      $("promote").addEventListener("click", async () => {
        try {
          await api("POST", "/api/judges/" + initial.judge + "/versions/" + initial.version + "/promote");
          await refreshPromote();
          $("promote-status").textContent = "Promoted: v" + initial.version + " is calibrated and active.";
        } catch (e) {
          showMessage(e.message);
        }
      });
    }

    renderStats(initial.stats);
    renderHistory();
    refreshPromote();
    if (initial.can_label) next();
  }

  // ------------------------------------------------------------------ judge admin page
  function judgePage(root) {
    const slug = root.dataset.judge;
    const reload = () => window.location.reload();
    const form = $("threshold-form");
    if (form) {
      form.addEventListener("submit", async (ev) => {
        ev.preventDefault();
        try {
          await api("POST", "/api/judges/" + slug + "/threshold", { threshold: Number($("threshold-input").value) });
          reload();
        } catch (e) { showMessage(e.message); }
      });
    }
    if ($("rollback")) {
      $("rollback").addEventListener("click", async () => {
        try { await api("POST", "/api/judges/" + slug + "/rollback"); reload(); } catch (e) { showMessage(e.message); }
      });
    }
    document.querySelectorAll("button.action").forEach((b) => b.addEventListener("click", async () => {
      try {
        const data = await api("POST", "/api/judges/" + slug + "/versions/" + b.dataset.version + "/" + b.dataset.action);
        if (b.dataset.action === "shadow") showMessage("Shadow re-scoring queued for " + data.queued_items + " labelled items; reload when the judge queue is done.");
        else reload();
      } catch (e) { showMessage(e.message); }
    }));
    const cmp = $("compare-form");
    if (cmp) {
      cmp.addEventListener("submit", async (ev) => {
        ev.preventDefault();
        try {
          const data = await api("GET", "/api/judges/" + slug + "/compare?a=" + $("compare-a").value + "&b=" + $("compare-b").value);
          const table = document.createElement("table");
          table.className = "grid compact";
          table.dataset.testid = "compare-table";
          const head = document.createElement("tr");
          ["", ...data.versions.map((v) => "v" + v.version + (v.active ? " (active)" : ""))].forEach((h) => { const th = document.createElement("th"); th.textContent = h; head.appendChild(th); });
          table.appendChild(head);
          const metricNames = Object.keys(data.versions[0].report.metrics);
          for (const name of metricNames) {
            const tr = document.createElement("tr");
            const th = document.createElement("th"); th.textContent = name; tr.appendChild(th);
            for (const v of data.versions) {
              const m = v.report.metrics[name];
              const td = document.createElement("td");
              td.textContent = fmt(m.value) + (m.ci[0] === null ? "" : " [" + fmt(m.ci[0]) + ", " + fmt(m.ci[1]) + "]");
              tr.appendChild(td);
            }
            table.appendChild(tr);
          }
          const note = document.createElement("p");
          note.className = "muted";
          note.textContent = data.n_common + " labelled items scored by both; " + data.changed_items.length + " scored differently.";
          $("compare-result").replaceChildren(table, note);
        } catch (e) { showMessage(e.message); }
      });
    }
  }

  // ------------------------------------------------------------------ a queue being sampled
  // A new queue's items are drawn by a worker: its progress is shown until it is ready (the page
  // then loads as a labelling page) or failed (the reason is shown).
  function samplingPage(root) {
    const queueId = root.dataset.queueId;
    async function poll() {
      let queue;
      try {
        queue = await api("GET", "/api/review/queues/" + queueId);
      } catch (e) {
        showMessage(e.message);
        setTimeout(poll, 3000);
        return;
      }
      if (queue.state !== "sampling") {
        window.location.reload();
        return;
      }
      const s = queue.sampling || {};
      $("sampling-stage").textContent = s.stage || "queued";
      $("sampling-bar").max = s.total || 1;
      $("sampling-bar").value = s.done || 0;
      $("sampling-count").textContent = s.total ? s.done + " of " + s.total : "";
      setTimeout(poll, 1000);
    }
    setTimeout(poll, 1000);
  }

  const queueRoot = document.getElementById("review-queue");
  if (queueRoot && queueRoot.dataset.state === "sampling") samplingPage(queueRoot);
  else if (queueRoot && queueRoot.dataset.state === "ready") queuePage(queueRoot);
  const judgeRoot = document.getElementById("review-judge");
  if (judgeRoot) judgePage(judgeRoot);
})();
