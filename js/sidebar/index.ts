/**
 * The somatize run browser: one plugin (`somatize:sidebar`) that adds the
 * sidebar of stores and runs to JupyterLab's left area and opens chosen runs
 * in a main-area panel. Its server half is the jupyter_server extension
 * `somatize._server`; when that is missing the sidebar says which command
 * turns it on.
 */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { Dialog, MainAreaWidget, showDialog, showErrorMessage } from '@jupyterlab/apputils';
import { PathExt } from '@jupyterlab/coreutils';
import { INotebookTracker, NotebookActions, NotebookPanel } from '@jupyterlab/notebook';
import { LabIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import { IChosen, codeFor, explorerCode, storeIn } from './model';
import { RunsPanel } from './panel';
import { deleteAPI } from './request';
import { IListed, RunBrowser } from './sidebar';

// Three curves over a baseline: runs, overlaid.
const ICON_SVG = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
<g class="jp-icon3" fill="none" stroke="#616161" stroke-width="2" stroke-linecap="round" stroke-linejoin="round">
<path d="M3 20h18"/><path d="M4 16c3-9 5-10 8-7s5 3 8-5"/><path d="M4 17c4-4 7-3 9-1s4 1 7-3" opacity="0.6"/>
</g></svg>`;

export const runsIcon = new LabIcon({ name: 'somatize:runs', svgstr: ICON_SVG });

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'somatize:sidebar',
  description: 'A sidebar of the somatize stores and runs under the server root.',
  autoStart: true,
  optional: [INotebookTracker],
  activate: (app: JupyterFrontEnd, notebooks: INotebookTracker | null) => {
    const open = (chosen: IChosen[]) => {
      const readable = chosen.filter(c => c.row.state !== 'damaged');
      if (!readable.length) {
        return;
      }
      const content = new RunsPanel(readable);
      const widget = new MainAreaWidget({ content });
      widget.id = `somatize-runs-${Date.now()}`;
      widget.title.label = content.title.label;
      widget.title.caption = content.title.caption;
      widget.title.icon = runsIcon;
      widget.title.closable = true;
      app.shell.add(widget, 'main');
      app.shell.activateById(widget.id);
    };

    /**
     * Put cells below the active cell of the notebook last used (a new
     * notebook when none is open), each made for that notebook's folder:
     * a store's path as its code sees it, relative to the notebook.
     */
    const intoNotebook = async (cells: (here: string) => string[]) => {
      let panel = notebooks?.currentWidget ?? null;
      if (!panel) {
        if (!notebooks || !app.commands.hasCommand('notebook:create-new')) {
          void showErrorMessage('No notebook open', 'Open a notebook first: the code goes below its active cell.');
          return;
        }
        panel = (await app.commands.execute('notebook:create-new', { cwd: '' })) as NotebookPanel;
        await panel.context.ready;
      }
      const here = PathExt.dirname(panel.context.path);
      for (const code of cells(here)) {
        NotebookActions.insertBelow(panel.content);
        panel.content.activeCell?.model.sharedModel.setSource(code);
      }
      app.shell.activateById(panel.id);
    };

    const insert = (chosen: IChosen[]) =>
      void intoNotebook(here => {
        const byStore = new Map<string, string[]>();
        for (const c of chosen.filter(c => c.row.state !== 'damaged')) {
          const rel = storeIn(here, c.store);
          byStore.set(rel, [...(byStore.get(rel) ?? []), c.row.run]);
        }
        return [...byStore].map(([store, runs]) => codeFor(store, runs));
      });

    // the explorer for the runs listed, one cell a store: compare(store, where=..., metric=...)
    const explore = (listed: IListed[]) =>
      void intoNotebook(here => listed.map(l => explorerCode(storeIn(here, l.store), l.filter, l.rows, l.sort)));

    const remove = async (chosen: IChosen[]): Promise<boolean> => {
      const kept = chosen.filter(c => c.store.readonly);
      if (kept.length) {
        // the server refuses it too (405): a bucket store is read, never changed, from here
        await showErrorMessage(
          'Runs in a bucket store are read-only here',
          `${kept[0].store.path} is a store in a bucket, which the run browser only reads. ` +
            'Delete its runs in the bucket itself. Nothing was deleted.'
        );
        return false;
      }
      const body = document.createElement('div');
      const what = document.createElement('p');
      what.textContent =
        chosen.length === 1
          ? `Delete run “${chosen[0].row.run}” of ${chosen[0].store.path}? Its record is removed from disk.`
          : `Delete these ${chosen.length} runs? Their records are removed from disk.`;
      body.appendChild(what);
      const list = document.createElement('ul');
      for (const c of chosen.slice(0, 10)) {
        const li = document.createElement('li');
        li.textContent = `${c.store.path}: ${c.row.run}`;
        list.appendChild(li);
      }
      body.appendChild(list);
      const result = await showDialog({
        title: 'Delete runs',
        body: new WidgetOf(body),
        buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Delete' })]
      });
      if (!result.button.accept) {
        return false;
      }
      for (const c of chosen) {
        try {
          await deleteAPI(`stores/${c.store.id}/runs/${c.row.run}`);
        } catch (error) {
          await showErrorMessage(`Could not delete ${c.row.run}`, (error as Error).message);
        }
      }
      return true;
    };

    const sidebar = new RunBrowser({ open, insert, explore, remove });
    sidebar.title.icon = runsIcon;
    app.shell.add(sidebar, 'left', { rank: 650 });
    void sidebar.refresh();
  }
};

/** A dialog body made of a node built with textContent (never markup). */
class WidgetOf extends Widget {
  constructor(node: HTMLElement) {
    super({ node });
  }
}

export default plugin;
