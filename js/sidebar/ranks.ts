/**
 * A data-parallel run's time per rank, in the panel's time view: each rank's
 * own work a step side by side (before it waits for the others at the
 * update), the straggler's bar in the theme's warning colour and named in the
 * words `spent` uses. The numbers are `spent`'s (record/_ranks.py), sent by
 * the nodes route beside the nodes' time; a run of one process shows nothing
 * here.
 */
import { el } from './dom';

export interface IRank {
  rank: number;
  mean_us: number;
  steps: number;
}

export interface IStraggler {
  rank: number;
  mean_us: number;
  fastest: number;
  over_us: number;
  over: number; // a ratio - 1
}

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
  return (
    `rank ${s.rank} is the straggler: its steps take ${micros(s.mean_us)}, ` +
    `${micros(s.over_us)} (${Math.round(100 * s.over)}%) more than rank ${s.fastest}'s; ` +
    'the others wait for it at every update'
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
  const title = "Each rank's own work a step, before it waits for the others";
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
    row.title = `rank ${r.rank}: ${micros(r.mean_us)} of its own work a step (${r.steps} steps measured)`;
    const track = el('span', 'smz-bar-track');
    const bar = el('span', 'smz-bar');
    bar.style.width = `${(100 * r.mean_us) / most}%`;
    track.appendChild(bar);
    const text = el('span', 'smz-bar-text', `${micros(r.mean_us)} a step`);
    row.append(el('span', 'smz-bar-name', `rank ${r.rank}`), track, text);
    out.push(row);
  }
  out.push(el('p', 'smz-straggler', time.straggler ? stragglerText(time.straggler) : 'One rank measured.'));
  return out;
}
