"""The platform's Python SDK: one decorator per kind of function over the bindings that
componentize-py generates from the platform's WIT (`faas new` puts this file and the
WIT beside your code).

A workflow step takes its input regions and returns its outputs:

    import faas
    from faas import Handler  # the export componentize-py looks for

    @faas.step
    def handle(ctx, inputs):
        words = inputs[0].text().split()
        return faas.json({"words": len(words)})

An HTTP function takes a request and returns a response:

    import faas
    from faas import IncomingHandler  # the export componentize-py looks for

    @faas.http
    def handle(request):
        return faas.Response(200, f"Hello, {request.query.get('name', 'world')}!\\n")

Both may use the platform: `faas.log`, `faas.config`, `faas.kv`, `faas.publish`,
`faas.publish_all`, `faas.append` and `faas.trace_id`.
"""

import json as _json
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Union
from urllib.parse import parse_qsl, urlsplit

from componentize_py_types import Err, Ok
from wit_world import exports as _exports
from wit_world.imports import config as _config
from wit_world.imports import key_value as _key_value
from wit_world.imports import log as _log
from wit_world.imports import messaging as _messaging
from wit_world.imports import region as _region
from wit_world.imports import trace as _trace


# --- The platform: logs, configuration, key-value, messaging, traces ---------------


def log(message: str, level: str = "info") -> None:
    """Writes one log line (`faas logs` shows it with the run and step)."""
    _log.log(_log.Level[level.upper()], message)


def config(key: str) -> Optional[str]:
    """The value of `key` in the function's `config` table in workflow.toml."""
    return _config.get(key)


class _KeyValue:
    """The tenant's key-value store (shared by its functions, and only by them)."""

    def get(self, key: str) -> Optional[bytes]:
        return _key_value.get(key)

    def set(self, key: str, value: Union[bytes, str]) -> None:
        _key_value.set(key, value.encode() if isinstance(value, str) else value)

    def delete(self, key: str) -> None:
        _key_value.delete(key)

    def increment(self, key: str, delta: int = 1) -> int:
        return _key_value.increment(key, delta)


kv = _KeyValue()


def publish(channel: str, payload: Union[bytes, str]) -> None:
    """Publishes `payload` on the tenant's pub/sub `channel`."""
    _messaging.publish(channel, payload.encode() if isinstance(payload, str) else payload)


def publish_all(channel: str, payloads: List[Union[bytes, str]]) -> None:
    """Publishes every one of `payloads` on the tenant's pub/sub `channel`, in order, in
    one round trip to the broker (at most 1,024 messages and 16 MiB per call)."""
    _messaging.publish_all(channel, [p.encode() if isinstance(p, str) else p for p in payloads])


def append(stream: str, payload: Union[bytes, str]) -> str:
    """Appends `payload` to the tenant's `stream`; returns the entry id."""
    return _messaging.append(stream, payload.encode() if isinstance(payload, str) else payload)


def trace_id() -> Optional[str]:
    """The event's W3C trace id, or None when the platform exports no traces."""
    return _trace.trace_id()


# --- Steps -----------------------------------------------------------------------------


class Input:
    """One input region of a step, read as bytes, text or JSON."""

    def __init__(self, region: "_region.Region"):
        self._region = region

    @property
    def schema_type(self) -> str:
        return self._region.schema_type()

    def bytes(self) -> bytes:
        return self._region.bytes()

    def text(self) -> str:
        return self.bytes().decode()

    def json(self):
        return _json.loads(self.bytes())


@dataclass
class Output:
    """One output region: `schema_type` says what its bytes are (`bytes`, `text`,
    `json` or a Karmem type)."""

    schema_type: str
    data: bytes


def text(value: str) -> Output:
    """A `text` output region."""
    return Output("text", value.encode())


def json(value) -> Output:
    """A `json` output region."""
    return Output("json", _json.dumps(value).encode())


def raw(value: bytes, schema_type: str = "bytes") -> Output:
    """An output region of `value` as it is."""
    return Output(schema_type, value)


_step: Optional[Callable] = None


