/**
 * The one way the sidebar talks to its server extension: GET with a
 * remembered ETag (a poll of an unchanged listing costs a 304 and no body),
 * DELETE through ServerConnection (which sends the XSRF token).
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

/** The command that turns the server half on, named wherever it is missing. */
export const ENABLE_COMMAND = 'jupyter server extension enable somatize._server';

export class MissingServerExtension extends Error {
  constructor() {
    super(
      'The somatize server extension is not enabled in this Jupyter server. ' +
        `Run \`${ENABLE_COMMAND}\` (or \`pip install somatize\` again) and restart JupyterLab.`
    );
  }
}

export class RequestError extends Error {
  constructor(
    message: string,
    readonly status: number
  ) {
    super(message);
  }
}

const cache = new Map<string, { etag: string; data: unknown }>();

/**
 * Query arguments left out of the cache's key: a listing's token changes
 * whenever its order does, so keyed by it every poll of a moving listing
 * would add a page to the cache for good. One entry per page instead; the
 * server's ETag holds the token, so an entry of another token gets the
 * page again (200), never a 304.
 */
const UNKEYED = new Set(['listing']);

/** A query string's arguments; a list is the argument given once per item. */
export type IQuery = Record<string, string | number | (string | number)[]>;

function url(path: string, query: IQuery = {}): string {
  const settings = ServerConnection.makeSettings();
  const parts = path.split('/').map(encodeURIComponent);
  const q = Object.entries(query)
    .flatMap(([k, v]) => (Array.isArray(v) ? v : [v]).map(one => `${encodeURIComponent(k)}=${encodeURIComponent(String(one))}`))
    .join('&');
  return URLExt.join(settings.baseUrl, 'somatize', ...parts) + (q ? `?${q}` : '');
}

async function send(path: string, init: RequestInit, query?: IQuery): Promise<Response> {
  const settings = ServerConnection.makeSettings();
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url(path, query), init, settings);
  } catch (error) {
    throw new ServerConnection.NetworkError(error as TypeError);
  }
  return response;
}

async function failure(response: Response): Promise<Error> {
  if (response.status === 404) {
    const text = await response.text();
    let message = '';
    try {
      message = JSON.parse(text).message ?? '';
    } catch {
      // tornado's own 404 page: no route of ours answered
    }
    if (!message || message === 'Not Found') {
      return new MissingServerExtension();
    }
    return new RequestError(message, 404);
  }
  let message = response.statusText;
  try {
    message = (await response.json()).message ?? message;
  } catch {
    // not JSON: keep the status text
  }
  return new RequestError(message, response.status);
}

/** GET a route's JSON, answered from memory when the server says 304. */
export async function requestAPI<T>(path: string, query?: IQuery): Promise<T> {
  const key = url(path, query && Object.fromEntries(Object.entries(query).filter(([k]) => !UNKEYED.has(k))));
  const known = cache.get(key);
  const headers: Record<string, string> = {};
  if (known) {
    headers['If-None-Match'] = known.etag;
  }
  const response = await send(path, { method: 'GET', headers, cache: 'no-store' }, query);
  if (response.status === 304 && known) {
    return known.data as T;
  }
  if (!response.ok) {
    throw await failure(response);
  }
  const data = (await response.json()) as T;
  const etag = response.headers.get('Etag');
  if (etag) {
    cache.set(key, { etag, data });
  }
  return data;
}

export async function deleteAPI(path: string): Promise<void> {
  const response = await send(path, { method: 'DELETE' });
  if (!response.ok) {
    throw await failure(response);
  }
}
