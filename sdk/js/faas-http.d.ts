// Types for faas-http.js, for HTTP functions written in TypeScript.

/** The query of a request's URL (a URLSearchParams). */
export interface Query {
  get(name: string): string | null;
  getAll(name: string): string[];
  has(name: string): boolean;
}

/** An HTTP request: method, path, query, headers and the whole body. */
export class Request {
  readonly method: string;
  readonly path: string;
  readonly query: Query;
  readonly headers: Map<string, string>;
  readonly body: Uint8Array;
  text(): string;
  json(): unknown;
}

/** An HTTP response. A string body is sent as text/plain, an object as JSON. */
export class Response {
  constructor(status?: number, body?: string | Uint8Array | object, headers?: Record<string, string>);
  status: number;
  body: string | Uint8Array | object;
  headers: Record<string, string>;
}

/** The `wasi:http` export for `fn(request)`: export it as `incomingHandler`. */
export function http(fn: (request: Request) => Response | string | object): unknown;
