"""The Python hello of bench/sizes.sh: a plain wasi:http component (no platform
imports, so `wasmtime serve` runs it too) answering `Hello from Python!`."""

from componentize_py_types import Ok
from wit_world import exports
from wit_world.imports.types import Fields, OutgoingBody, OutgoingResponse, ResponseOutparam


class IncomingHandler(exports.IncomingHandler):
    def handle(self, request, response_out):
        response = OutgoingResponse(Fields.from_list([("content-type", b"text/plain")]))
        response.set_status_code(200)
        body = response.body()
        ResponseOutparam.set(response_out, Ok(response))
        with body.write() as stream:
            stream.blocking_write_and_flush(b"Hello from Python!\n")
        OutgoingBody.finish(body, None)
