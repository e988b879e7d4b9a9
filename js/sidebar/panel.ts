/**
 * The main-area panel for the runs chosen in the sidebar: their curves
 * overlaid with a legend, as the server's chart route decides them with the
 * notebook panels' one chart (record/_chart.py: log scale when the values
 * span decades, every tick with its label; each series cut to at most 2,000
 * points, its extremes kept), drawn here at the panel's width, where the time went per node, their
 * summaries side by side and their findings (somatize.diagnose). Colours are JupyterLab's theme variables.
 */
import { Widget } from '@lumino/widgets';
import { Message } from '@lumino/messaging';

import { IChart, IChosen, IFinding, INode, IRun, best, configValue, duration, hasConfig, number } from './model';
import { el } from './dom';
import { requestAPI } from './request';

const SVG = 'http://www.w3.org/2000/svg';
const CHART_RUNS = 20; // runs the server's chart route overlays at most (_browse.CHART_RUNS)
export const COLORS = [
  'var(--jp-brand-color1)',
  'var(--jp-warn-color1)',
  'var(--jp-success-color1)',
  'var(--jp-error-color1)',
  'var(--jp-accent-color1)',
  'var(--jp-brand-color3)',
  'var(--jp-warn-color3)'
];

function svg(tag: string, attrs: Record<string, string | number>): SVGElement {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) {
    node.setAttribute(k, String(v));
  }
  return node;
}

function base(c: IChosen): string {
  return `stores/${c.store.id}/runs/${c.row.run}`;
}

export class RunsPanel extends Widget {
  constructor(private chosen: IChosen[]) {
    super();
    this.addClass('somatize-runs-panel');
    this.title.label = chosen.length === 1 ? chosen[0].row.run : `${chosen.length} runs`;
    this.title.caption = chosen.map(c => `${c.store.path}: ${c.row.run}`).join('\n');
    this.title.closable = true;
    const names = [...new Set(chosen.flatMap(c => c.row.curves ?? []))].sort();
    // shown first: the loss, else the first fact a chosen run summarises (what
    // its Recorder was told matters), else the first curve by name
    const of = (fact: string) => names.find(n => n === fact || n.startsWith(`${fact}/`));
    const summarised = chosen.flatMap(c => Object.keys(c.row.summarising ?? {}));
    this.curveName = of('loss') ?? summarised.map(of).find(n => n) ?? names[0] ?? 'loss';
    const top = el('div', 'smz-panel-top');
    const label = el('label', 'smz-curve-label', 'Curve ');
    this.picker = el('select', 'smz-curve-picker');
    for (const n of names) {
      const o = el('option', undefined, n);
      o.value = n;
      o.selected = n === this.curveName;
      this.picker.appendChild(o);
    }
    this.picker.addEventListener('change', () => {
      this.curveName = this.picker.value;
      void this.refresh();
    });
    label.appendChild(this.picker);
    top.appendChild(label);
    this.node.appendChild(top);
    this.curves = el('section', 'smz-curves');
    this.spent = el('section', 'smz-spent');
    this.table = el('section', 'smz-summaries');
    this.findings = el('section', 'smz-findings');
    this.node.append(this.curves, this.spent, this.table, this.findings);
    void this.refresh();
  }

  dispose(): void {
    window.clearTimeout(this.timer);
    super.dispose();
  }

  async refresh(): Promise<void> {
    window.clearTimeout(this.timer);
    const rows = await Promise.all(this.chosen.map(c => requestAPI<IRun>(base(c)).catch(() => c.row)));
    this.chosen = this.chosen.map((c, i) => ({ store: c.store, row: rows[i] }));
    // the server overlays at most CHART_RUNS runs in one chart; a failure says why
    const chart = await requestAPI<IChart>('chart', {
      name: this.curveName,
      run: this.chosen.slice(0, CHART_RUNS).map(c => `${c.store.id}/${c.row.run}`)
    }).catch((e: Error) => e.message || 'the server did not answer');
    const nodes = await Promise.all(
      this.chosen.map(c => requestAPI<{ nodes: INode[] }>(`${base(c)}/nodes`).catch(() => ({ nodes: [] as INode[] })))
    );
    this.drawCurves(chart);
    this.drawSpent(nodes.map(n => n.nodes));
    this.drawTable();
    const found = await Promise.all(
      this.chosen.map(c =>
        c.row.state === 'damaged'
          ? null
          : requestAPI<{ findings: IFinding[] }>(`${base(c)}/findings`).then(
              r => r.findings,
              () => null
            )
      )
    );
    this.drawFindings(found);
    if (this.chosen.some(c => c.row.state === 'running')) {
      this.timer = window.setTimeout(() => void this.refresh(), 2000);
    }
  }

