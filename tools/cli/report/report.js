// The narrows report page: draws the report data (tools/cli/report_command.cc builds it) with Chart.js.
// The page records what it drew on <body>: data-charts (charts with data), data-rendered (charts
// that laid out their points), data-heatmaps, data-errors — the browser test reads them.
(function () {
  'use strict';
  const status = { charts: 0, rendered: 0, heatmaps: 0, errors: [] };
  const errorBox = document.createElement('div');
  errorBox.id = 'report-errors';
  document.body.prepend(errorBox);
  function recordError(message) {
    status.errors.push(message);
    errorBox.style.display = 'block';
    errorBox.textContent = 'The report could not draw everything: ' + status.errors.join('; ');
    document.body.dataset.errors = String(status.errors.length);
  }
  window.addEventListener('error', (e) => recordError(String(e.message)));

  const palette = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f',
    '#bcbd22', '#17becf'];
  const colors = new Map();
  function colorOf(label) {
    const key = label.replace(/ \(95% band\)$/, '').replace(/ \(mean of \d+ seeds\)$/, '').replace(/ fit$/, '');
    if (!colors.has(key)) colors.set(key, palette[colors.size % palette.length]);
    return colors.get(key);
  }

  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function scale(axis) {
    return { type: axis.log ? 'logarithmic' : 'linear', title: { display: !!axis.label, text: axis.label } };
  }

  function addChart(container, block, config, height, wide) {
    const fig = el('figure', { class: wide ? 'chart wide' : 'chart', id: block.id });
    fig.appendChild(el('figcaption', {}, block.title));
    const box = el('div', { class: 'canvas-box' });
    if (height) box.style.height = height + 'px';
    const canvas = el('canvas');
    box.appendChild(canvas);
    fig.appendChild(box);
    container.appendChild(fig);
    status.charts++;
    try {
      const chart = new Chart(canvas, config);
      let points = 0;
      chart.data.datasets.forEach((d, i) => { points += chart.getDatasetMeta(i).data.length; });
      canvas.dataset.points = String(points);
      if (points > 0 && chart.chartArea && chart.chartArea.width > 0 && chart.chartArea.height > 0) {
        status.rendered++;
        fig.dataset.rendered = 'true';
      }
    } catch (err) {
      recordError(block.id + ': ' + err.message);
    }
  }

  function noData(container, block) {
    container.appendChild(el('p', { class: 'note' }, block.title + ': no data.'));
  }

  const common = { responsive: true, maintainAspectRatio: false, animation: false,
    plugins: { legend: { position: 'bottom' } } };

  // A band (points [x, lo, hi]): its lower edge, then its upper edge filled down to it, in the
  // colour of the curve it belongs to, without legend entries.
  function bandDatasets(s) {
    const pts = s.points.filter((p) => p[0] !== null && p[1] !== null && p[2] !== null);
    const color = colorOf(s.label);
    const edge = { showLine: true, pointRadius: 0, borderWidth: 0, borderColor: 'transparent', band: true };
    return [Object.assign({ label: s.label, data: pts.map((p) => ({ x: p[0], y: p[1] })), fill: false }, edge),
      Object.assign({ label: s.label, data: pts.map((p) => ({ x: p[0], y: p[2] })), fill: '-1',
        backgroundColor: color + '33' }, edge)];
  }

  function lineChart(container, b) {
    const datasets = b.series.flatMap((s) => {
      if (s.style === 'band') return bandDatasets(s);
      const pts = s.points.filter((p) => p[0] !== null && p[1] !== null &&
        (!b.x.log || p[0] > 0) && (!b.y.log || p[1] > 0));
      const color = colorOf(s.label);
      return [{ label: s.label, data: pts.map((p) => ({ x: p[0], y: p[1] })), borderColor: color,
        backgroundColor: color, showLine: s.style !== 'points', borderDash: s.style === 'dashed' ? [6, 4] : [],
        pointRadius: s.style === 'points' ? 4 : (s.style === 'dashed' || pts.length > 60 ? 0 : 2), borderWidth: 2 }];
    }).filter((d) => d.data.length > 0);
    if (datasets.length === 0) return noData(container, b);
    // Room for a long legend below the plot (about one row per series past the third).
    const height = datasets.length > 3 ? 300 + 22 * (datasets.length - 3) : undefined;
    const legend = { position: 'bottom', labels: { filter: (item, data) => !data.datasets[item.datasetIndex].band } };
    addChart(container, b, { type: 'scatter', data: { datasets },
      options: Object.assign({}, common, { plugins: { legend }, scales: { x: scale(b.x), y: scale(b.y) } }) }, height);
  }

  function barChart(container, b) {
    if (b.categories.length === 0) return noData(container, b);
    const datasets = b.series.map((s) => ({ label: s.label, data: s.values,
      backgroundColor: b.categories.map(colorOf) }));
    const y = Object.assign(scale(b.y), { min: 0, max: 100 });
    addChart(container, b, { type: 'bar', data: { labels: b.categories, datasets },
      options: Object.assign({}, common, { plugins: { legend: { display: false } }, scales: { y } }) });
  }

  const stateColors = { compute: '#2ca02c', communication: '#1f77b4', idle: '#c8ccd4', absent: '#d62728' };
  const markerStyles = { 'outer sync': ['triangle', '#1d2330'], 'outer gradient dropped': ['crossRot', '#d62728'],
    join: ['rectRot', '#9467bd'], leave: ['line', '#ff7f0e'], crash: ['crossRot', '#1d2330'],
    dropped: ['crossRot', '#7f7f7f'] };

  function timelineChart(container, b) {
    if (b.workers === 0 || b.spans.length === 0) return noData(container, b);
    const labels = [];
    for (let w = 0; w < b.workers; w++) labels.push('worker ' + w);
    const datasets = Object.keys(stateColors).map((state) => ({
      type: 'bar', label: state, backgroundColor: stateColors[state], grouped: false, barPercentage: 0.7,
      categoryPercentage: 1, data: b.spans.filter((s) => s[3] === state).map((s) => ({ x: [s[1], s[2]], y: labels[s[0]] })),
    })).filter((d) => d.data.length > 0);
    for (const [kind, style] of Object.entries(markerStyles)) {
      const data = b.markers.filter((m) => m[2] === kind && m[1] !== null).map((m) => ({ x: m[1], y: labels[m[0]] }));
      if (data.length > 0) {
        // Drawn over the bars (the lowest order is drawn last), ringed in white so that a marker on a
        // bar of its own colour stands out.
        datasets.push({ type: 'scatter', label: kind, data, pointStyle: style[0], borderColor: '#ffffff',
          backgroundColor: style[1], pointRadius: 7, borderWidth: 1.5, order: -1 });
      }
    }
    addChart(container, b, { type: 'bar', data: { labels, datasets },
      options: Object.assign({}, common, { indexAxis: 'y',
        scales: { x: Object.assign(scale(b.x), { min: 0 }), y: { type: 'category', labels, ticks: { autoSkip: false } } } }) },
      Math.max(160, 40 + 30 * b.workers), true);
  }

  function table(container, b) {
    if (b.title) container.appendChild(el('div', { class: 'block-title' }, b.title));
    const t = el('table');
    const head = el('tr');
    b.columns.forEach((c) => head.appendChild(el('th', {}, c)));
    t.appendChild(head);
    b.rows.forEach((r) => {
      const tr = el('tr');
      r.forEach((c) => tr.appendChild(el('td', {}, c === null ? '-' : String(c))));
      t.appendChild(tr);
    });
    container.appendChild(t);
  }

  // Speed-up v as a colour: red below 1, green above, stronger with |log2 v| (saturating at 8x).
  function heatColor(v) {
    const s = Math.min(1, Math.abs(Math.log2(v)) / 3);
    const light = Math.round(95 - 45 * s);
    return v >= 1 ? 'hsl(130, 55%, ' + light + '%)' : 'hsl(0, 70%, ' + light + '%)';
  }

  function shareColor(v) {
    return 'hsl(210, 70%, ' + Math.round(97 - 50 * Math.min(1, Math.max(0, v))) + '%)';
  }

  function heatmap(container, b) {
    container.appendChild(el('div', { class: 'block-title' }, b.title));
    const t = el('table', { class: 'heatmap' });
    const head = el('tr');
    head.appendChild(el('th', {}, b.row_label + ' \\ ' + b.column_label));
    b.columns.forEach((c) => head.appendChild(el('th', {}, c)));
    t.appendChild(head);
    b.rows.forEach((r, i) => {
      const tr = el('tr');
      tr.appendChild(el('th', {}, r));
      b.values[i].forEach((v) => {
        const share = b.unit === 'share';  // a fraction shown as a percentage, else a speed-up
        const td = el('td', {}, v === null ? '-' : share ? (100 * v).toFixed(0) + '%' : v.toFixed(2) + 'x');
        if (v !== null) {
          td.style.background = share ? shareColor(v) : heatColor(v);
          td.dataset.value = String(v);
        }
        tr.appendChild(td);
      });
      t.appendChild(tr);
    });
    // Wide maps scroll inside their own box rather than off the page.
    const box = el('div', { class: 'heatmap-box' });
    box.appendChild(t);
    container.appendChild(box);
    status.heatmaps++;
  }

  function render() {
    const report = JSON.parse(document.getElementById('report-data').textContent);
    document.title = report.title;
    const header = el('header');
    header.appendChild(el('h1', {}, report.title));
    const nav = el('nav');
    header.appendChild(nav);
    document.body.prepend(header);
    const main = el('main');
    document.getElementById('report').appendChild(main);
    report.sections.forEach((section, i) => {
      const sec = el('section', { id: 'section-' + i });
      main.appendChild(sec);  // charts size themselves from their container: attached first
      sec.appendChild(el('h2', {}, section.title));
      const link = el('a', { href: '#section-' + i }, section.title);
      nav.appendChild(link);
      let grid = null;
      for (const b of section.blocks) {
        if (b.type === 'chart') {
          if (!grid) {
            grid = el('div', { class: 'grid' });
            sec.appendChild(grid);
          }
          if (b.kind === 'line') lineChart(grid, b);
          else if (b.kind === 'bar') barChart(grid, b);
          else if (b.kind === 'timeline') timelineChart(grid, b);
          else recordError('unknown chart kind ' + b.kind);
          continue;
        }
        grid = null;
        if (b.type === 'table') table(sec, b);
        else if (b.type === 'heatmap') heatmap(sec, b);
        else if (b.type === 'text') sec.appendChild(el('p', { class: 'note' }, b.text));
        else if (b.type === 'pre') {
          const d = el('details');
          d.appendChild(el('summary', {}, b.title));
          d.appendChild(el('pre', {}, b.text));
          sec.appendChild(d);
        } else recordError('unknown block type ' + b.type);
      }
    });
  }

  try {
    Chart.defaults.font.family = 'system-ui, -apple-system, "Segoe UI", Roboto, sans-serif';
    render();
  } catch (err) {
    recordError(err.message);
  }
  document.body.dataset.charts = String(status.charts);
  document.body.dataset.rendered = String(status.rendered);
  document.body.dataset.heatmaps = String(status.heatmaps);
  document.body.dataset.errors = String(status.errors.length);
})();
