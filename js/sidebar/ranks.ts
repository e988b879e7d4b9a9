/**
 * A data-parallel run's time per rank, in the panel's time view: each rank's
 * time a step to reach the update side by side (the part before its step
 * began, loading its data, fainter), the straggler's bar in the theme's
 * warning colour and named in the words `spent` uses. The numbers are `spent`'s (record/_ranks.py), sent by
 * the nodes route beside the nodes' time; a run of one process shows nothing
 * here.
 */
import { el } from './dom';

export interface IRank {
  rank: number;
  mean_us: number; // its time a step to reach the update: before_us + work_us
  work_us?: number; // in its step
  before_us?: number; // before its step began (0 in a run that did not say it)
  wait_us?: number; // at the update, for the others
  steps: number;
}

export interface IStraggler {
  rank: number;
  mean_us: number;
  before_us?: number;
  fastest: number;
  over_us: number;
  over: number; // a ratio - 1
}

/** The heading of the ranks (_widgets/_spent.RANKS_TITLE). */
export const RANKS_TITLE = "Each rank's time a step to reach the update, where it waits for the others";

/** What the nodes route sends of a run's ranks (absent from an older server). */
export interface IRankTime {
  ranks?: IRank[];
  straggler?: IStraggler | null;
  ranks_problem?: string; // a rank series that is damaged: no ranks sent, the damage said
}

/** Microseconds as `spent` says them (_pictures/_svg.duration_us): µs, ms or s, three digits. */
export function micros(us: number): string {
  const [size, unit] = us >= 1e6 ? [1e6, 's'] : us >= 1e3 ? [1e3, 'ms'] : [1, 'µs'];
  return `${Number((us / size).toPrecision(3))} ${unit}`;
}

/** The sentence `spent` says (_widgets/_spent.straggler_text). */
export function stragglerText(s: IStraggler): string {
  const more =
    s.over < 1
      ? `${micros(s.over_us)} (${Math.round(100 * s.over)}%) more than rank ${s.fastest}'s`
      : `${Number((1 + s.over).toPrecision(3))} times rank ${s.fastest}'s`;
  const before = s.before_us
    ? `, ${micros(s.before_us)} of each before it began (loading its data, the loop between steps)`
    : '';
  return (
    `rank ${s.rank} is the straggler: its steps take ${micros(s.mean_us)}, ` +
    `${more}${before}; the others wait for it at every update`
  );
}

/**
 * The rows a run's box in the time view (a grid of name, track, text) gets
 * for its ranks: a heading, a bar a rank (grey, the straggler's in the
 * warning colour, its name in bold), and the straggler named. None for a run of one process;
 * for a run whose rank series is damaged, the heading and what is damaged.
 */
export function rankRows(time: IRankTime): HTMLElement[] {
  const ranks = time.ranks ?? [];
  const title = RANKS_TITLE;
  if (time.ranks_problem) {
    const said = `Not shown: ${time.ranks_problem}`;
    return [el('div', 'smz-ranks-title', title), el('p', 'smz-ranks-problem', said)];
  }
  if (!ranks.length) {
    return [];
  }
  const slow = time.straggler ? time.straggler.rank : null;
  const most = Math.max(1, ...ranks.map(r => r.mean_us));
  const out: HTMLElement[] = [el('div', 'smz-ranks-title', title)];
  for (const r of ranks) {
    const row = el('div', 'smz-bar-row smz-rank-row');
    row.dataset.rank = String(r.rank);
    row.dataset.straggler = String(r.rank === slow);
    const before = r.before_us ?? 0;
    row.title =
      `rank ${r.rank}: ${micros(r.mean_us)} a step to reach the update` +
      (r.work_us === undefined
        ? ''
        : ` (${micros(before)} before the step began, loading its data; ${micros(r.work_us)} in it)`) +
      (r.wait_us === undefined ? '' : `, then it waits ${micros(r.wait_us)} for the others`) +
      ` (${r.steps} steps measured)`;
    const track = el('span', 'smz-bar-track');
    const bar = el('span', 'smz-bar');
    bar.style.width = `${(100 * r.mean_us) / most}%`;
    if (before > 0) {
      // the part before its step began, over the bar's left: fainter
      const part = el('span', 'smz-bar-before');
      part.style.width = `${(100 * Math.min(before, r.mean_us)) / Math.max(1, r.mean_us)}%`;
      bar.appendChild(part);
    }
    track.appendChild(bar);
    const text = el('span', 'smz-bar-text', `${micros(r.mean_us)} a step`);
    row.append(el('span', 'smz-bar-name', `rank ${r.rank}`), track, text);
    out.push(row);
  }
  out.push(el('p', 'smz-straggler', time.straggler ? stragglerText(time.straggler) : 'One rank measured.'));
  return out;
}
