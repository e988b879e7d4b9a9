/**
 * The sidebar: every store under the server's root, each with its runs as a
 * table (state, steps, count of findings, last and best of each summarised fact, configuration,
 * duration, age) that sorts, filters and refreshes by itself while a run is
 * going. The filter box takes a part of a run's name (matched here) or a
 * query (`config.lr < 1e-2 and loss.best < 0.1`, answered by the server over
 * every run, the grammar of `runs(store, where=...)`; one that does not read
 * shows the server's message, which points at the place). The runs are in
 * the order the server sorts them (`sort=`, `order=`: any column, config keys
 * and summaries included), chosen in the sort menu or by a column's header;
 * a column the table does not show gets a column of its own after the steps.
 * "Explore in notebook" puts the explorer's code for the runs listed,
 * `compare(store, where=..., metric=...)`, in a notebook. Everything read from the server is put in the page as text
 * (textContent, attributes), never as markup: a run or store named
 * `<img onerror=…>` stays a name.
 *
 * Where the whole table does not fit the sidebar's width (JupyterLab's
 * default left panel is 250-400 px), it folds: name (with its state) and
 * steps stay as columns, the count of findings becomes a badge after the
 * name, the others a details line under the name (and its tooltip), every
 * cell ellipsized; nothing scrolls sideways.
 */
import { Widget } from '@lumino/widgets';

import {
  FIXED_COLUMNS,
  FIXED_SORTS,
  IChosen,
  IRun,
  IRunPage,
  ISort,
  IStore,
  age,
  best,
  columnText,
  columnValue,
  configText,
  duration,
  hasConfig,
  isQuery,
  number,
  sortColumns
} from './model';
import { el } from './dom';
import { MissingServerExtension, RequestError, requestAPI } from './request';

/** The runs one store lists, with the filter and the order that chose them. */
export interface IListed {
  store: IStore;
  rows: IRun[];
  filter: { query: string; name: string };
  sort: ISort;
}

export interface ISidebarActions {
  open(chosen: IChosen[]): void;
  insert(chosen: IChosen[]): void;
  explore(listed: IListed[]): void;
  remove(chosen: IChosen[]): Promise<boolean>;
}

// signs every common UI font has (DejaVu has no U+23F8 '⏸': it drew as a box)
const STATE_SIGN: Record<string, string> = { running: '▶', finished: '✓', interrupted: '‖', damaged: '✗' };
const POLL_RUNNING_MS = 2000; // while a run is going
const POLL_IDLE_MS = 15000; // to notice new runs and stores
const QUERY_WAIT_MS = 400; // typing a query: ask the server once the typing pauses

// the columns the table shows of itself: sorting by another adds a column for it
const SHOWN = new Set(['run', 'state', 'steps', 'findings', 'duration', 'age']);

/** A column's name as the sorted column's header says it: a config key without `config.` (the menu says it). */
function shortName(column: string): string {
  return column.startsWith('config.') ? column.slice(7) : column;
}

/** A run's count of findings: a dash for none, an ellipsis while it is being counted. */
function findingsText(row: IRun): string {
  if (row.findings === null || row.findings === undefined) {
    return row.counting ? '…' : '–';
  }
  return row.findings === 0 ? '–' : String(row.findings);
}

function findingsTitle(row: IRun): string {
  if (row.findings_problem) {
    return `Could not be diagnosed: ${row.findings_problem}`;
  }
  if (row.findings === null || row.findings === undefined) {
    return row.counting ? 'Being diagnosed' : 'Not diagnosed';
  }
  return `${row.findings} finding(s) of somatize.diagnose${row.counting ? ' (being diagnosed again)' : ''}`;
}

function key(store: IStore, run: string): string {
  return `${store.id}/${run}`;
}

/** What the folded columns say of a run, one part each: facts, config, duration, age. */
function details(row: IRun, facts: string[], now: number): string[] {
  if (row.state === 'damaged') {
    return [row.problem ?? 'damaged'];
  }
  const out: string[] = [];
  for (const f of facts) {
    const stat = row.summarising?.[f];
    if (stat) {
      out.push(`${f} ${number(stat.last, 3)} / ${number(best(stat), 3)}`);
    }
  }
  const config = configText(row.config);
  if (config) {
    out.push(config);
  }
  out.push(`took ${duration(row.duration)}`, `updated ${age(row.updated, now)}`);
  return out;
}

