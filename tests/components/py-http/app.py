"""A wasi:http/proxy component in Python, built with componentize-py (no ankh SDK).

Build: tests/components/build-py.sh py-http ../wit proxy pyhttp OUT_DIR (writes OUT_DIR/pyhttp.wasm).

Written the way componentize-py's own wasi:http example is shaped: an `IncomingHandler`
class exported for the world, answering through `ResponseOutparam.set` and an outgoing body
stream; here with the blocking stream calls instead of an event loop. Routes:
- `/`: `hello from python`
- `/echo`: the request body back, with its content-type
- `/echo-headers`: each request header as a `name: value` line, in order
- `/fetch?url=U`: a GET of U through `wasi:http/outgoing-handler`; answers `status N` and
  the body it got, or 502 and the error code
- anything else: 404
"""

from urllib.parse import parse_qs, urlsplit

from componentize_py_types import Err, Ok
from wit_world import exports
from wit_world.imports import outgoing_handler, streams
from wit_world.imports.types import (
    Fields,
    IncomingBody,
    IncomingRequest,
    Method_Get,
    OutgoingBody,
    OutgoingRequest,
    OutgoingResponse,
    ResponseOutparam,
    Scheme_Http,
    Scheme_Https,
)

# The most a blocking write may carry (what `check-write` allows at least).
WRITE_BYTES = 4096


def read_all(body: IncomingBody) -> bytes:
    """Reads a body stream to its end."""
    stream = body.stream()
    out = bytearray()
    while True:
        try:
            out += stream.blocking_read(65536)
        except Err as e:
            if isinstance(e.value, streams.StreamError_Closed):
                break
            raise
    stream.__exit__(None, None, None)
    return bytes(out)


def respond(out: ResponseOutparam, status: int, headers: list, body: bytes) -> None:
    response = OutgoingResponse(Fields.from_list(headers))
    response.set_status_code(status)
    outgoing = response.body()
    ResponseOutparam.set(out, Ok(response))
    stream = outgoing.write()
    for at in range(0, len(body), WRITE_BYTES):
        stream.blocking_write_and_flush(body[at : at + WRITE_BYTES])
    stream.__exit__(None, None, None)
    OutgoingBody.finish(outgoing, None)


def fetch(url: str) -> tuple:
    """GETs `url`: (status, body), or raises with the wasi:http error code."""
    parts = urlsplit(url)
    request = OutgoingRequest(Fields())
    request.set_method(Method_Get())
    request.set_scheme(Scheme_Https() if parts.scheme == "https" else Scheme_Http())
    request.set_authority(parts.netloc)
    request.set_path_with_query((parts.path or "/") + (f"?{parts.query}" if parts.query else ""))
    future = outgoing_handler.handle(request, None)
    future.subscribe().block()
    answer = future.get()
    if isinstance(answer.value, Err):
        raise RuntimeError(f"{answer.value.value}")
    response = answer.value.value
    if isinstance(response, Err):
        raise RuntimeError(f"{response.value}")
    return response.status(), read_all(response.consume())


class IncomingHandler(exports.IncomingHandler):
    def handle(self, request: IncomingRequest, response_out: ResponseOutparam) -> None:
        target = urlsplit(request.path_with_query() or "/")
        text = [("content-type", b"text/plain")]
        if target.path == "/":
            respond(response_out, 200, text, b"hello from python\n")
        elif target.path == "/echo":
            kind = request.headers().get("content-type") or [b"application/octet-stream"]
            body = read_all(request.consume())
            respond(response_out, 200, [("content-type", kind[0])], body)
        elif target.path == "/echo-headers":
            lines = b"".join(
                name.encode() + b": " + value + b"\n" for name, value in request.headers().entries()
            )
            respond(response_out, 200, text, lines)
        elif target.path == "/fetch":
            url = parse_qs(target.query).get("url", [""])[0]
            try:
                status, body = fetch(url)
                respond(response_out, 200, text, f"status {status}\n".encode() + body)
            except Exception as e:  # the component answers every failure itself
                respond(response_out, 502, text, f"fetch failed: {e}\n".encode())
        else:
            respond(response_out, 404, text, b"not found\n")
