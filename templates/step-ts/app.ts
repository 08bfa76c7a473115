// A workflow step in TypeScript: counts the words of its text input, and how often it
// ran, and returns them as JSON.
import { type Context, type Input, config, json, kv, log, step } from "./faas.js";

interface Count {
  words: number;
  runs: number;
  label: string;
}

export const handler = step((ctx: Context, inputs: Input[]) => {
  const text = inputs.length ? inputs[0].text() : "";
  const runs = kv.increment("runs");
  log(`run ${ctx.runId} of step ${ctx.step}`);
  const count: Count = {
    words: text.split(/\s+/).filter(Boolean).length,
    runs: Number(runs),
    label: config("label") ?? "",
  };
  return json(count);
});
