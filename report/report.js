// shardcast's HTML report renderer: reads the page's JSON (the same objects --json prints, with
// the timeline for simulate and the simulated candidates for plan) and draws plain SVG. No
// network access, no library. Elements the browser test reads carry classes and data-*
// attributes: g.lane[data-stage], rect.mem-part[data-stage][data-bytes], circle.cand, circle.point.
(function () {
  "use strict";
  const NS = "http://www.w3.org/2000/svg";
  const data = JSON.parse(document.getElementById("shardcast-data").textContent);
  const root = document.getElementById("report");
  const tip = document.getElementById("tip");

  function el(tag, attrs, parent, text) {
    const e = tag === "svg" || parent instanceof SVGElement ? document.createElementNS(NS, tag) : document.createElement(tag);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }
  function hover(e, text) {
    e.addEventListener("mousemove", (ev) => {
      tip.textContent = text;
      tip.style.display = "block";
      tip.style.left = ev.clientX + 12 + "px";
      tip.style.top = ev.clientY + 12 + "px";
    });
    e.addEventListener("mouseleave", () => { tip.style.display = "none"; });
  }
  function fmtS(s) {
    if (s === null || s === undefined) return "-";
    if (s === 0) return "0 s";
    if (s >= 86400) return (s / 86400).toFixed(1) + " d";
    if (s >= 1) return s.toFixed(3) + " s";
    if (s >= 1e-3) return (s * 1e3).toFixed(2) + " ms";
    return (s * 1e6).toFixed(1) + " us";
  }
  const GiB = 1073741824;
  function fmtGiB(b) { return (b / GiB).toFixed(2) + " GiB"; }
  function pct(x) { return (100 * x).toFixed(1) + "%"; }
  function section(title) { el("h2", {}, root, title); }
  function table(headers, rows, opts) {
    const t = el("table", {}, root);
    const hr = el("tr", {}, el("thead", {}, t));
    headers.forEach((h, i) => el("th", { class: i === 0 || (opts && opts.left && opts.left.includes(i)) ? "l" : "" }, hr, h));
    const tb = el("tbody", {}, t);
    rows.forEach((r) => {
      const tr = el("tr", r.cls ? { class: r.cls } : {}, tb);
      r.cells.forEach((c, i) => el("td", { class: i === 0 || (opts && opts.left && opts.left.includes(i)) ? "l" : "" }, tr, c));
    });
    return t;
  }
  // A legend of swatches: each an SVG rect with the series' class, or its colour.
  function legend(items) {
    const d = el("div", { class: "legend" }, root);
    items.forEach(([cls, label, color]) => {
      const s = el("span", {}, d);
      const sw = el("svg", { width: 14, height: 12 }, s);
      el("rect", { class: cls, x: 0, y: 0, width: 12, height: 12, rx: 2, fill: color || "" }, sw);
      s.appendChild(document.createTextNode(" " + label));
    });
  }
  // Linear or log axis mapping [lo, hi] onto [a, b].
  function scale(lo, hi, a, b, log) {
    if (log) { const l0 = Math.log(lo), l1 = Math.log(hi); return (v) => a + (Math.log(v) - l0) / (l1 - l0 || 1) * (b - a); }
    return (v) => a + (v - lo) / (hi - lo || 1) * (b - a);
  }
  function niceTicks(lo, hi, n, log) {
    if (log) {
      const t = [];
      for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) {
        [1, 2, 5].forEach((m) => { const v = m * Math.pow(10, e); if (v >= lo && v <= hi) t.push(v); });
      }
      if (t.length >= 3) return t;  // else a narrow range: linear ticks, placed on the log axis
    }
    const step = Math.pow(10, Math.floor(Math.log10((hi - lo) / n || 1)));
    const m = [1, 2, 5, 10].find((k) => (hi - lo) / (k * step) <= n) * step;
    const t = [];
    for (let v = Math.ceil(lo / m) * m; v <= hi + 1e-12; v += m) t.push(v);
    return t;
  }
  // An x-y chart frame with axes; returns {svg, x, y, plot}.
  function chart(w, h, xr, yr, xlabel, ylabel, opts) {
    const o = opts || {};
    const m = { l: 70, r: 20, t: 10, b: 40 };
    const svg = el("svg", { width: w, height: h, viewBox: `0 0 ${w} ${h}` }, root);
    const x = scale(xr[0], xr[1], m.l, w - m.r, o.logx), y = scale(yr[0], yr[1], h - m.b, m.t, o.logy);
    const ax = el("g", { class: "axis" }, svg);
    niceTicks(xr[0], xr[1], 8, o.logx).forEach((v) => {
      if (!o.nogridx) el("line", { class: "grid", x1: x(v), x2: x(v), y1: m.t, y2: h - m.b }, ax);
      el("text", { x: x(v), y: h - m.b + 14, "text-anchor": "middle" }, ax, (o.fx || String)(v));
    });
    niceTicks(yr[0], yr[1], 6, o.logy).forEach((v) => {
      el("line", { class: "grid", x1: m.l, x2: w - m.r, y1: y(v), y2: y(v) }, ax);
      el("text", { x: m.l - 6, y: y(v) + 4, "text-anchor": "end" }, ax, (o.fy || String)(v));
    });
    el("line", { x1: m.l, x2: w - m.r, y1: h - m.b, y2: h - m.b }, ax);
    el("line", { x1: m.l, x2: m.l, y1: m.t, y2: h - m.b }, ax);
    el("text", { x: (m.l + w - m.r) / 2, y: h - 6, "text-anchor": "middle" }, ax, xlabel);
    el("text", { x: 14, y: (m.t + h - m.b) / 2, "text-anchor": "middle", transform: `rotate(-90 14 ${(m.t + h - m.b) / 2})` }, ax, ylabel);
    return { svg, x, y, plot: el("g", {}, svg), m, w, h };
  }
  function padRange(lo, hi, f, log) {
    if (log) return [lo / (1 + f), hi * (1 + f)];
    const d = (hi - lo) || Math.abs(hi) || 1;
    return [lo - f * d, hi + f * d];
  }

  // ---- simulate -------------------------------------------------------------------------------
  function timeline(tl, step_s) {
    const lanes = tl.lanes, nstreams = tl.streams.length;
    const rowH = 12, laneGap = 6, left = 190, width = 1000;
    const laneH = nstreams * rowH;
    const h = lanes.length * (laneH + laneGap) + 30;
    const bar = el("div", {}, root);
    const reset = el("button", {}, bar, "reset zoom");
    el("span", { class: "hint" }, bar, "wheel: zoom, drag: pan, hover: the op");
    const svg = el("svg", { width: left + width + 10, height: h, class: "timeline" }, root);
    let t0 = 0, t1 = step_s * 1e9;
    const axis = el("g", { class: "axis" }, svg);
    const groups = lanes.map((ln, i) => {
      const g = el("g", { class: "lane", "data-stage": ln.stage, "data-device": ln.device, transform: `translate(0 ${i * (laneH + laneGap)})` }, svg);
      el("text", { x: 4, y: laneH / 2 + 4, "font-weight": "bold" }, g, `stage ${ln.stage}`);
      el("rect", { class: "lane-bg", x: left, y: 0, width: width, height: laneH }, g);
      tl.streams.forEach((s, k) => el("text", { x: left - 4, y: k * rowH + 9, "text-anchor": "end", class: "hint" }, g, s));
      return g;
    });
    const rects = tl.ops.map((op) => {
      const [lane, stream, kind, start, end, mb, chunk] = op;
      const name = tl.kinds[kind];
      const r = el("rect", { class: "op k-" + (name in KIND_CLASS ? name : "other"), y: stream * rowH + 1, height: rowH - 2 }, groups[lane]);
      hover(r, `${name}${mb >= 0 ? " micro-batch " + mb : ""}${chunk >= 0 ? " chunk " + chunk : ""}\nstage ${lanes[lane].stage}, ${tl.streams[stream]}\n` +
               `start ${fmtS(start / 1e9)}, ${fmtS((end - start) / 1e9)}`);
      return [r, start, end];
    });
    function draw() {
      const x = (t) => left + (t - t0) / (t1 - t0) * width;
      for (const [r, s, e] of rects) {
        const a = Math.max(left, x(s)), b = Math.min(left + width, x(e));
        if (b <= a) { r.setAttribute("width", 0); continue; }
        r.setAttribute("x", a);
        r.setAttribute("width", Math.max(b - a, 0.5));
      }
      while (axis.firstChild) axis.removeChild(axis.firstChild);
      const y = lanes.length * (laneH + laneGap) + 12;
      niceTicks(t0 / 1e9, t1 / 1e9, 10).forEach((v) => {
        el("line", { x1: x(v * 1e9), x2: x(v * 1e9), y1: y - 10, y2: y - 6 }, axis);
        el("text", { x: x(v * 1e9), y: y + 4, "text-anchor": "middle" }, axis, fmtS(v));
      });
    }
    svg.addEventListener("wheel", (ev) => {
      ev.preventDefault();
      const f = ev.deltaY > 0 ? 1.25 : 0.8;
      const at = t0 + (ev.offsetX - left) / width * (t1 - t0);
      t0 = Math.max(0, at - (at - t0) * f);
      t1 = Math.min(step_s * 1e9, at + (t1 - at) * f);
      draw();
    });
    let drag = null;
    svg.addEventListener("mousedown", (ev) => { drag = [ev.clientX, t0, t1]; });
    window.addEventListener("mouseup", () => { drag = null; });
    svg.addEventListener("mousemove", (ev) => {
      if (!drag) return;
      const dt = (ev.clientX - drag[0]) / width * (drag[2] - drag[1]);
      const span = drag[2] - drag[1];
      t0 = Math.min(Math.max(0, drag[1] - dt), step_s * 1e9 - span);
      t1 = t0 + span;
      draw();
    });
    reset.addEventListener("click", () => { t0 = 0; t1 = step_s * 1e9; draw(); });
    draw();
  }
  const KIND_CLASS = { F: 1, B: 1, W: 1, pp_send: 1, dp_grad_reduce: 1, param_all_gather: 1, embedding_grad_all_reduce: 1, optimizer: 1 };
  const MEM_KINDS = ["weights", "grads", "optimizer", "activations", "comm_buffers", "framework"];

  function memoryBars(res) {
    const st = res.stages, cap = res.usable_memory_bytes;
    const top = Math.max(cap, ...st.map((s) => s.peak_memory_bytes)) * 1.08;
    const c = chart(Math.max(360, 90 + 46 * st.length), 300, [-0.5, st.length - 0.5], [0, top / GiB], "pipeline stage", "GiB per GPU",
                    { fx: (v) => (Number.isInteger(v) ? v : ""), nogridx: true });
    const bw = Math.min(34, (c.x(1) - c.x(0)) * 0.7);
    st.forEach((s, i) => {
      let acc = 0;
      MEM_KINDS.forEach((k) => {
        const b = s.memory_bytes[k] || 0;
        const r = el("rect", { class: "mem-part m-" + k, "data-stage": s.stage, "data-kind": k, "data-bytes": b,
                               x: c.x(i) - bw / 2, width: bw, y: c.y((acc + b) / GiB), height: c.y(acc / GiB) - c.y((acc + b) / GiB) }, c.plot);
        hover(r, `stage ${s.stage}: ${k} ${fmtGiB(b)}\npeak ${fmtGiB(s.peak_memory_bytes)}`);
        acc += b;
      });
    });
    el("line", { class: "capacity", x1: c.m.l, x2: c.w - c.m.r, y1: c.y(cap / GiB), y2: c.y(cap / GiB) }, c.svg);
    el("text", { x: c.w - c.m.r, y: c.y(cap / GiB) - 4, "text-anchor": "end" }, c.svg, `usable ${fmtGiB(cap)}`);
    legend(MEM_KINDS.map((k) => ["m-" + k, k.replace("_", " ")]));
  }

  function renderSimulate(d) {
    const r = d.result;
    if (!r.feasible) {
      el("p", {}, root, "This configuration cannot run: " + (r.reasons || []).join("; "));
      return;
    }
    table(["step time", "tokens/s", "MFU (causal)", "MFU (full s\u00b2)", "HFU", "bubble", "peak memory", "fits"],
          [{ cells: [fmtS(r.step_time_s), r.tokens_per_s.toPrecision(4), pct(r.mfu_causal), pct(r.mfu), pct(r.hfu), pct(r.bubble_fraction), fmtGiB(r.peak_memory_bytes), r.fits ? "yes" : "no"] }]);
    if (!r.fits) el("p", { class: "warn" }, root, "Does not fit in GPU memory: " + (r.reasons || []).join("; "));
    section("Timeline of one step, per stage and stream");
    legend(Object.keys(KIND_CLASS).map((k) => ["k-" + k, k]).concat([["lane-bg", "idle (bubble)"]]));
    timeline(d.timeline, r.step_time_s);
    section("Peak memory per stage, by kind");
    memoryBars(r);
    section("Time breakdown of the step (breakdown_s: where the step's time goes, docs/simulator.md section 5)");
    const bd = r.breakdown_s || {};
    table(["kind", "seconds", "share of step"], Object.keys(bd).map((k) => ({ cells: [k, bd[k].toFixed(4), pct(bd[k] / r.step_time_s)] })));
    section("Critical path");
    const cp = (r.critical_path && r.critical_path.shares) || [];
    table(["stage", "kind", "tasks", "seconds"], cp.map((s) => ({ cells: [String(s.stage), s.kind, String(s.tasks), s.seconds.toFixed(4)] })), { left: [1] });
  }

  // ---- plan -----------------------------------------------------------------------------------
  function renderPlan(d) {
    const rec = d.recommended;
    section("Ranked plans");
    table(["rank", "configuration", "step", "tokens/s", "MFU (causal)", "bubble", "peak memory", "at risk"],
          d.plans.map((p, i) => ({ cls: rec && p.config_summary === rec.config_summary ? "recommended" : "",
                                   cells: [String(i + 1), p.config_summary, fmtS(p.step_time_s), p.tokens_per_s.toPrecision(4), pct(p.mfu_causal),
                                           pct(p.bubble_fraction), fmtGiB(p.peak_memory_bytes), p.memory_at_risk ? "yes" : ""] })), { left: [1] });
    section(`Step time vs peak memory (reserved where the allocator was replayed) of the ${d.points.length} simulated candidates that run`);
    if (d.points.length > 0) {
      const mem = (p) => Math.max(p.peak_memory_bytes, p.peak_reserved_memory_bytes || 0);  // reserved where replayed
      const xs = d.points.map((p) => p.step_time_s), ys = d.points.map((p) => mem(p) / GiB);
      const cap = d.memory_limit_bytes / GiB;
      const c = chart(900, 420, padRange(Math.min(...xs), Math.max(...xs), 0.05, true),
                      [0, Math.max(cap, ...ys) * 1.08], "step time (s, log)", "peak memory per GPU (GiB)", { logx: true, fx: (v) => v.toPrecision(2) });
      d.points.forEach((p) => {
        const e = el("circle", { class: "cand" + (p.at_risk ? " at-risk" : "") + (p.fits ? "" : " at-risk"), r: 4,
                                 cx: c.x(p.step_time_s), cy: c.y(mem(p) / GiB), "data-at-risk": p.at_risk }, c.plot);
        hover(e, `${p.config}\nstep ${fmtS(p.step_time_s)}, peak ${fmtGiB(p.peak_memory_bytes)}${mem(p) > p.peak_memory_bytes ? `, reserved ${fmtGiB(mem(p))}` : ""}${p.at_risk ? "\nat risk of running out of memory" : ""}${p.fits ? "" : "\ndoes not fit with the headroom"}`);
      });
      if (rec) {
        el("circle", { class: "recommended-mark", r: 9, cx: c.x(rec.step_time_s), cy: c.y(rec.peak_memory_bytes / GiB) }, c.plot);
      }
      el("line", { class: "capacity", x1: c.m.l, x2: c.w - c.m.r, y1: c.y(cap), y2: c.y(cap) }, c.svg);
      legend([["cand", "candidate"], ["cand at-risk", "at risk or over the headroom"], ["recommended-mark", "recommended"], ["capacity", "usable memory less the required headroom"]]);
    }
    section("Candidates set aside, by reason");
    const rj = d.rejected || {};
    table(["reason", "candidates"], Object.keys(rj).map((k) => ({ cells: [k, String(rj[k])] })));
  }

  // ---- capacity -------------------------------------------------------------------------------
  function renderCapacity(d) {
    const ok = d.options.filter((o) => o.feasible);
    section("Days vs cost, per GPU type and count");
    if (ok.length > 0) {
      const days = ok.map((o) => o.wall_time_s / 86400), cost = ok.map((o) => o.cost_usd);
      const dl = d.days || null;
      const xr = padRange(Math.min(...days, dl || Infinity), Math.max(...days, dl || 0), 0.08, true);
      const c = chart(900, 420, xr, padRange(Math.min(...cost), Math.max(...cost), 0.1, true), "days to train (log)", "cost (USD, log)",
                      { logx: true, logy: true, fx: (v) => v.toPrecision(2), fy: (v) => "$" + (v >= 1e6 ? (v / 1e6).toPrecision(2) + "M" : v.toPrecision(2)) });
      const types = [...new Set(ok.map((o) => o.cluster))].sort();
      const palette = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#9d755d", "#ff9da6"];
      types.forEach((t, i) => {
        const pts = ok.filter((o) => o.cluster === t).sort((a, b) => a.gpus - b.gpus);
        el("polyline", { fill: "none", stroke: palette[i % 8], points: pts.map((o) => `${c.x(o.wall_time_s / 86400)},${c.y(o.cost_usd)}`).join(" ") }, c.plot);
        pts.forEach((o) => {
          const e = el("circle", { class: "point", r: 5, fill: palette[i % 8], cx: c.x(o.wall_time_s / 86400), cy: c.y(o.cost_usd), "data-cluster": t, "data-gpus": o.gpus }, c.plot);
          hover(e, `${t}: ${o.gpus} GPUs, ${o.config}\n${(o.wall_time_s / 86400).toFixed(1)} days, $${Math.round(o.cost_usd).toLocaleString()}, ${o.energy_kwh == null ? "no energy (no tdp_W)" : (o.energy_kwh / 1000).toFixed(1) + " MWh"}`);
        });
      });
      if (dl) {
        el("line", { class: "deadline", x1: c.x(dl), x2: c.x(dl), y1: c.m.t, y2: c.h - c.m.b }, c.svg);
        const leftHalf = c.x(dl) < (c.m.l + c.w - c.m.r) / 2;
        el("text", { x: c.x(dl) + (leftHalf ? 4 : -4), y: c.m.t + 12, "text-anchor": leftHalf ? "start" : "end" }, c.svg, `deadline ${dl} days`);
      }
      legend(types.map((t, i) => ["", t, palette[i % 8]]));
    }
    if (d.solve) {
      section("Smallest GPU count meeting the deadline (--solve)");
      table(["cluster", "answer", "lower bound", "counts simulated"],
            d.solve.map((sv) => ({ cells: [sv.cluster, sv.found ? sv.gpus + " GPUs" : "not met up to " + sv.max_gpus + " GPUs",
                                           sv.lower_bound_gpus + " GPUs", sv.tried.map((t) => t.gpus + (t.meets_deadline ? " meets" : " misses")).join(", ")] })),
            { left: [3] });
    }
    section("Options");
    table(["cluster", "GPUs", "configuration", "days", "cost", "MWh", "deadline"],
          d.options.map((o) => ({ cells: o.feasible ? [o.cluster, String(o.gpus), o.config, (o.wall_time_s / 86400).toFixed(2), "$" + Math.round(o.cost_usd).toLocaleString(),
                                                       o.energy_kwh == null ? "-" : (o.energy_kwh / 1000).toFixed(1), o.meets_deadline === undefined ? "" : o.meets_deadline ? "meets" : "misses"]
                                                    : [o.cluster, String(o.gpus), "infeasible: " + o.reason, "", "", "", ""] })), { left: [2] });
  }

  // ---- validate -------------------------------------------------------------------------------
  function renderValidate(d) {
    const rows = d.rows.filter((r) => !r.skipped && r.measured_step_time_s && r.predicted_step_time_s);
    section(`Predicted vs measured step time (${rows.length} rows)`);
    if (rows.length > 0) {
      const all = rows.flatMap((r) => [r.measured_step_time_s, r.predicted_step_time_s]);
      const rg = padRange(Math.min(...all), Math.max(...all), 0.1, true);
      const c = chart(720, 620, rg, rg, "measured step time (s, log)", "predicted step time (s, log)",
                      { logx: true, logy: true, fx: (v) => v.toPrecision(2), fy: (v) => v.toPrecision(2) });
      const band = [[rg[0], rg[0] * 0.9], [rg[1], rg[1] * 0.9], [rg[1], rg[1] * 1.1], [rg[0], rg[0] * 1.1]];
      el("polygon", { class: "band", points: band.map(([x, y]) => `${c.x(x)},${c.y(y)}`).join(" ") }, c.plot);
      el("line", { class: "identity", x1: c.x(rg[0]), y1: c.y(rg[0]), x2: c.x(rg[1]), y2: c.y(rg[1]) }, c.plot);
      const sources = [...new Set(rows.map((r) => r.source_id))];
      const palette = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#9d755d", "#ff9da6", "#bab0ac", "#eeca3b"];
      rows.forEach((r) => {
        const e = el("circle", { class: "point", r: 4, fill: palette[sources.indexOf(r.source_id) % 10], "data-row": r.row_id,
                                 cx: c.x(r.measured_step_time_s), cy: c.y(r.predicted_step_time_s) }, c.plot);
        hover(e, `row ${r.row_id} (${r.source_id}): ${r.model} on ${r.gpus} GPUs\nmeasured ${fmtS(r.measured_step_time_s)}, predicted ${fmtS(r.predicted_step_time_s)} (${(100 * (r.predicted_step_time_s / r.measured_step_time_s - 1)).toFixed(1)}%)`);
      });
      legend(sources.map((src, i) => ["", src, palette[i % 10]]));
      el("p", { class: "hint" }, root, "dashed: predicted = measured; band: within 10%");
    }
    section("Rows");
    table(["row", "source", "model", "GPUs", "measured", "predicted", "error", "note"],
          d.rows.map((r) => ({ cells: [r.row_id, r.source_id, r.model, String(r.gpus),
                                       r.skipped ? "" : fmtS(r.measured_step_time_s), r.skipped ? "" : fmtS(r.predicted_step_time_s),
                                       r.step_time_error === null || r.step_time_error === undefined ? "" : pct(r.step_time_error),
                                       r.skipped ? "skipped: " + (r.skip_reason || "") : ""] })), { left: [1, 2, 7] });
  }

  ({ simulate: renderSimulate, plan: renderPlan, capacity: renderCapacity, validate: renderValidate })[data.kind](data);
})();
