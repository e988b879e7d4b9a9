/**
 * What the server answers (somatize/_server/_browse.py), and the few pure
 * helpers the table and the panel share: formatting, a fact's best value.
 */
import { PathExt } from '@jupyterlab/coreutils';

import type { Chart } from '../widgets/chart.js';
import { pyString } from './pystring';

export interface IStore {
  id: string;
  /** A store under the server's root: its folder below the root. A bucket store: its URL. */
  path: string;
  runs: number;
  /** A bucket store (the server's c.SomatizeApp.stores): its URL, never a credential. */
  url?: string;
  /** The browser only reads this store (a bucket's): its runs cannot be deleted here. */
  readonly?: boolean;
  /** Why the store cannot be read now (a bucket that does not answer): the URL and the cause. */
  error?: string;
}

/** A summarised value as the server sends it: NaN and the infinities as words, since JSON has none; null: none yet. */
export type StatValue = number | 'NaN' | 'Infinity' | '-Infinity' | null;

export interface IStat {
  count: number;
  first: StatValue;
  last: StatValue;
  min: StatValue;
  max: StatValue;
  best: StatValue; // the server's rule (record/_columns.best): max for a score, min for the rest
}

export interface IRun {
  run: string;
  state: 'running' | 'finished' | 'interrupted' | 'damaged';
  problem?: string;
  check?: string[];
  forwards?: number;
  steps?: number;
  facts?: number;
  started?: number;
  updated?: number;
  duration?: number | null;
  summarising?: Record<string, IStat>;
  curves?: string[];
  config?: Record<string, unknown> | null;
  findings?: number | null; // how many somatize.diagnose returns; null until counted
  counting?: boolean; // the count is being made (again) for the run's newest summary
  findings_problem?: string;
}

export interface IFinding {
  kind: string;
  node: string | null;
  first: number;
  last: number;
  text: string;
}

export interface IRunPage {
  runs: IRun[];
  total: number;
  offset: number;
  next: number | null;
  /** A listing of several pages: the token its later pages are asked with, so they are cut from the first's order. */
  listing: string | null;
}

/**
 * What the server's chart route answers: somatize's one chart (_pictures/_chart.py),
 * drawn by the notebook panels' one renderer (js/widgets/chart.js), and what
 * each run gave it.
 */
export interface IChart extends Chart {
  runs: {
    store: string;
    run: string;
    points?: number;
    not_finite?: number;
    min?: number | null;
    max?: number | null;
    missing?: string;
  }[];
}

export interface INode {
  node: string;
  calls: number;
  total_us: number;
  mean_us: number | null;
  share: number;
}

/** A run chosen in the sidebar: which store it is in, and its row. */
export interface IChosen {
  store: IStore;
  row: IRun;
}

const NOT_FINITE: Record<string, number> = { NaN: NaN, Infinity: Infinity, '-Infinity': -Infinity };

/** A value the server sent as a number, or as the word JSON has instead of NaN or an infinity. */
export function numeric(v: unknown): unknown {
  return typeof v === 'string' && v in NOT_FINITE ? NOT_FINITE[v] : v;
}

/** A summarised fact's best value, as the server says it (one rule, in record/_columns.py). */
export function best(stat: IStat): number | null {
  return (numeric(stat.best) as number | null) ?? null;
}

/** A number as the table shows it: NaN and the infinities as Python writes them (nan, inf, -inf); '–' for none. */
export function number(v: number | string | null | undefined, digits = 4): string {
  v = numeric(v) as number | string | null | undefined;
  if (typeof v !== 'number') {
    return '–';
  }
  if (!Number.isFinite(v)) {
    return Number.isNaN(v) ? 'nan' : v > 0 ? 'inf' : '-inf';
  }
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e5)) {
    return v.toExponential(digits - 2);
  }
  return Number.isInteger(v) ? String(v) : String(Number(v.toPrecision(digits)));
}

