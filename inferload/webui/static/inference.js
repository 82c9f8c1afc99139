// inferload: the Inference tab's charts and panels (docs/web-ui.md).
// Loaded by Locust's page (one <script> tag added by inferload/webui/tab.py). No libraries, no
// network beyond this web UI: it reads ./inference/stats every 2 s while the tab is open and draws
// inline SVG under Locust's own table for the tab. Every figure shown carries data-field (its key)
// and data-value (the number as the JSON has it), so a test can check the page against the API.
(function () {
  "use strict";
  var TAB = "inference";
  var PANEL_ID = "inferload-inference";
  var EVERY_MS = 2000;
  var DASH = "\u2014";
  var last = 0;

  function esc(text) {
    return String(text).replace(/[&<>"']/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c];
    });
  }

  function fmt(value, digits) {
    if (value === null || value === undefined) return DASH;
    if (typeof value !== "number") return String(value);
    return Number.isInteger(value) ? String(value) : value.toFixed(digits === undefined ? 3 : digits);
  }

  // one figure: its label, its value, and why it is missing when it is
  function figure(field, label, value, digits, why, unit) {
    var shown = fmt(value, digits) + (value === null || value === undefined || !unit ? "" : " " + unit);
    var title = value === null || value === undefined ? (why || "not known yet") : "";
    return (
      '<div class="il-fig"><div class="il-label">' + esc(label) + "</div>" +
      '<div class="il-value" data-field="' + esc(field) + '" data-value="' + esc(value === null || value === undefined ? "" : value) +
      '" title="' + esc(title) + '">' + esc(shown) + "</div>" +
      (title ? '<div class="il-why">' + esc(title) + "</div>" : "") + "</div>"
    );
  }

  function extent(values) {
    var nums = values.filter(function (v) { return typeof v === "number"; });
    if (!nums.length) return null;
    return [Math.min.apply(null, nums), Math.max.apply(null, nums)];
  }

  // a line chart of one or two series over the windows: [{name, values, dashed}], xs = elapsed s
  function lineChart(title, xs, series, unit) {
    var w = 460, h = 150, left = 48, bottom = 20, top = 18;
    var all = [];
    series.forEach(function (s) { all = all.concat(s.values); });
    var ys = extent(all);
    var xr = extent(xs);
    var body = '<text x="' + left + '" y="12" class="il-title">' + esc(title) + "</text>";
    if (!ys || !xr) {
      return '<svg class="il-chart" viewBox="0 0 ' + w + " " + h + '" width="' + w + '" height="' + h + '">' + body +
        '<text x="' + left + '" y="70">' + DASH + " no window yet</text></svg>";
    }
    var y0 = 0, y1 = ys[1] > 0 ? ys[1] * 1.1 : 1;
    var x0 = xr[0], x1 = xr[1] > xr[0] ? xr[1] : xr[0] + 1;
    function px(x) { return left + ((x - x0) / (x1 - x0)) * (w - left - 8); }
    function py(y) { return top + (1 - (y - y0) / (y1 - y0)) * (h - top - bottom); }
    body += '<line x1="' + left + '" y1="' + py(y0) + '" x2="' + (w - 8) + '" y2="' + py(y0) + '" class="il-axis"/>';
    body += '<line x1="' + left + '" y1="' + top + '" x2="' + left + '" y2="' + py(y0) + '" class="il-axis"/>';
    body += '<text x="' + (left - 4) + '" y="' + (top + 4) + '" text-anchor="end">' + esc(fmt(y1, 1)) + "</text>";
    body += '<text x="' + (left - 4) + '" y="' + py(y0) + '" text-anchor="end">0</text>';
    body += '<text x="' + left + '" y="' + (h - 4) + '">' + esc(fmt(Math.round(x0), 0)) + " s</text>";
    body += '<text x="' + (w - 8) + '" y="' + (h - 4) + '" text-anchor="end">' + esc(fmt(Math.round(x1), 0)) + " s</text>";
    series.forEach(function (s, i) {
      var d = "";
      s.values.forEach(function (v, j) {
        if (typeof v !== "number") return;
        d += (d ? " L" : "M") + px(xs[j]).toFixed(1) + "," + py(v).toFixed(1);
      });
      body += '<path d="' + d + '" class="il-line il-s' + i + (s.dashed ? " il-dashed" : "") + '"/>';
      body += '<text x="' + (w - 8) + '" y="' + (12 + 12 * i) + '" text-anchor="end" class="il-s' + i + '-text">' + esc(s.name) + "</text>";
    });
    return '<svg class="il-chart" viewBox="0 0 ' + w + " " + h + '" width="' + w + '" height="' + h + '" data-chart="' + esc(title) + '">' + body + "</svg>";
  }

  // executions per batch size (summary.json's batch_size_histogram)
  function histogram(histo, why) {
    var w = 300, h = 150, left = 40, bottom = 20, top = 18;
    var body = '<text x="' + left + '" y="12" class="il-title">batch sizes formed (server)</text>';
    var sizes = histo ? Object.keys(histo).map(Number).sort(function (a, b) { return a - b; }) : [];
    if (!sizes.length) {
      return '<svg class="il-chart" viewBox="0 0 ' + w + " " + h + '" width="' + w + '" height="' + h + '">' + body +
        '<text x="' + left + '" y="70">' + DASH + " " + esc(why || "no batches yet") + "</text></svg>";
    }
    var max = Math.max.apply(null, sizes.map(function (s) { return histo[String(s)]; })) || 1;
    var slot = (w - left - 8) / sizes.length;
    sizes.forEach(function (s, i) {
      var count = histo[String(s)];
      var bh = (count / max) * (h - top - bottom);
      var x = left + i * slot;
      body += '<rect x="' + (x + 1).toFixed(1) + '" y="' + (h - bottom - bh).toFixed(1) + '" width="' + Math.max(1, slot - 2).toFixed(1) +
        '" height="' + bh.toFixed(1) + '" class="il-bar"><title>batch ' + s + ": " + count + " executions</title></rect>";
      if (sizes.length <= 16) body += '<text x="' + (x + slot / 2) + '" y="' + (h - 6) + '" text-anchor="middle">' + s + "</text>";
    });
    body += '<text x="' + (left - 4) + '" y="' + (top + 4) + '" text-anchor="end">' + max + "</text>";
    return '<svg class="il-chart" viewBox="0 0 ' + w + " " + h + '" width="' + w + '" height="' + h + '" data-chart="batch sizes">' + body + "</svg>";
  }

  // queue vs compute as one stacked bar (server averages, ms)
  function queueCompute(side) {
    var q = side && side.queue_ms_avg, c = side && side.compute_ms_avg;
    if (typeof q !== "number" || typeof c !== "number" || q + c <= 0) return "";
    var w = 300, qw = (q / (q + c)) * w;
    return '<svg class="il-stack" width="' + w + '" height="14" viewBox="0 0 ' + w + ' 14" data-chart="queue vs compute">' +
      '<rect x="0" y="0" width="' + qw.toFixed(1) + '" height="14" class="il-queue"><title>queue ' + fmt(q) + ' ms</title></rect>' +
      '<rect x="' + qw.toFixed(1) + '" y="0" width="' + (w - qw).toFixed(1) + '" height="14" class="il-compute"><title>compute ' + fmt(c) + " ms</title></rect></svg>" +
      '<div class="il-why">queue ' + esc(fmt(q)) + " ms | compute " + esc(fmt(c)) + " ms</div>";
  }

  // a generative target's token figures (summary.json's generation and decoupled blocks)
  function generationFigures(n, gen, dec) {
    if (!gen) return "";
    var none = "no generation in the steady state yet";
    var first = (dec && dec.first_response_ms) || {};
    var html = figure(n + ".decoupled.first_response_ms.p50", "TTFT p50 (ms)", first.p50, 3, none);
    html += figure(n + ".decoupled.first_response_ms.p99", "TTFT p99 (ms)", first.p99, 3, none);
    html += figure(n + ".generation.tpot_ms.p50", "TPOT p50 (ms)", gen.tpot_ms.p50, 3, none);
    html += figure(n + ".generation.tpot_ms.p99", "TPOT p99 (ms)", gen.tpot_ms.p99, 3, none);
    html += figure(n + ".generation.itl_ms.p99", "ITL p99 (ms)", gen.itl_ms.p99, 3, none);
    html += figure(n + ".generation.output_tokens_per_s", "output tokens/s", gen.output_tokens_per_s, 1);
    if (gen.goodput) html += figure(n + ".generation.goodput.attainment_pct", "goodput (%)", gen.goodput.attainment_pct, 1, "no request in the steady state yet");
    if (gen.server) {
      html += figure(n + ".generation.server.ttft_residual_ms.p50", "TTFT client \u2212 server p50 (ms)", gen.server.ttft_residual_ms.p50, 3, none);
    }
    return html;
  }

  function targetCard(t) {
    var n = t.name, lat = t.latency_ms, side = t.server_side || {}, loop = t.open_loop;
    var sideWhy = t.server_why;
    var html = '<div class="il-card" data-target="' + esc(n) + '"><h3>' + esc(n) + ' <small>' + esc(t.kind || t.server) + " \u00b7 " + esc(t.model) + "</small></h3>";
    html += '<div class="il-figs">';
    html += figure(n + ".requests", "requests", t.requests, 0);
    html += figure(n + ".latency_ms.p50", "p50 (ms)", lat.p50, 3, "no successful request in the steady state yet");
    html += figure(n + ".latency_ms.p95", "p95 (ms)", lat.p95, 3, "no successful request in the steady state yet");
    html += figure(n + ".latency_ms.p99", "p99 (ms)", lat.p99, 3, "no successful request in the steady state yet");
    html += figure(n + ".throughput_rps", "throughput (req/s)", t.throughput_rps, 1);
    html += figure(n + ".error_rate", "error rate", t.error_rate, 4);
    html += figure(n + ".server_side.avg_batch_size", "avg batch (server)", side.avg_batch_size, 2, sideWhy);
    html += figure(n + ".server_side.queue_ms_avg", "queue (ms, server)", side.queue_ms_avg, 3, sideWhy);
    html += figure(n + ".server_side.compute_ms_avg", "compute (ms, server)", side.compute_ms_avg, 3, sideWhy);
    html += figure(n + ".residual_ms", "client \u2212 server (ms)", t.residual_ms, 3, t.residual_why);
    if (loop) {
      html += figure(n + ".open_loop.configured_rps", "target rate (req/s)", loop.configured_rps, 1);
      html += figure(n + ".open_loop.achieved_rps", "achieved rate (req/s)", loop.achieved_rps, 1);
      html += figure(n + ".open_loop.send_lag_ms.p99", "send lag p99 (ms)", loop.send_lag_ms.p99, 3, "nothing sent yet");
      html += figure(n + ".open_loop.unsent", "unsent", loop.unsent, 0);
    }
    html += generationFigures(n, t.generation, t.decoupled);
    html += "</div>";
    html += queueCompute(side);
    if (t.errors.length) {
      html += '<table class="il-table"><tr><th>error class</th><th>count</th><th>example</th></tr>';
      t.errors.forEach(function (e) {
        html += "<tr><td>" + esc(e["class"]) + '</td><td data-field="' + esc(n + ".errors." + e["class"]) + '" data-value="' + e.count + '">' + e.count +
          "</td><td>" + esc(e.example) + "</td></tr>";
      });
      html += "</table>";
    }
    var xs = t.windows.map(function (p) { return p.t; });
    var rate = [{ name: "achieved req/s", values: t.windows.map(function (p) { return p.rps; }) }];
    if (loop) rate.push({ name: "target req/s", values: t.windows.map(function (p) { return p.target_rps; }), dashed: true });
    html += '<div class="il-charts">' + lineChart("p99 per window (ms)", xs, [{ name: "p99", values: t.windows.map(function (p) { return p.p99_ms; }) }]) +
      lineChart("throughput per window (req/s)", xs, rate) +
      (t.generation ? lineChart("output tokens per window (tok/s)", xs, [{ name: "tok/s", values: t.windows.map(function (p) { return p.output_tokens_per_s; }) }]) : "") +
      histogram(side.batch_size_histogram, sideWhy) + "</div>";
    return html + "</div>";
  }

  function gpuPart(gpu) {
    if (!gpu.devices) {
      return '<div class="il-card"><h3>GPU</h3>' + figure("gpu.util_pct", "utilisation (%)", null, 1, gpu.why) + "</div>";
    }
    var html = '<div class="il-card"><h3>GPU</h3><table class="il-table"><tr><th>host</th><th>gpu</th><th>util %</th><th>memory used / total (GiB)</th></tr>';
    gpu.devices.forEach(function (d) {
      var gib = function (b) { return typeof b === "number" ? b / 1073741824 : null; };
      html += "<tr><td>" + esc(d.host) + "</td><td>" + esc(d.gpu + " " + d.name) + '</td><td data-field="gpu.' + esc(d.host + "." + d.gpu) + '.util_pct">' + esc(fmt(d.util_pct, 1)) +
        "</td><td>" + esc(fmt(gib(d.mem_used_bytes), 2)) + " / " + esc(fmt(gib(d.mem_total_bytes), 2)) + "</td></tr>";
    });
    return html + "</table></div>";
  }

  function sloPart(slo) {
    if (!slo.checks.length) return '<div class="il-card"><h3>SLO</h3><div class="il-why">no thresholds set in the scenario</div></div>';
    var html = '<div class="il-card"><h3>SLO <span class="il-state il-' + esc(slo.state) + '" data-field="slo.state" data-value="' + esc(slo.state) + '">' + esc(slo.state) +
      '</span></h3><table class="il-table"><tr><th>target</th><th>check</th><th>limit</th><th>value</th><th>state</th></tr>';
    slo.checks.forEach(function (c) {
      html += "<tr><td>" + esc(c.target) + "</td><td>" + esc(c.metric) + "</td><td>" + esc(c.bound + " " + c.limit) + "</td><td>" + esc(fmt(c.value)) +
        '</td><td><span class="il-state il-' + esc(c.state) + '" data-field="slo.' + esc(c.target + "." + c.metric) + '" data-value="' + esc(c.state) + '"' +
        (c.note ? ' title="' + esc(c.note) + '"' : "") + ">" + esc(c.state) + "</span></td></tr>";
    });
    return html + "</table></div>";
  }

  var STYLE =
    "#" + PANEL_ID + "{padding:12px 0;font-family:inherit;color:inherit}" +
    "#" + PANEL_ID + " h3{margin:8px 0;font-size:1.05em}#" + PANEL_ID + " small{opacity:.65;font-weight:normal}" +
    ".il-card{border:1px solid rgba(128,128,128,.35);border-radius:6px;padding:8px 12px;margin:8px 0}" +
    ".il-figs{display:flex;flex-wrap:wrap;gap:6px 18px}.il-fig{min-width:120px}.il-label{font-size:.78em;opacity:.7}" +
    ".il-value{font-size:1.15em;font-variant-numeric:tabular-nums}.il-why{font-size:.72em;opacity:.6;max-width:260px}" +
    ".il-charts{display:flex;flex-wrap:wrap;gap:12px;margin-top:8px}.il-chart{font-size:10px;fill:currentColor}" +
    ".il-title{font-weight:bold}.il-axis{stroke:currentColor;opacity:.4}.il-line{fill:none;stroke-width:1.8}" +
    ".il-s0{stroke:#2e7dd7}.il-s1{stroke:#e8743b}.il-s0-text{fill:#2e7dd7}.il-s1-text{fill:#e8743b}.il-dashed{stroke-dasharray:5 3}" +
    ".il-bar{fill:#19a979}.il-queue{fill:#e8743b}.il-compute{fill:#2e7dd7}.il-stack{margin-top:8px}" +
    ".il-table{border-collapse:collapse;font-size:.85em;margin-top:6px}.il-table td,.il-table th{border-bottom:1px solid rgba(128,128,128,.3);padding:2px 8px;text-align:left}" +
    ".il-state{padding:0 6px;border-radius:4px}.il-pass{background:#19a97933}.il-fail{background:#e0303033}.il-pending{background:#8888884d}";

  function render(stats) {
    var run = stats.run;
    var html = '<style>' + STYLE + "</style>";
    html += '<div class="il-run" data-field="run.phase" data-value="' + esc(run.phase) + '">' + esc(run.scenario) + ": " + esc(run.phase) +
      (run.elapsed_s === null ? "" : " \u00b7 " + fmt(run.elapsed_s, 0) + " s") + " \u00b7 steady " + fmt(run.steady_s, 1) + " s \u00b7 " +
      run.workers + " worker(s) \u00b7 exact percentiles over the steady state" + (run.final ? " (final: as in summary.json)" : "") + "</div>";
    stats.targets.forEach(function (t) { html += targetCard(t); });
    html += sloPart(stats.slo) + gpuPart(stats.gpu);
    return html;
  }

  function panel() {
    var el = document.getElementById(PANEL_ID);
    if (!el) {
      el = document.createElement("div");
      el.id = PANEL_ID;
    }
    // under Locust's table for this tab; the page re-renders, so this is checked every tick
    var table = document.querySelector("#root .MuiTableContainer-root");
    var parent = table ? table.parentNode : document.getElementById("root") || document.body;
    var after = table ? table.nextSibling : null;
    if (el.parentNode !== parent || (table && el.previousSibling !== table)) parent.insertBefore(el, after);
    return el;
  }

  function onTab() {
    return new URLSearchParams(window.location.search).get("tab") === TAB;
  }

  function tick() {
    var el = document.getElementById(PANEL_ID);
    if (!onTab()) {
      if (el) el.parentNode.removeChild(el);
      return;
    }
    el = panel();
    var now = Date.now();
    if (now - last < EVERY_MS && el.getAttribute("data-loaded")) return;
    last = now;
    fetch("./inference/stats", { credentials: "same-origin" })
      .then(function (r) { return r.json(); })
      .then(function (stats) {
        var target = panel();
        target.innerHTML = render(stats);
        target.setAttribute("data-loaded", String(now));
      })
      .catch(function (error) {
        panel().setAttribute("data-error", String(error));
      });
  }

  setInterval(tick, 300);
  tick();
})();
