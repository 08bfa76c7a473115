"""The polyglot workflow's first step, in Python: parses `sensor,value` lines (blank
lines and `#` comments skipped) and returns one JSON region per sensor, so that the
next step runs once per sensor, in parallel."""

import faas
from faas import Handler  # noqa: F401 (the export componentize-py looks for)


@faas.step
def handle(ctx, inputs):
    readings = {}
    for number, line in enumerate(inputs[0].text().splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        sensor, _, value = line.partition(",")
        try:
            readings.setdefault(sensor.strip(), []).append(float(value))
        except ValueError:
            raise ValueError(f"line {number}: `{value.strip()}` is not a number")
    faas.log(f"parsed {sum(map(len, readings.values()))} readings of {len(readings)} sensors")
    return [faas.json({"sensor": sensor, "values": values}) for sensor, values in sorted(readings.items())]