export function duration(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) {
    return '–';
  }
  if (seconds < 1) {
    return `${Math.round(seconds * 1000)} ms`;
  }
  if (seconds < 60) {
    return `${seconds.toFixed(1)} s`;
  }
  if (seconds < 3600) {
    return `${Math.floor(seconds / 60)} min ${Math.round(seconds % 60)} s`;
  }
  return `${Math.floor(seconds / 3600)} h ${Math.round((seconds % 3600) / 60)} min`;
}

export function age(when: number | null | undefined, now: number): string {
  if (!when) {
    return '–';
  }
  const s = Math.max(0, now - when);
  if (s < 60) {
    return `${Math.round(s)} s ago`;
  }
  if (s < 3600) {
    return `${Math.round(s / 60)} min ago`;
  }
  if (s < 86400) {
    return `${Math.round(s / 3600)} h ago`;
  }
  return `${Math.round(s / 86400)} d ago`;
}

/**
 * Whether the filter box holds a query for the server (record/_where.py:
 * `config.lr < 1e-2 and loss.best < 0.1`) rather than a part of a run's
 * name: a run's name has no operator, quote or bracket, nor spaces.
 */
export function isQuery(text: string): boolean {
  return /[=<>!"'`[\]()]/.test(text) || /\s(and|or|in|not)\s/i.test(` ${text} `);
}

/** Whether a run was recorded with a config (an empty one says nothing). */
export function hasConfig(config: Record<string, unknown> | null | undefined): boolean {
  return !!config && typeof config === 'object' && Object.keys(config).length > 0;
}

/** One of a config's values as text (objects as JSON). */
export function configValue(v: unknown): string {
  return v === undefined ? '–' : typeof v === 'object' ? JSON.stringify(v) : String(v);
}

export function configText(config: Record<string, unknown> | null | undefined): string {
  if (!config || typeof config !== 'object') {
    return '';
  }
  return Object.entries(config)
    .map(([k, v]) => `${k}=${configValue(v)}`)
    .join(' ');
}

export { pyString };

/** An order of the listing, answered by the server (somatize/_server/_sort.py). */
export interface ISort {
  column: string; // as runs() names it: run, steps, config.lr, loss.best, …
  descending: boolean;
}

/** The columns every store may be sorted by (the server's _sort.NAMES), with their words here. */
export const FIXED_SORTS: [string, string][] = [
  ['run', 'name'],
  ['state', 'state'],
  ['steps', 'steps'],
  ['findings', 'findings'],
  ['duration', 'time taken'],
  ['age', 'age (newest first)'],
  ['started', 'started'],
  ['forwards', 'forwards'],
  ['facts', 'facts']
];
export const FIXED_COLUMNS = new Set(FIXED_SORTS.map(([c]) => c).concat(['updated', 'host', 'pid', 'cause', 'problem']));

/** The statistics of a summarised fact a column may name (record/_columns.QUERY_STATS). */
export const STATS = ['last', 'best', 'min', 'max', 'first', 'count'];
/** The ones offered in the sort menu, as runs() shows them (record/_columns.STATS). */
export const SHOWN_STATS = ['last', 'best', 'min', 'max'];

/**
 * A run's value in a column named as runs() names it (record/_columns):
 * undefined when the run has no such column, null when it is recorded null.
 */
export function columnValue(row: IRun, column: string): unknown {
  if (column.startsWith('config.')) {
    const config = row.config;
    if (!config || typeof config !== 'object') {
      return undefined;
    }
    const key = column.slice(7);
    return Object.prototype.hasOwnProperty.call(config, key) ? config[key] : undefined;
  }
  const dot = column.lastIndexOf('.');
  if (dot > 0 && STATS.includes(column.slice(dot + 1))) {
    const stat = row.summarising?.[column.slice(0, dot)];
    return stat ? (numeric(stat[column.slice(dot + 1) as keyof IStat]) ?? null) : undefined;
  }
  if (column === 'age') {
    return row.updated;
  }
  return (row as unknown as Record<string, unknown>)[column];
}

/** A run's value in a column, as the table shows it. */
export function columnText(row: IRun, column: string, now: number): string {
  const v = columnValue(row, column);
  if (column === 'age' || column === 'started' || column === 'updated') {
    return age(v as number | undefined, now);
  }
  if (column === 'duration') {
    return duration(v as number | null | undefined);
  }
  if (typeof v === 'number') {
    return number(v, 4);
  }
  return v === null || v === undefined ? '–' : configValue(v);
}

/** The sort menu's columns for these runs: the fixed ones, then each summarised fact's, then each config key. */
export function sortColumns(rows: IRun[]): { facts: string[]; config: string[] } {
  const facts = [...new Set(rows.flatMap(r => Object.keys(r.summarising ?? {})))].sort();
  const config = [
    ...new Set(rows.flatMap(r => (hasConfig(r.config) ? Object.keys(r.config!).map(k => `config.${k}`) : [])))
  ].sort();
  return { facts: facts.flatMap(f => SHOWN_STATS.map(s => `${f}.${s}`)), config };
}

/** Whether a column is a summarised fact's (`loss.best`): what the explorer takes as its metric. */
export function isSummaryColumn(column: string): boolean {
  const dot = column.lastIndexOf('.');
  return !column.startsWith('config.') && dot > 0 && STATS.includes(column.slice(dot + 1));
}

/** A store's folder as a notebook in folder `here` sees it: relative to it ('.' for the same). */
export function storeFrom(here: string, storePath: string): string {
  return PathExt.relative(here, storePath === '.' ? '' : storePath) || '.';
}

/** What a notebook in folder `here` names a store by: a bucket store's URL, else its folder from there. */
export function storeIn(here: string, store: IStore): string {
  return store.url ?? storeFrom(here, store.path);
}

const MAX_WHERE = 4000; // characters of a query (record/_where.MAX_LENGTH)

/** A string in the query grammar (record/_where: its escapes are \\ \" \' \n \t). */
function queryString(text: string): string {
  return `"${text.replace(/[\\"]/g, c => `\\${c}`).replace(/\n/g, '\\n').replace(/\t/g, '\\t')}"`;
}

/**
 * The explorer's code for the runs the sidebar lists in one store:
 * `compare(store, where=..., metric=...)`. `where` is the filter's query as
 * it was answered, or, for a part of a name, the runs listed by name (when
 * that fits a query); `metric` the sort's column when it is a summarised
 * fact's, else `loss.best` where the runs summarise a loss, else the first
 * fact's best.
 */
export function explorerCode(
  storePath: string,
  filter: { query: string; name: string },
  listed: IRun[],
  sort: ISort
): string {
  const lines = ['from somatize.record import compare', '', `store = ${pyString(storePath)}`];
  let where = filter.query;
  if (!where && filter.name) {
    const byName = `run in [${listed.map(r => queryString(r.run)).join(', ')}]`;
    if (listed.length && listed.length <= 1000 && byName.length <= MAX_WHERE) {
      where = byName;
    } else {
      lines.push(`# the sidebar listed the ${listed.length} runs whose names hold ${pyString(filter.name)}: too many to name`);
    }
  }
  const facts = [...new Set(listed.flatMap(r => Object.keys(r.summarising ?? {})))].sort();
  const metric = isSummaryColumn(sort.column)
    ? sort.column
    : facts.includes('loss') || !facts.length
      ? 'loss.best'
      : `${facts[0]}.best`;
  const args = [where ? `where=${pyString(where)}` : '', `metric=${pyString(metric)}`].filter(a => a);
  lines.push(`compare(store, ${args.join(', ')})`);
  return lines.join('\n');
}

/** The code "Insert code" puts in a notebook for these runs. */
export function codeFor(storePath: string, runs: string[]): string {
  const run = runs.length === 1 ? pyString(runs[0]) : `[${runs.map(pyString).join(', ')}]`;
  const lines = [
    'from IPython.display import display',
    'from somatize.record import progress, spent',
    '',
    `store = ${pyString(storePath)}`,
    `display(progress(store, run=${run}))`
  ];
  for (const r of runs) {
    lines.push(`display(spent(store, run=${pyString(r)}))`);
  }
  return lines.join('\n');
}