export class RunBrowser extends Widget {
  constructor(private actions: ISidebarActions) {
    super();
    this.addClass('somatize-sidebar');
    this.id = 'somatize-sidebar';
    this.title.caption = 'somatize runs';
    const header = el('div', 'smz-header');
    header.appendChild(el('h2', 'smz-title', 'Runs'));
    const refresh = el('button', 'smz-button smz-refresh', 'Refresh');
    refresh.title = 'Read the stores again';
    refresh.addEventListener('click', () => void this.refresh());
    header.appendChild(refresh);
    this.node.appendChild(header);

    this.filter = el('input', 'smz-filter');
    this.filter.type = 'search';
    this.filter.placeholder = 'Filter: a name, or config.lr < 1e-2';
    this.filter.title =
      'A part of a run\'s name, or a query: config.lr < 1e-2 and loss.best < 0.1, state == "interrupted", ' +
      'config.opt in ["adam", "sgd"], not …';
    this.filter.setAttribute('aria-label', 'Filter runs by name or by a query');
    this.filter.addEventListener('input', () => this.filtered());
    this.node.appendChild(this.filter);

    // the order: any column, answered by the server over every run that matches
    const order = el('div', 'smz-order');
    const label = el('label', 'smz-order-label', 'Sort');
    this.sortMenu = el('select', 'smz-sort-menu');
    this.sortMenu.title = 'The column the runs are sorted by (the server sorts every run that matches)';
    this.sortMenu.addEventListener('change', () => this.sortBy(this.sortMenu.value, false));
    label.appendChild(this.sortMenu);
    this.sortDir = el('button', 'smz-button smz-sort-dir');
    this.sortDir.addEventListener('click', () => this.sortBy(this.sort.column, !this.sort.descending));
    order.append(label, this.sortDir);
    this.node.appendChild(order);

    const bar = el('div', 'smz-actions');
    this.openButton = this.button(bar, 'Open', 'Open the selected runs side by side', () =>
      this.actions.open(this.chosen())
    );
    this.insertButton = this.button(bar, 'Insert code', 'Insert progress(…) and spent(…) into the notebook', () =>
      this.actions.insert(this.chosen())
    );
    this.deleteButton = this.button(bar, 'Delete', 'Delete the selected runs (asks first)', () => void this.remove());
    this.deleteButton.classList.add('smz-danger');
    this.exploreButton = this.button(
      bar,
      'Explore in notebook',
      'Put the explorer for the runs listed in a notebook: compare(store, where=…, metric=…) with this filter, ' +
        'the sort column as the metric when it is a summary',
      () => this.actions.explore(this.listed())
    );
    this.exploreButton.classList.add('smz-explore');
    this.node.appendChild(bar);

    this.message = el('div', 'smz-message');
    this.message.setAttribute('role', 'status');
    this.node.appendChild(this.message);
    this.body = el('div', 'smz-stores');
    this.node.appendChild(this.body);
    this.updateButtons();
    this.resizer = new ResizeObserver(() => this.fold());
    this.resizer.observe(this.node);
  }

  /** The filter changed: a name is matched here at once; a query is asked of the server once typing pauses. */
  private filtered(): void {
    const where = this.where();
    window.clearTimeout(this.typing);
    if (where === this.asked) {
      this.render();
      return;
    }
    this.typing = window.setTimeout(() => void this.refresh(), QUERY_WAIT_MS);
  }

  /** The query in the filter box, or '' when it holds a part of a name. */
  private where(): string {
    const text = this.filter.value.trim();
    return isQuery(text) ? text : '';
  }

  /** Sort by `column` (`descending`), as the server answers it. */
  private sortBy(column: string, descending: boolean): void {
    this.sort = { column, descending };
    this.renderOrder();
    void this.refresh();
  }

