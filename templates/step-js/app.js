// A workflow step: counts the words of its text input, and how often it ran, and
// returns them as JSON.
import { config, json, kv, log, step } from "./faas.js";

export const handler = step((ctx, inputs) => {
  const text = inputs.length ? inputs[0].text() : "";
  const runs = kv.increment("runs");
  log(`run ${ctx.runId} of step ${ctx.step}`);
  const words = text.split(/\s+/).filter(Boolean).length;
  return json({ words, runs: Number(runs), label: config("label") ?? "" });
});
