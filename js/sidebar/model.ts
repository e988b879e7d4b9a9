/**
 * What the server answers (somatize/_server/_browse.py), and the few pure
 * helpers the table and the panel share: formatting, a fact's best value.
 */
import type { Chart } from '../widgets/chart.js';

export interface IStore {
  id: string;
  path: string;
  runs: number;
}

export interface IStat {
  count: number;
  first: number | null;
  last: number | null;
  min: number | null;
  max: number | null;
  best: number | null; // the server's rule (record/_columns.best): max for a score, min for the rest
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
}

/**
 * What the server's chart route answers: somatize's one chart (record/_chart.py),
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

/** A summarised fact's best value, as the server says it (one rule, in record/_columns.py). */
export function best(stat: IStat): number | null {
  return stat.best ?? null;
}

export function number(v: number | null | undefined, digits = 4): string {
  if (v === null || v === undefined || !Number.isFinite(v)) {
    return '–';
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

/** A Python string literal for any text (JSON's escapes are Python's too). */
export function pyString(text: string): string {
  return JSON.stringify(text);
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