  protected onResize(msg: Widget.ResizeMessage): void {
    super.onResize(msg);
    if (this.drawn) {
      this.drawCurves(this.drawn);
    }
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    if (this.drawn) {
      this.drawCurves(this.drawn);
    }
  }

  private drawCurves(data: IChart | string): void {
    this.drawn = data;
    // drawn at the panel's own width, so the text keeps its size
    const W = Math.max(320, Math.min(900, (this.node.clientWidth || 680) - 40));
    const H = Math.round(Math.min(320, Math.max(220, W * 0.45)));
    const M = { left: 56, right: 16, top: 12, bottom: 36 };
    this.curves.replaceChildren(el('h3', 'smz-h', `${this.curveName} by step`));
    if (typeof data === 'string') {
      this.curves.appendChild(el('p', 'smz-empty', `Could not read the curves: ${data}`));
      return;
    }
    if (!data.y || !data.y.every(Number.isFinite) || !data.series.some(s => s.points.length)) {
      const odd = data.runs.some(r => r.not_finite);
      const why = odd ? `No finite value of “${this.curveName}” to draw.` : `No run here has a curve “${this.curveName}” yet.`;
      this.curves.appendChild(el('p', 'smz-empty', why));
      return;
    }
    const title = this.curves.firstElementChild!;
    title.textContent = `${this.curveName} by step${data.log ? ', on a log scale' : ''}`;
    if (this.chosen.length > data.series.length) {
      title.textContent += ` (the first ${data.series.length} of ${this.chosen.length} runs)`;
    }
    const [x0, x1] = data.x;
    const [y0, y1] = data.y;
    const f = data.log ? Math.log10 : (v: number) => v; // y is in the axis's own space
    const sx = (x: number) => M.left + ((x - x0) / (x1 - x0 || 1)) * (W - M.left - M.right);
    const sy = (y: number) => H - M.bottom - ((f(y) - y0) / (y1 - y0 || 1)) * (H - M.top - M.bottom);
    const chart = svg('svg', { width: W, height: H, viewBox: `0 0 ${W} ${H}`, class: 'smz-chart', role: 'img' });
    chart.setAttribute('aria-label', `${data.ylabel} of ${data.series.length} runs`);
    chart.dataset.log = String(data.log);
    chart.appendChild(svg('rect', { x: M.left, y: M.top, width: W - M.left - M.right, height: H - M.top - M.bottom, class: 'smz-plot' }));
    for (const [y, label] of data.yticks) {
      chart.appendChild(svg('line', { x1: M.left, x2: W - M.right, y1: sy(y), y2: sy(y), class: 'smz-grid' }));
      const text = svg('text', { x: M.left - 6, y: sy(y) + 4, 'text-anchor': 'end', class: 'smz-tick', 'data-value': y });
      text.textContent = label;
      chart.appendChild(text);
    }
    // as many x labels as the width holds apart (Python gives them all; the widest sets the spacing)
    const widest = Math.max(...data.xticks.map(([, s]) => s.length)) * 6.6 + 12;
    const every = Math.max(1, Math.ceil((widest * data.xticks.length) / (W - M.left - M.right)));
    data.xticks.forEach(([x, label], i) => {
      if (i % every) {
        return;
      }
      chart.appendChild(svg('line', { x1: sx(x), x2: sx(x), y1: H - M.bottom, y2: H - M.bottom + 4, class: 'smz-grid' }));
      const text = svg('text', { x: sx(x), y: H - M.bottom + 16, 'text-anchor': 'middle', class: 'smz-tick', 'data-value': x });
      text.textContent = label;
      chart.appendChild(text);
    });
    const axis = svg('text', { x: (W + M.left) / 2, y: H - 4, 'text-anchor': 'middle', class: 'smz-axis' });
    axis.textContent = data.xlabel;
    chart.appendChild(axis);
    const legend = el('ul', 'smz-legend');
    data.series.forEach((s, i) => {
      const color = COLORS[i % COLORS.length];
      const told = data.runs[i];
      if (s.points.length) {
        const points = s.points.map(([x, y]) => `${sx(x).toFixed(1)},${sy(y).toFixed(1)}`).join(' ');
        const line = svg('polyline', { points, class: 'smz-curve', 'data-run': s.name, 'data-points': s.points.length });
        line.style.stroke = color;
        chart.appendChild(line);
      }
      const item = el('li', 'smz-legend-item');
      const swatch = el('span', 'smz-swatch');
      swatch.style.background = color;
      item.append(swatch, el('span', 'smz-legend-name', s.name));
      item.title = told.missing
        ? `${s.name}: ${told.missing}`
        : `${s.name}: ${told.points} points, min ${number(told.min)}, max ${number(told.max)}`;
      legend.appendChild(item);
    });
    this.curves.append(chart, legend);
  }

