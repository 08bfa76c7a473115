// Types for faas.js, for functions written in TypeScript (`faas new http-ts` or
// `step-ts`): tsc checks app.ts against these, then componentize-js builds app.js.

/** A log line's level. */
export type Level = "trace" | "debug" | "info" | "warn" | "error";

/** Writes one log line (`faas logs` shows it with the run and step). */
export function log(message: unknown, level?: Level): void;

/** The value of `key` in the function's `config` table in workflow.toml, or undefined. */
export function config(key: string): string | undefined;

/** The tenant's key-value store (shared by its functions, and only by them). */
export const kv: {
  get(key: string): Uint8Array | undefined;
  getText(key: string): string | undefined;
  set(key: string, value: Uint8Array | string): void;
  delete(key: string): void;
  /** Adds `delta` (default 1) and returns the new value. */
  increment(key: string, delta?: bigint | number): bigint;
};

/** Publishes `payload` on the tenant's pub/sub `channel`. */
export function publish(channel: string, payload: Uint8Array | string): void;

/** Appends `payload` to the tenant's `stream`; returns the entry id. */
export function append(stream: string, payload: Uint8Array | string): string;

/** The event's W3C trace id, or undefined when the platform exports no traces. */
export function traceId(): string | undefined;

/** Where a run's triggering message came from (runs started by a Redis trigger). */
export interface MessageInfo {
  source: string;
  /** The stream entry id (stable across redeliveries); empty for pub/sub. */
  id: string;
  deliveryCount: number;
}

/** Facts about the run a step invocation is part of. */
export interface Context {
  tenant: string;
  workflow: string;
  runId: string;
  step: string;
  /** 1 for the first try, 2 for the first retry, ... */
  attempt: number;
  /** Which branch of a fan-out this invocation is, from 0. */
  branch: number;
  /** How many branches the fan-out has; 1 outside fan-outs. */
  branches: number;
  message?: MessageInfo;
}

/** One input region of a step, read as bytes, text or JSON. */
export class Input {
  readonly schemaType: string;
  bytes(): Uint8Array;
  text(): string;
  json(): unknown;
}

/** An output region: `schemaType` says what its bytes are (bytes, text, json or a Karmem type). */
export class Output {
  constructor(schemaType: string, data: Uint8Array | string);
  readonly schemaType: string;
  readonly data: Uint8Array;
}

/** A `text` output region. */
export function text(value: unknown): Output;
/** A `json` output region. */
export function json(value: unknown): Output;
/** An output region of `bytes` as they are. */
export function raw(bytes: Uint8Array, schemaType?: string): Output;

/** What a step returns: one output region, several, or none. */
export type StepResult = Output | string | Uint8Array | Output[] | undefined | null;

/** The step export for `fn(ctx, inputs)`: export it as `handler`. */
export function step(fn: (ctx: Context, inputs: Input[]) => StepResult): unknown;