  /**
   * Every page of a store's runs, as the server filters and sorts them.
   * Later pages are asked with the first page's `listing`, so they are cut
   * from the order it was cut from: a running run whose loss moves it
   * while the pages are read is listed once, not twice or never. A listing
   * the server no longer keeps (410) is read again from its first page;
   * after three such, page by page with no token (each page cut from the
   * order of its own moment, as a server without tokens answers).
   */
  private async pages(store: IStore, where: string, sort: ISort | null, tries = 3): Promise<IRun[]> {
    const all: IRun[] = [];
    let offset: number | null = 0;
    let listing: string | null = null;
    while (offset !== null) {
      let page: IRunPage;
      try {
        page = await requestAPI<IRunPage>(`stores/${store.id}/runs`, {
          offset,
          limit: 1000,
          ...(where ? { where } : {}),
          ...(sort ? { sort: sort.column, order: sort.descending ? 'desc' : 'asc' } : {}),
          ...(listing ? { listing } : {})
        });
      } catch (error) {
        if (error instanceof RequestError && error.status === 410 && tries > 0) {
          return this.pages(store, where, sort, tries - 1);
        }
        throw error;
      }
      all.push(...page.runs);
      offset = page.next;
      listing = tries > 0 ? (page.listing ?? listing) : null;
    }
    return all;
  }

  /**
   * A store's runs in the order asked. A store none of whose runs has the
   * column (as the rows read last say, or as the server says: 400) is listed
   * by name, and says why under its name.
   */
  private async storeRows(store: IStore, where: string, sort: ISort): Promise<[IRun[], string]> {
    if (sort.column === 'run' && !sort.descending) {
      return [await this.pages(store, where, null), ''];
    }
    const known = this.rows.get(store.id);
    const has =
      FIXED_COLUMNS.has(sort.column) || !known?.length || known.some(r => columnValue(r, sort.column) !== undefined);
    let why = `no run here has ${sort.column}`;
    if (has) {
      try {
        return [await this.pages(store, where, sort), ''];
      } catch (error) {
        // a query that does not read is the filter's problem, not the order's: said above the stores
        if (!(error instanceof RequestError && error.status === 400 && error.message.startsWith('sort='))) {
          throw error;
        }
        why = error.message;
      }
    }
    return [await this.pages(store, where, null), why];
  }

  /** Read the stores and their runs again; schedules the next read. */
  async refresh(): Promise<void> {
    window.clearTimeout(this.timer);
    window.clearTimeout(this.typing);
    const where = this.where();
    const reading = ++this.reading; // a later read (a new order, a new filter) wins over this one
    const sort = { ...this.sort };
    try {
      const { stores } = await requestAPI<{ stores: IStore[] }>('stores');
      const rows = new Map<string, IRun[]>();
      const unsorted = new Map<string, string>();
      for (const store of stores.filter(s => !s.error)) {
        // a store that cannot be read now (a bucket that does not answer) is a row saying why
        const [got, why] = await this.storeRows(store, where, sort);
        rows.set(store.id, got);
        if (why) {
          unsorted.set(store.id, why);
        }
      }
      if (reading !== this.reading) {
        return;
      }
      this.stores = stores;
      this.rows = rows;
      this.unsorted = unsorted;
      this.problem = '';
    } catch (error) {
      if (reading !== this.reading) {
        return;
      }
      if (error instanceof RequestError && error.status === 400 && where) {
        // the query does not read: the server's words point at the place; no run is shown as matching
        this.problem = error.message;
        this.node.dataset.problem = 'query';
        this.rows = new Map();
      } else {
        this.problem =
          error instanceof MissingServerExtension
            ? error.message
            : `Could not read the stores: ${(error as Error).message}`;
        this.node.dataset.problem = error instanceof MissingServerExtension ? 'missing-server-extension' : 'error';
      }
    }
    this.asked = where;
    if (!this.problem) {
      delete this.node.dataset.problem;
    }
    this.render();
    // a run going, or a count of findings still being made, is read again soon
    const running = [...this.rows.values()].some(rs => rs.some(r => r.state === 'running' || r.counting));
    this.timer = window.setTimeout(() => void this.refresh(), running ? POLL_RUNNING_MS : POLL_IDLE_MS);
  }

  dispose(): void {
    window.clearTimeout(this.timer);
    window.clearTimeout(this.typing);
    this.resizer.disconnect();
    super.dispose();
  }