  private drawSpent(perRun: INode[][]): void {
    this.spent.replaceChildren(el('h3', 'smz-h', 'Where the time went, per node'));
    const grid = el('div', 'smz-spent-grid');
    perRun.forEach((nodes, i) => {
      const box = el('div', 'smz-spent-run');
      box.appendChild(el('div', 'smz-spent-title', this.chosen[i].row.run));
      const most = Math.max(1, ...nodes.map(n => n.total_us));
      if (!nodes.length) {
        box.appendChild(el('p', 'smz-empty', 'No node has run yet.'));
      }
      for (const n of [...nodes].sort((a, b) => b.total_us - a.total_us)) {
        const row = el('div', 'smz-bar-row');
        row.dataset.node = n.node;
        const name = el('span', 'smz-bar-name', n.node);
        name.title = n.node;
        const track = el('span', 'smz-bar-track');
        const bar = el('span', 'smz-bar');
        bar.style.width = `${(100 * n.total_us) / most}%`;
        bar.style.background = COLORS[i % COLORS.length];
        track.appendChild(bar);
        const text = el('span', 'smz-bar-text', `${duration(n.total_us / 1e6)} · ${Math.round(100 * n.share)}%`);
        row.append(name, track, text);
        box.appendChild(row);
      }
      grid.appendChild(box);
    });
    this.spent.appendChild(grid);
  }

  private drawTable(): void {
    this.table.replaceChildren(el('h3', 'smz-h', 'Summaries side by side'));
    const facts = [...new Set(this.chosen.flatMap(c => Object.keys(c.row.summarising ?? {})))].sort();
    const table = el('table', 'smz-table smz-side');
    const head = el('tr');
    head.appendChild(el('th', undefined, ''));
    for (const c of this.chosen) {
      const th = el('th', undefined, c.row.run);
      th.title = `${c.store.path}: ${c.row.run}`;
      head.appendChild(th);
    }
    table.appendChild(head);
    const line = (label: string, f: (r: IRun) => string) => {
      const tr = el('tr');
      tr.appendChild(el('th', undefined, label));
      for (const c of this.chosen) {
        const text = f(c.row);
        const td = el('td', undefined, text);
        td.title = text;
        tr.appendChild(td);
      }
      table.appendChild(tr);
    };
    line('store', r => this.chosen.find(c => c.row === r)?.store.path ?? '');
    line('state', r => r.state);
    line('steps', r => String(r.steps ?? '–'));
    line('duration', r => duration(r.duration));
    for (const f of facts) {
      line(`${f} last`, r => number(r.summarising?.[f]?.last));
      line(`${f} best`, r => (r.summarising?.[f] ? number(best(r.summarising[f])) : '–'));
    }
    // each config key a row of its own, named as runs() names its column (the
    // server sends a config flattened by that rule: {"optim.lr": 0.1})
    const keys = [...new Set(this.chosen.flatMap(c => (hasConfig(c.row.config) ? Object.keys(c.row.config!) : [])))];
    for (const k of keys.sort()) {
      line(`config.${k}`, r => (hasConfig(r.config) ? configValue(r.config![k]) : '–'));
    }
    const wrap = el('div', 'smz-table-wrap');
    wrap.appendChild(table);
    this.table.appendChild(wrap);
  }

  private drawFindings(perRun: (IFinding[] | null)[]): void {
    this.findings.replaceChildren(el('h3', 'smz-h', 'Findings (somatize.diagnose), worst first'));
    perRun.forEach((found, i) => {
      const box = el('div', 'smz-findings-run');
      box.dataset.run = this.chosen[i].row.run;
      box.appendChild(el('div', 'smz-spent-title', this.chosen[i].row.run));
      if (found === null) {
        box.appendChild(el('p', 'smz-empty', 'Could not be diagnosed.'));
      } else if (!found.length) {
        box.appendChild(el('p', 'smz-empty', 'No finding.'));
      } else {
        const list = el('ul', 'smz-finding-list');
        for (const f of found) {
          const where = f.node === null ? 'the loss' : f.node;
          const item = el('li', 'smz-finding', `${f.kind.replace(/_/g, ' ')} · ${where} · steps ${f.first}–${f.last}`);
          item.title = f.text;
          item.dataset.kind = f.kind;
          list.appendChild(item);
        }
        box.appendChild(list);
      }
      this.findings.appendChild(box);
    });
  }

  private findings: HTMLElement;
  private drawn: IChart | string | null = null;
  private curveName: string;
  private picker: HTMLSelectElement;
  private curves: HTMLElement;
  private spent: HTMLElement;
  private table: HTMLElement;
  private timer = 0;
}
