// The platform's JavaScript SDK, for steps and HTTP functions alike: a thin layer over
// the imports componentize-js generates from the platform's WIT (`faas new` puts this
// file and the WIT beside your code; `faas-http.js` adds HTTP functions).
//
//   import { json, step } from "./faas.js";
//
//   export const handler = step((ctx, inputs) => {
//     const words = inputs[0].text().split(/\s+/).filter(Boolean).length;
//     return json({ words });
//   });
import { get as configGet } from "faas:platform/config@0.1.0";
import * as keyValue from "faas:platform/key-value@0.1.0";
import { log as platformLog } from "faas:platform/log@0.1.0";
import * as messaging from "faas:platform/messaging@0.1.0";
import { Region } from "faas:platform/region@0.1.0";
import { traceId as platformTraceId } from "faas:platform/trace@0.1.0";

const encoder = new TextEncoder();
const decoder = new TextDecoder();
const asBytes = (value) => (typeof value === "string" ? encoder.encode(value) : value);

/** Writes one log line (`faas logs` shows it with the run and step). */
export function log(message, level = "info") {
  platformLog(level, String(message));
}

/** The value of `key` in the function's `config` table in workflow.toml, or undefined. */
export function config(key) {
  return configGet(key);
}

/** The tenant's key-value store (shared by its functions, and only by them). */
export const kv = {
  get: (key) => keyValue.get(key),
  getText: (key) => {
    const value = keyValue.get(key);
    return value === undefined ? undefined : decoder.decode(value);
  },
  set: (key, value) => keyValue.set(key, asBytes(value)),
  delete: (key) => keyValue.delete(key),
  /** Adds `delta` (default 1) and returns the new value (a BigInt). */
  increment: (key, delta = 1n) => keyValue.increment(key, BigInt(delta)),
};

/** Publishes `payload` on the tenant's pub/sub `channel`. */
export function publish(channel, payload) {
  messaging.publish(channel, asBytes(payload));
}

/**
 * Publishes every one of `payloads` on the tenant's pub/sub `channel`, in order, in one
 * round trip to the broker (at most 1,024 messages and 16 MiB per call).
 */
export function publishAll(channel, payloads) {
  messaging.publishAll(channel, payloads.map(asBytes));
}

/** Appends `payload` to the tenant's `stream`; returns the entry id. */
export function append(stream, payload) {
  return messaging.append(stream, asBytes(payload));
}

/** The event's W3C trace id, or undefined when the platform exports no traces. */
export function traceId() {
  return platformTraceId();
}

/** One input region of a step, read as bytes, text or JSON. */
export class Input {
  constructor(region) {
    this.region = region;
  }
  get schemaType() {
    return this.region.schemaType();
  }
  bytes() {
    return this.region.bytes();
  }
  text() {
    return decoder.decode(this.region.bytes());
  }
  json() {
    return JSON.parse(this.text());
  }
}

/** An output region: `schemaType` says what its bytes are (bytes, text, json or a Karmem type). */
export class Output {
  constructor(schemaType, data) {
    this.schemaType = schemaType;
    this.data = asBytes(data);
  }
}

/** A `text` output region. */
export const text = (value) => new Output("text", String(value));
/** A `json` output region. */
export const json = (value) => new Output("json", JSON.stringify(value));
/** An output region of `bytes` as they are. */
export const raw = (bytes, schemaType = "bytes") => new Output(schemaType, bytes);

function regionOf(value) {
  if (value instanceof Output) return Region.fromBytes(value.schemaType, value.data);
  if (typeof value === "string") return Region.fromBytes("text", encoder.encode(value));
  if (value instanceof Uint8Array) return Region.fromBytes("bytes", value);
  return Region.fromBytes("json", encoder.encode(JSON.stringify(value)));
}

/**
 * The step export for `fn(ctx, inputs)`: export it as `handler`. `fn` returns an
 * Output (or an array of them, one per outgoing region); a thrown error fails the
 * attempt with its message, and the workflow's retry policy applies.
 */
export function step(fn) {
  return {
    handle(ctx, regions) {
      let result;
      try {
        result = fn(ctx, regions.map((region) => new Input(region)));
      } catch (error) {
        throw error instanceof Error ? `${error.name}: ${error.message}` : String(error);
      }
      if (result === undefined || result === null) return [];
      return (Array.isArray(result) ? result : [result]).map(regionOf);
    },
  };
}