  /**
   * Fold the tables (class `smz-narrow`, `data-layout="narrow"`) when one
   * of them is wider than the sidebar, unfold them when they all fit. Both
   * are tried in the same task, so no frame shows the wrong one.
   */
  private fold(): void {
    if (!this.node.isConnected || this.body.clientWidth === 0) {
      return; // hidden: measured again when shown
    }
    this.node.classList.remove('smz-narrow');
    const wraps = [...this.body.querySelectorAll<HTMLElement>('.smz-table-wrap')];
    const narrow = wraps.some(w => w.scrollWidth > w.clientWidth);
    this.node.classList.toggle('smz-narrow', narrow);
    this.node.dataset.layout = narrow ? 'narrow' : 'wide';
  }

  /** The selected runs, in the order they show. */
  chosen(): IChosen[] {
    const out: IChosen[] = [];
    for (const store of this.stores) {
      for (const row of this.rows.get(store.id) ?? []) {
        if (this.selected.has(key(store, row.run))) {
          out.push({ store, row });
        }
      }
    }
    return out;
  }

  /** The runs each store lists now (filtered, in order), with the filter and order that chose them. */
  listed(): IListed[] {
    const name = this.where() ? '' : this.filter.value.trim();
    const out: IListed[] = [];
    for (const store of this.stores) {
      const rows = this.shownRows(store);
      if (rows.length) {
        out.push({ store, rows, filter: { query: this.asked, name }, sort: { ...this.sort } });
      }
    }
    // runs selected: the stores they are in
    const chosen = new Set(this.chosen().map(c => c.store.id));
    return chosen.size ? out.filter(l => chosen.has(l.store.id)) : out;
  }

  /** A store's runs as the table shows them: the server's answer, a part of a name matched here. */
  private shownRows(store: IStore): IRun[] {
    const match = this.where() ? '' : this.filter.value.trim().toLowerCase(); // a query: the server chose the rows
    return (this.rows.get(store.id) ?? []).filter(r => !match || r.run.toLowerCase().includes(match));
  }

  private button(bar: HTMLElement, label: string, title: string, act: () => void): HTMLButtonElement {
    const b = el('button', 'smz-button', label);
    b.title = title;
    b.addEventListener('click', act);
    bar.appendChild(b);
    return b;
  }

  private async remove(): Promise<void> {
    const chosen = this.chosen();
    if (chosen.length && (await this.actions.remove(chosen))) {
      for (const c of chosen) {
        this.selected.delete(key(c.store, c.row.run));
      }
      await this.refresh();
    }
  }

  private updateButtons(): void {
    const chosen = this.chosen();
    const readable = chosen.filter(c => c.row.state !== 'damaged');
    this.openButton.disabled = readable.length === 0;
    this.insertButton.disabled = readable.length === 0;
    const readonly = chosen.some(c => c.store.readonly);
    this.deleteButton.disabled = chosen.length === 0 || readonly;
    this.deleteButton.title = readonly
      ? 'Runs in a bucket store are read-only here: delete them in the bucket'
      : 'Delete the selected runs (asks first)';
    this.node.dataset.selected = String(chosen.length);
    // the explorer needs runs to show, and a filter that reads (the one the rows answer)
    const typing = this.where() !== this.asked;
    this.exploreButton.disabled = !!this.problem || typing || !this.listed().length;
  }