def step(function: Callable) -> Callable:
    """Makes `function(ctx, inputs)` this component's step. It returns an `Output` (or
    a list of them, one per outgoing region); an exception fails the attempt with its
    text, and the workflow's retry policy applies."""
    global _step
    _step = function
    return function


def _region_of(value) -> "_region.Region":
    if isinstance(value, Output):
        return _region.Region.from_bytes(value.schema_type, value.data)
    if isinstance(value, str):
        return _region.Region.from_bytes("text", value.encode())
    if isinstance(value, (bytes, bytearray)):
        return _region.Region.from_bytes("bytes", bytes(value))
    return _region.Region.from_bytes("json", _json.dumps(value).encode())


if hasattr(_exports, "Handler"):

    class Handler(_exports.Handler):
        """The step export: calls the function given to `@faas.step`."""

        def handle(self, ctx, inputs):
            if _step is None:
                raise Err("no function is decorated with @faas.step")
            try:
                result = _step(ctx, [Input(region) for region in inputs])
            except Err:
                raise
            except Exception as error:  # the attempt fails with the error's text
                raise Err(f"{type(error).__name__}: {error}")
            if result is None:
                return []
            if isinstance(result, list):
                return [_region_of(value) for value in result]
            return [_region_of(result)]


# --- HTTP functions ----------------------------------------------------------------------


@dataclass
class Request:
    """An HTTP request: method, path, query parameters, headers (lower-case names) and
    the whole body."""

    method: str
    path: str
    query: Dict[str, str]
    headers: Dict[str, str]
    body: bytes

    def text(self) -> str:
        return self.body.decode()

    def json(self):
        return _json.loads(self.body)


@dataclass
class Response:
    """An HTTP response. A `str` body is sent as text/plain, a `dict` or `list` as JSON."""

    status: int = 200
    body: Union[bytes, str, dict, list] = b""
    headers: Dict[str, str] = field(default_factory=dict)


_http: Optional[Callable] = None


def http(function: Callable) -> Callable:
    """Makes `function(request)` this component's HTTP handler; it returns a `Response`
    (or a `str`, sent with status 200)."""
    global _http
    _http = function
    return function


if hasattr(_exports, "IncomingHandler"):
    from wit_world.imports import types as _types

    def _method(method) -> str:
        name = type(method).__name__
        return method.value if name == "MethodOther" else name.removeprefix("Method").upper()

    def _read_body(request) -> bytes:
        body = request.consume()
        data = bytearray()
        with body.stream() as stream:
            while True:
                try:
                    data += stream.blocking_read(65536)
                except Err:  # closed: the whole body was read
                    break
        _types.IncomingBody.finish(body)
        return bytes(data)

    class IncomingHandler(_exports.IncomingHandler):
        """The `wasi:http` export: calls the function given to `@faas.http`."""

        def handle(self, request, response_out):
            target = urlsplit(request.path_with_query() or "/")
            incoming = Request(
                method=_method(request.method()),
                path=target.path,
                query=dict(parse_qsl(target.query)),
                headers={name: value.decode(errors="replace") for name, value in request.headers().entries()},
                body=_read_body(request),
            )
            try:
                response = _http(incoming) if _http else Response(500, "no function is decorated with @faas.http\n")
            except Exception as error:
                response = Response(500, f"{type(error).__name__}: {error}\n")
            if not isinstance(response, Response):
                response = Response(200, response)
            body, headers = response.body, dict(response.headers)
            if isinstance(body, str):
                body = body.encode()
                headers.setdefault("content-type", "text/plain; charset=utf-8")
            elif isinstance(body, (dict, list)):
                body = _json.dumps(body).encode()
                headers.setdefault("content-type", "application/json")
            outgoing = _types.OutgoingResponse(
                _types.Fields.from_list([(name, value.encode()) for name, value in headers.items()])
            )
            outgoing.set_status_code(response.status)
            outgoing_body = outgoing.body()
            _types.ResponseOutparam.set(response_out, Ok(outgoing))
            with outgoing_body.write() as stream:
                for start in range(0, len(body), 4096):
                    stream.blocking_write_and_flush(body[start : start + 4096])
            _types.OutgoingBody.finish(outgoing_body, None)
