"""A workflow step: counts the words of its text input, and how often it ran, and
returns them as JSON."""

import faas
from faas import Handler  # noqa: F401 (the export componentize-py looks for)


@faas.step
def handle(ctx, inputs):
    text = inputs[0].text() if inputs else ""
    runs = faas.kv.increment("runs")
    faas.log(f"run {ctx.run_id} of step {ctx.step}")
    return faas.json({"words": len(text.split()), "runs": runs, "label": faas.config("label") or ""})