  private render(): void {
    const focused = (document.activeElement as HTMLElement | null)?.dataset?.key;
    this.message.textContent = this.problem;
    this.message.hidden = !this.problem;
    this.body.replaceChildren();
    const now = Date.now() / 1000;
    this.renderOrder();
    if (!this.problem && this.stores.length === 0) {
      this.body.appendChild(
        el('p', 'smz-empty', 'No store under the server’s root yet. A Recorder(store, run=…) makes one.')
      );
    }
    for (const store of this.stores) {
      const section = el('section', 'smz-store');
      section.dataset.store = store.id;
      section.appendChild(this.storeName(store));
      if (store.error) {
        section.classList.add('smz-store-error');
        const why = el('p', 'smz-store-problem');
        why.appendChild(el('span', 'smz-store-problem-text', store.error));
        why.title = store.error;
        section.appendChild(why);
        this.body.appendChild(section);
        continue;
      }
      const unsorted = this.unsorted.get(store.id);
      if (unsorted) {
        const note = el('p', 'smz-note', `Listed by name: no run here has ${this.sort.column}`);
        note.title = unsorted;
        section.appendChild(note);
      }
      const rows = this.shownRows(store); // in the server's order
      const facts = [...new Set(rows.flatMap(r => Object.keys(r.summarising ?? {})))].sort();
      const withConfig = rows.some(r => hasConfig(r.config));
      // a store none of whose runs is listed: a line, not a table of empty headers
      section.appendChild(
        rows.length
          ? this.table(store, rows, facts, withConfig, now, !unsorted)
          : el('p', 'smz-empty', 'No run matches.')
      );
      this.body.appendChild(section);
    }
    this.fold();
    if (focused) {
      const again = this.body.querySelector<HTMLElement>(`tr[data-key="${CSS.escape(focused)}"]`);
      again?.focus();
    }
    this.updateButtons();
  }

  /**
   * A store's heading: its folder below the root, or a bucket store's URL
   * with a "bucket" badge (read-only). A URL too long for the sidebar is cut
   * in two places: the bucket's name at its end, the prefix at its start, so
   * the scheme, the bucket's first letters and the prefix's last part show;
   * the whole URL is the tooltip.
   */
  private storeName(store: IStore): HTMLElement {
    const h = el('h3', 'smz-store-name');
    if (!store.url) {
      h.textContent = store.path;
      h.title = store.path;
      return h;
    }
    h.classList.add('smz-bucket');
    const badge = el('span', 'smz-badge', 'bucket');
    badge.setAttribute('aria-hidden', 'true');
    const url = store.url;
    const slash = url.indexOf('/', url.indexOf('://') + 3); // where the bucket's name ends
    const cut = slash < 0 ? url.length : slash;
    const name = el('span', 'smz-url');
    const tail = el('span', 'smz-url-tail'); // cut at its start (direction: rtl), read left to right inside
    tail.appendChild(el('span', 'smz-url-prefix', url.slice(cut)));
    name.append(el('span', 'smz-url-head', url.slice(0, cut)), tail);
    h.append(badge, name, el('span', 'smz-sr', store.error ? ' (a bucket store, not read now)' : ' (a bucket store, read-only)'));
    h.title = `${url}\n${store.error ? store.error : 'A store in a bucket (c.SomatizeApp.stores): read-only here'}`;
    return h;
  }

  /** The sort menu: the fixed columns, each summarised fact's, each config key, of the runs listed. */
  private renderOrder(): void {
    const { facts, config } = sortColumns([...this.rows.values()].flat());
    const column = this.sort.column;
    const groups: [string, [string, string][]][] = [
      ['Run', FIXED_SORTS],
      ['Summaries', facts.map(c => [c, c])],
      ['Config', config.map(c => [c, c])]
    ];
    if (![...FIXED_SORTS.map(([c]) => c), ...facts, ...config].includes(column)) {
      groups.push(['Now', [[column, column]]]); // chosen when runs had it
    }
    this.sortMenu.replaceChildren();
    for (const [label, options] of groups) {
      if (!options.length) {
        continue;
      }
      const group = el('optgroup');
      group.label = label;
      for (const [value, text] of options) {
        const o = el('option', undefined, text);
        o.value = value;
        group.appendChild(o);
      }
      this.sortMenu.appendChild(group);
    }
    this.sortMenu.value = column;
    const down = this.sort.descending;
    this.sortDir.textContent = down ? '↓ desc' : '↑ asc';
    this.sortDir.title = down ? 'Descending: largest first (click for ascending)' : 'Ascending: smallest first (click for descending)';
    this.sortDir.setAttribute('aria-label', down ? 'Sorted descending; sort ascending' : 'Sorted ascending; sort descending');
    this.node.dataset.sort = `${column} ${down ? 'desc' : 'asc'}`;
  }

