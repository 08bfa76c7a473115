// The polyglot workflow's last step, in JavaScript: joins the per-sensor statistics
// the Rust `stats` branches computed into one text table, sorted by sensor.
import { log, step, text } from "../../../sdk/js/faas.js";

export const handler = step((ctx, inputs) => {
  const rows = inputs.map((input) => input.json()).sort((a, b) => a.sensor.localeCompare(b.sensor));
  log(`formatting ${rows.length} sensors for run ${ctx.runId}`);
  const lines = rows.map(
    (row) => `${row.sensor.padEnd(8)} n=${row.count} mean=${row.mean.toFixed(2)} min=${row.min} max=${row.max}`,
  );
  return text(lines.join("\n") + "\n");
});
