// HTTP functions in JavaScript: `http(fn)` is the `wasi:http` export for a function
// from a request to a response (only for the http-function world; steps use faas.js).
//
//   import { http, Response } from "./faas-http.js";
//
//   export const incomingHandler = http((request) =>
//     new Response(200, `Hello, ${request.query.get("name") ?? "world"}!\n`));
import {
  Fields,
  IncomingBody,
  OutgoingBody,
  OutgoingResponse,
  ResponseOutparam,
} from "wasi:http/types@0.2.12";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** An HTTP request: method, path, query (URLSearchParams), headers and the whole body. */
export class Request {
  constructor(method, url, headers, body) {
    this.method = method;
    this.path = url.pathname;
    this.query = url.searchParams;
    this.headers = headers;
    this.body = body;
  }
  text() {
    return decoder.decode(this.body);
  }
  json() {
    return JSON.parse(this.text());
  }
}

/** An HTTP response. A string body is sent as text/plain, an object as JSON. */
export class Response {
  constructor(status = 200, body = "", headers = {}) {
    this.status = status;
    this.body = body;
    this.headers = headers;
  }
}

function readBody(request) {
  const body = request.consume();
  const stream = body.stream();
  const chunks = [];
  let length = 0;
  for (;;) {
    let chunk;
    try {
      chunk = stream.blockingRead(65536n);
    } catch {
      break; // closed: the whole body was read
    }
    chunks.push(chunk);
    length += chunk.length;
  }
  stream[Symbol.dispose]();
  IncomingBody.finish(body);
  const all = new Uint8Array(length);
  let at = 0;
  for (const chunk of chunks) {
    all.set(chunk, at);
    at += chunk.length;
  }
  return all;
}

function methodOf(method) {
  return method.tag === "other" ? method.val : method.tag.toUpperCase();
}

/** The `wasi:http` export for `fn(request)`: export it as `incomingHandler`. */
export function http(fn) {
  return {
    handle(incoming, responseOut) {
      const url = new URL(incoming.pathWithQuery() ?? "/", "http://function");
      const headers = new Map(
        incoming.headers().entries().map(([name, value]) => [name, decoder.decode(value)]),
      );
      const request = new Request(methodOf(incoming.method()), url, headers, readBody(incoming));
      let response;
      try {
        response = fn(request);
      } catch (error) {
        response = new Response(500, `${error}\n`);
      }
      if (!(response instanceof Response)) response = new Response(200, response);
      let body = response.body;
      const headerList = Object.entries(response.headers);
      const has = (name) => headerList.some(([key]) => key.toLowerCase() === name);
      if (typeof body === "string") {
        if (!has("content-type")) headerList.push(["content-type", "text/plain; charset=utf-8"]);
        body = encoder.encode(body);
      } else if (!(body instanceof Uint8Array)) {
        if (!has("content-type")) headerList.push(["content-type", "application/json"]);
        body = encoder.encode(JSON.stringify(body));
      }
      const outgoing = new OutgoingResponse(
        Fields.fromList(headerList.map(([name, value]) => [name, encoder.encode(String(value))])),
      );
      outgoing.setStatusCode(response.status);
      const outgoingBody = outgoing.body();
      ResponseOutparam.set(responseOut, { tag: "ok", val: outgoing });
      const stream = outgoingBody.write();
      for (let at = 0; at < body.length; at += 4096) {
        stream.blockingWriteAndFlush(body.subarray(at, at + 4096));
      }
      stream[Symbol.dispose]();
      OutgoingBody.finish(outgoingBody, undefined);
    },
  };
}