  private table(
    store: IStore,
    rows: IRun[],
    facts: string[],
    withConfig: boolean,
    now: number,
    sorted: boolean
  ): HTMLElement {
    const wrap = el('div', 'smz-table-wrap');
    const table = el('table', 'smz-table');
    table.setAttribute('role', 'grid');
    table.setAttribute('aria-label', `Runs of ${store.path}`);
    const head = el('tr');
    // the sorted column, when the table has none of its own: after the steps, in either layout
    const extra = sorted && !SHOWN.has(this.sort.column) ? this.sort.column : null;
    if (extra) {
      table.classList.add('smz-has-sorted');
    }
    const columns: [string | null, string, string][] = [
      [null, '', 'select'],
      ['run', 'Run', 'run'],
      ['steps', 'Steps', 'steps'],
      ...(extra ? [[extra, shortName(extra), 'sorted'] as [string, string, string]] : []),
      ['findings', 'Findings', 'findings'],
      ...facts.map(f => [`${f}.last`, f, `fact`] as [string, string, string]),
      ...(withConfig ? [[null, 'Config', 'config'] as [null, string, string]] : []),
      ['duration', 'Took', 'duration'],
      ['age', 'Updated', 'age']
    ];
    for (const [by, label, col] of columns) {
      const th = el('th');
      th.dataset.col = col;
      th.title =
        col === 'fact'
          ? `${label}: last / best (sort by ${label}.last; ${label}.best and the others in the sort menu)`
          : col === 'sorted'
            ? `${label}: the column the runs are sorted by`
            : label;
      if (by) {
        const b = el('button', 'smz-sort', label);
        b.dataset.sort = by;
        b.addEventListener('click', () =>
          this.sortBy(by, this.sort.column === by ? !this.sort.descending : false)
        );
        th.appendChild(b);
        const on = sorted && this.sort.column === by && (col !== 'fact' || !extra);
        th.setAttribute('aria-sort', on ? (this.sort.descending ? 'descending' : 'ascending') : 'none');
      } else {
        th.textContent = label;
      }
      head.appendChild(th);
    }
    const thead = el('thead');
    thead.appendChild(head);
    table.appendChild(thead);
    const tbody = el('tbody');
    for (const row of rows) {
      tbody.appendChild(this.row(store, row, facts, withConfig, now, extra));
    }
    table.appendChild(tbody);
    wrap.appendChild(table);
    return wrap;
  }

