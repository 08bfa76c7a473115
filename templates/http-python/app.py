"""An HTTP function: `GET /{{name}}?name=you` answers `Hello, you!`."""

import faas
from faas import IncomingHandler  # noqa: F401 (the export componentize-py looks for)


@faas.http
def handle(request):
    greeting = faas.config("greeting") or "Hello"
    name = request.query.get("name", "world")
    return faas.Response(200, f"{greeting}, {name}!\n")
