/**
 * The main-area panel for the runs chosen in the sidebar: their curves
 * overlaid with a legend, as the server's chart route decides them with the
 * notebook panels' one chart (_pictures/_chart.py: log scale when the values
 * span decades, every tick with its label; each series cut to at most 2,000
 * points, its extremes kept) and drawn by the notebook panels' own renderer
 * (js/widgets/chart.js, its look js/widgets/chart.css) at the panel's width;
 * where the time went per node, their summaries side by side and their
 * findings (somatize.diagnose). Colours are JupyterLab's theme variables.
 */
import { Widget } from '@lumino/widgets';
import { Message } from '@lumino/messaging';

import { IChart, IChosen, IFinding, INode, IRun, best, configValue, duration, hasConfig, number } from './model';
import { el } from './dom';
import { IRankTime, rankRows } from './ranks';
import { requestAPI } from './request';
import { PALETTE, drawChart, drawLegend } from '../widgets/chart.js';

const CHART_RUNS = 20; // runs the server's chart route overlays at most (_browse.CHART_RUNS)

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
    // the nodes' time, and a data-parallel run's time per rank (ranks.ts)
    const nodes = await Promise.all(
      this.chosen.map(c =>
        requestAPI<{ nodes: INode[] } & IRankTime>(`${base(c)}/nodes`).catch(() => ({ nodes: [] as INode[] }))
      )
    );
    this.drawCurves(chart);
    this.drawSpent(nodes);
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
    // x is what the server's chart says it is (its axis title: steps), drawn as given
    title.textContent = `${this.curveName} by ${data.xlabel}${data.log ? ', on a log scale' : ''}`;
    if (this.chosen.length > data.series.length) {
      title.textContent += ` (the first ${data.series.length} of ${this.chosen.length} runs)`;
    }
    // the legend says what each run gave: its points, min and max, or why it draws no line
    const legend = el('div', 'smz-legend');
    drawLegend(
      legend,
      data.series,
      data.series.map((s, i) => {
        const told = data.runs[i];
        return told.missing
          ? `${s.name}: ${told.missing}`
          : `${s.name}: ${told.points} points, min ${number(told.min)}, max ${number(told.max)}`;
      })
    );
    const host = el('div', 'smz-chart-host');
    this.curves.append(legend, host);
    // drawn at the host's own width (at most 900 px, chart.css), so the text keeps its size
    const width = host.clientWidth || 680;
    const chart = drawChart(host, data, { height: Math.round(Math.min(320, Math.max(220, width * 0.45))) });
    chart.setAttribute('role', 'img');
    chart.setAttribute('aria-label', `${data.ylabel} of ${data.series.length} runs`);
  }

  private drawSpent(perRun: ({ nodes: INode[] } & IRankTime)[]): void {
    const ranked = perRun.some(t => t.ranks?.length);
    this.spent.replaceChildren(el('h3', 'smz-h', `Where the time went, per node${ranked ? ' and per rank' : ''}`));
    const grid = el('div', 'smz-spent-grid');
    perRun.forEach((time, i) => {
      const nodes = time.nodes;
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
        bar.style.background = PALETTE[i % PALETTE.length]; // the colour of its line
        track.appendChild(bar);
        const text = el('span', 'smz-bar-text', `${duration(n.total_us / 1e6)} · ${Math.round(100 * n.share)}%`);
        row.append(name, track, text);
        box.appendChild(row);
      }
      box.append(...rankRows(time));
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