  private row(
    store: IStore,
    row: IRun,
    facts: string[],
    withConfig: boolean,
    now: number,
    extra: string | null
  ): HTMLTableRowElement {
    const k = key(store, row.run);
    const tr = el('tr', `smz-row smz-${row.state}`);
    tr.dataset.key = k;
    tr.dataset.run = row.run;
    tr.dataset.state = row.state;
    tr.tabIndex = 0;
    const selected = this.selected.has(k);
    tr.setAttribute('aria-selected', String(selected));
    const box = el('input');
    box.type = 'checkbox';
    box.checked = selected;
    box.tabIndex = -1;
    box.setAttribute('aria-label', `Select run ${row.run}`);
    box.addEventListener('click', e => {
      e.stopPropagation();
      this.toggle(k);
    });
    const cell = (col: string, text: string, title?: string) => {
      const td = el('td', undefined, text);
      td.dataset.col = col;
      td.title = title ?? text;
      tr.appendChild(td);
      return td;
    };
    const first = el('td');
    first.dataset.col = 'select';
    first.appendChild(box);
    tr.appendChild(first);
    // the state is a sign of its own shape and colour before the name, and
    // its word for screen readers and the tooltip (the sidebar is narrow);
    // under it, the details line the narrow layout shows for its hidden columns
    const folded = details(row, facts, now);
    const name = cell(
      'run',
      '',
      row.state === 'damaged'
        ? [`${row.run}: damaged`, row.problem, ...(row.check ?? [])].join('\n')
        : [`${row.run}: ${row.state}`, ...folded].join('\n')
    );
    const sign = el('span', 'smz-state', STATE_SIGN[row.state] ?? '?');
    sign.setAttribute('aria-hidden', 'true');
    const line = el('div', 'smz-name-line');
    line.append(sign, el('span', 'smz-run-name', row.run), el('span', 'smz-sr', ` (${row.state})`));
    // the narrow layout's findings: a count after the name (its column folds
    // away so that the name keeps the width), when there are some; with its
    // words for a screen reader, as the folded cell is read by none
    const warn = !!row.findings;
    if (warn || row.findings_problem) {
      const pill = el('span', `smz-found${warn ? ' smz-warn' : ''}`, warn ? findingsText(row) : '?');
      pill.title = findingsTitle(row);
      pill.setAttribute('aria-hidden', 'true');
      line.append(pill, el('span', 'smz-sr smz-found-sr', ` (${findingsTitle(row)})`));
    }
    const more = el('div', 'smz-details', folded.join(' · '));
    more.setAttribute('aria-hidden', 'true'); // the same words are in the row's other cells
    name.append(line, more);
    cell('steps', row.steps === undefined ? '–' : String(row.steps));
    if (extra) {
      const v = columnValue(row, extra);
      const sortedCell = cell('sorted', columnText(row, extra, now), `${extra}: ${columnText(row, extra, now)}`);
      sortedCell.classList.toggle('smz-number', typeof v === 'number');
    }
    const found = cell('findings', findingsText(row), findingsTitle(row));
    found.dataset.count = row.findings === null || row.findings === undefined ? '' : String(row.findings);
    if (warn) {
      found.classList.add('smz-warn');
    }
    for (const f of facts) {
      const stat = row.summarising?.[f];
      const text = stat ? `${number(stat.last, 3)} / ${number(best(stat), 3)}` : '–';
      cell('fact', text).dataset.fact = f;
    }
    if (withConfig) {
      cell('config', configText(row.config));
    }
    cell('duration', duration(row.duration));
    cell('age', age(row.updated, now), row.updated ? new Date(row.updated * 1000).toLocaleString() : '');
    tr.addEventListener('click', e => {
      if (e.ctrlKey || e.metaKey || e.shiftKey) {
        this.toggle(k);
      } else {
        this.selected = new Set([k]);
        this.render();
      }
      (this.body.querySelector(`tr[data-key="${CSS.escape(k)}"]`) as HTMLElement | null)?.focus();
    });
    tr.addEventListener('dblclick', () => this.actions.open(this.chosen()));
    tr.addEventListener('keydown', e => this.key(e, tr, k));
    return tr;
  }

  private toggle(k: string): void {
    if (this.selected.has(k)) {
      this.selected.delete(k);
    } else {
      this.selected.add(k);
    }
    this.render();
  }

  private key(e: KeyboardEvent, tr: HTMLTableRowElement, k: string): void {
    const rows = [...this.body.querySelectorAll<HTMLElement>('tr.smz-row')];
    const at = rows.indexOf(tr);
    switch (e.key) {
      case 'ArrowDown':
        rows[Math.min(rows.length - 1, at + 1)]?.focus();
        break;
      case 'ArrowUp':
        rows[Math.max(0, at - 1)]?.focus();
        break;
      case 'Home':
        rows[0]?.focus();
        break;
      case 'End':
        rows[rows.length - 1]?.focus();
        break;
      case ' ':
        this.toggle(k);
        break;
      case 'Enter':
        if (!this.selected.has(k)) {
          this.selected.add(k);
          this.render();
        }
        this.actions.open(this.chosen());
        break;
      case 'Delete':
        if (!this.selected.has(k)) {
          this.selected.add(k);
          this.render();
        }
        void this.remove();
        break;
      default:
        return;
    }
    e.preventDefault();
  }

  private filter: HTMLInputElement;
  private message: HTMLElement;
  private body: HTMLElement;
  private openButton: HTMLButtonElement;
  private insertButton: HTMLButtonElement;
  private deleteButton: HTMLButtonElement;
  private exploreButton: HTMLButtonElement;
  private sortMenu: HTMLSelectElement;
  private sortDir: HTMLButtonElement;
  private sort: ISort = { column: 'run', descending: false };
  private unsorted = new Map<string, string>(); // store id -> why it is listed by name, not in the order asked
  private reading = 0; // the reads begun: only the last one's answer is shown
  private stores: IStore[] = [];
  private rows = new Map<string, IRun[]>();
  private selected = new Set<string>();
  private problem = '';
  private timer = 0;
  private typing = 0;
  private asked = ''; // the query the rows shown answer ('' for none)
  private resizer: ResizeObserver;
}
