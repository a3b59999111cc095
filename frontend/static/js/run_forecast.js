// The run page's forecast card: each fitted domain's held-out results against the compute spent,
// its fitted curve (ScaleRL's, controlplane/runs/forecast.py) with the 95% bootstrap band around
// it, and the target reward where one is asked, drawn with plotly on a log compute axis from the
// figures the server put in the card (no request of its own).
"use strict";

(() => {
  const data = Temper.pageData("forecast-data");
  if (!data) return;
  const COLOR = "#3b5bdb";

  function traces(d) {
    const band = d.curve_band || [];
    const out = [];
    if (band.length) {
      out.push({ x: band.map((p) => p[0]), y: band.map((p) => p[2]), type: "scatter", mode: "lines", line: { width: 0 },
                 hoverinfo: "skip", showlegend: false, name: "band high" });
      out.push({ x: band.map((p) => p[0]), y: band.map((p) => p[1]), type: "scatter", mode: "lines", line: { width: 0 },
                 fill: "tonexty", fillcolor: "rgba(59, 91, 219, 0.15)", hoverinfo: "skip", name: "95% band" });
    }
    out.push({ x: d.curve_points.map((p) => p[0]), y: d.curve_points.map((p) => p[1]), type: "scatter", mode: "lines",
               line: { color: COLOR, width: 2 }, name: `fit (A ${d.curve.a.toFixed(3)})`,
               hovertemplate: `%{y:.3f} at %{x:.3g} ${data.compute_label}<extra>fit</extra>` });
    out.push({ x: d.points.map((p) => p[0]), y: d.points.map((p) => p[1]), type: "scatter", mode: "markers",
               marker: { color: "#e8590c", size: 7 }, name: "held-out results",
               hovertemplate: `%{y:.3f} at %{x:.3g} ${data.compute_label}<extra>held-out</extra>` });
    return out;
  }

  function layout(d) {
    const shapes = [];
    if (data.target !== null && data.target !== undefined) {
      shapes.push({ type: "line", xref: "paper", x0: 0, x1: 1, y0: data.target, y1: data.target,
                    line: { dash: "dash", width: 1, color: "#c0392b" }, label: { text: `target ${data.target}`, textposition: "end" } });
    }
    if (d.final) {
      shapes.push({ type: "line", yref: "paper", y0: 0, y1: 1, x0: d.final.compute, x1: d.final.compute,
                    line: { dash: "dot", width: 1, color: "#868e96" }, label: { text: "spent so far", textposition: "end", textangle: 0, xanchor: "left", font: { size: 11 } } });
    }
    return { margin: { l: 48, r: 12, t: 24, b: 40 }, height: 280, showlegend: true,
             legend: { orientation: "h", y: 1.02, yanchor: "bottom" }, shapes,
             xaxis: { type: "log", title: { text: data.compute_label } }, yaxis: { range: [0, 1.05], title: { text: "held-out reward" } } };
  }

  function draw() {
    const byDomain = new Map(data.domains.map((d) => [d.domain, d]));
    document.querySelectorAll("[data-testid=forecast-plot]").forEach((node) => {
      const d = byDomain.get(node.dataset.domain);
      if (!d || !d.curve) return;
      const t = traces(d);
      Plotly.react(node, t, layout(d), { responsive: true, displaylogo: false });
      node.dataset.traces = String(t.length);
      node.dataset.points = String(d.points.length);
    });
  }

  const start = () => (window.Plotly ? draw() : setTimeout(start, 50));
  start();
})();
