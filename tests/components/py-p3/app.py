"""A WASI 0.3 wasi:http/service component in Python, built with componentize-py (no ankh SDK).

Build: tests/components/build-py.sh py-p3 wit service pyp3 OUT_DIR (writes OUT_DIR/pyp3.wasm).

Written the way componentize-py's own `http-p3` example is shaped: a `Handler` class whose
`async def handle` is the world's `wasi:http/handler@0.3.0` export, with bodies as
`stream<u8>` and trailers as `future<...>`, driven by componentize-py's asyncio loop. Its
routes answer as `tests/plugins/p3raw` does (the texts say "python"):
- `/`: a hello text
- `/echo`: the request's body stream and trailers future handed straight back as the
  response's, with `x-method`, `x-path` and `x-req-content-length` headers
- `/headers`: each request header as a `name: value` line
- `/status?code=N`: an empty answer with status N
- `/big?bytes=N`: N bytes, `a` + i % 26
- `/trailers`: `a body with trailers` and the trailer `x-checksum: abc123`
- `/stream?n=N&ms=M`: N `tick i` lines, M milliseconds apart
- `/fetch?url=http://host:port/path`: a GET through `wasi:http/client`; answers
  `fetched STATUS: BODY`, or 502 and the error code
- `/drip`: the sizes of the reads of the request body, its trailers, then `end`
- `/count`: how many times this instance has been asked `/count` (p3raw's `count()`)
- `/sleep?ms=M`: `slept` after M milliseconds
- `/trap`: raises, so the instance traps
- anything else: 404
"""

import dataclasses
import re
from typing import Optional

import componentize_py_async_support
import wit_world
from componentize_py_async_support.futures import FutureReader
from componentize_py_async_support.streams import ByteStreamReader, ByteStreamWriter
from componentize_py_types import Err, Ok, Result
from wit_world import exports
from wit_world.imports import client, monotonic_clock
from wit_world.imports.wasi_http_types import (
    ErrorCode,
    Fields,
    Method,
    Request,
    Response,
    Scheme_Http,
)

TEXT = [("content-type", b"text/plain")]
# The most one stream write carries (a bigger body is written in pieces of this size).
CHUNK = 64 * 1024
ALPHABET = bytes(range(ord("a"), ord("a") + 26))
# The `/count` requests this instance has answered.
served = 0


def trailers_future(
    trailers: Optional[Fields] = None,
) -> tuple:
    """A (writer, reader) pair for a `trailers` future; a dropped writer sends `Ok(trailers)`."""
    return wit_world.result_option_wasi_http_types_fields_wasi_http_types_error_code_future(
        lambda: Ok(trailers)
    )


def no_trailers() -> FutureReader[Result[Optional[Fields], ErrorCode]]:
    """A `trailers` future that resolves to no trailers (its writer is dropped at once)."""
    return trailers_future()[1]


def unit_future() -> FutureReader[Result[None, ErrorCode]]:
    """The `res` future of `consume-body`: `Ok(())` once its writer is dropped."""
    return wit_world.result_unit_wasi_http_types_error_code_future(lambda: Ok(None))[1]


async def write_body(tx: ByteStreamWriter, body: bytes) -> bool:
    """Writes `body` to `tx` in pieces; False when the reader went away first."""
    for at in range(0, len(body), CHUNK):
        await tx.write_all(body[at : at + CHUNK])
        if tx.reader_dropped:
            return False
    return True


def respond(status: int, headers: list, body: bytes, trailers: Optional[list] = None) -> Response:
    """A response whose body (and then trailers) is written after it is returned."""
    tx, rx = wit_world.byte_stream()
    trailers_tx, trailers_rx = trailers_future()

    async def send() -> None:
        with tx:
            await write_body(tx, body)
        await trailers_tx.write(Ok(Fields.from_list(trailers) if trailers is not None else None))

    componentize_py_async_support.spawn(send())
    response = Response.new(Fields.from_list(headers), rx, trailers_rx)[0]
    try:
        response.set_status_code(status)
    except Err:
        pass
    return response


def text(status: int, body: bytes) -> Response:
    return respond(status, TEXT, body)


def query(target: str, key: str) -> Optional[str]:
    """The raw (undecoded) value of the first `key=value` pair of the query, as p3raw finds it."""
    if "?" not in target:
        return None
    for pair in target.split("?", 1)[1].split("&"):
        if "=" in pair:
            k, v = pair.split("=", 1)
            if k == key:
                return v
    return None


def number(target: str, key: str) -> int:
    """The query value `key` as a u64 (Rust's `str::parse`), else 0."""
    value = query(target, key)
    if value is None or not re.fullmatch(r"\+?[0-9]+", value):
        return 0
    n = int(value)
    return n if n < 2**64 else 0


async def wait_ms(ms: int) -> None:
    await monotonic_clock.wait_for(ms * 1_000_000)


def method_name(method: Method) -> str:
    """The method as p3raw writes it (`format!("{:?}", method).to_uppercase()`: `METHOD::GET`)."""
    return rust_debug(method).upper()


def rust_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def rust_debug(value, optional: bool = False) -> str:
    """A value of the generated bindings written as wit-bindgen's Rust `Debug` writes it."""
    if optional:
        return "None" if value is None else f"Some({rust_debug(value)})"
    if isinstance(value, str):
        return rust_str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if dataclasses.is_dataclass(value):
        name = type(value).__name__
        fields = dataclasses.fields(value)
        is_optional = lambda f: "Optional" in str(f.type)
        if "_" in name:  # a variant case, `ErrorCode_DnsError`
            case = name.replace("_", "::", 1)
            if not fields:
                return case
            f = fields[0]
            return f"{case}({rust_debug(getattr(value, f.name), is_optional(f))})"
        inner = ", ".join(
            f"{f.name}: {rust_debug(getattr(value, f.name), is_optional(f))}" for f in fields
        )
        return f"{name} {{ {inner} }}"
    return repr(value)


async def body_of(response: Response) -> bytes:
    """The body of `response`, read whole; the `res` future of `consume-body` is resolved, and
    the trailers future dropped, once it is (as p3raw's `_tx` and `_trailers` live on)."""
    done_tx, done_rx = wit_world.result_unit_wasi_http_types_error_code_future(lambda: Ok(None))
    rx, trailers = Response.consume_body(response, done_rx)
    out = bytearray()
    with rx, trailers:
        while not rx.writer_dropped:
            out += await rx.read(CHUNK)
    componentize_py_async_support.spawn(done_tx.write(Ok(None)))
    return bytes(out)


async def fetch(target: str) -> Response:
    url = query(target, "url")
    if url is None:
        return text(400, b"no url\n")
    rest = url[len("http://") :] if url.startswith("http://") else url
    slash = rest.find("/")
    authority, path = (rest, "/") if slash < 0 else (rest[:slash], rest[slash:])
    # `sent` (the request's transmission result) is held until the answer is read, as p3raw's
    # `_sent` is: dropped at once, the host ends the response body before it arrives.
    outbound, sent = Request.new(Fields(), None, no_trailers(), None)
    for setter, value in (
        (outbound.set_scheme, Scheme_Http()),
        (outbound.set_authority, authority),
        (outbound.set_path_with_query, path),
    ):
        try:
            setter(value)
        except Err:
            pass
    try:
        response = await client.send(outbound)
    except Err as e:
        return text(502, f"fetch failed: {rust_debug(e.value)}\n".encode())
    status = response.get_status_code()
    with sent:
        body = await body_of(response)
    return text(200, f"fetched {status}: ".encode() + body)


async def drip(request: Request) -> Response:
    done_tx, done_rx = wit_world.result_unit_wasi_http_types_error_code_future(lambda: Ok(None))
    body, trailers = Request.consume_body(request, done_rx)
    lines = ""
    with body:
        while not body.writer_dropped:
            piece = await body.read(CHUNK)
            if piece:
                lines += f"read {len(piece)}\n"
    got = await trailers.read()
    if isinstance(got, Ok):
        for name, value in (got.value.copy_all() if got.value is not None else []):
            lines += f"trailer {name}: {value.decode('utf-8', 'replace')}\n"
        lines += "end\n"
    else:
        lines += f"error: {rust_debug(got.value)}\n"
    componentize_py_async_support.spawn(done_tx.write(Ok(None)))
    return text(200, lines.encode())


async def stream(target: str) -> Response:
    n, ms = number(target, "n"), number(target, "ms")
    tx, rx = wit_world.byte_stream()

    async def ticks() -> None:
        with tx:
            for i in range(1, n + 1):
                await tx.write_all(f"tick {i}\n".encode())
                if tx.reader_dropped:
                    break
                await wait_ms(ms)

    componentize_py_async_support.spawn(ticks())
    return Response.new(Fields.from_list(TEXT), rx, no_trailers())[0]


class Handler(exports.Handler):
    async def handle(self, request: Request) -> Response:
        target = request.get_path_with_query() or "/"
        path = target.split("?", 1)[0]
        if path == "/":
            return text(200, b"hello from a WASI 0.3 component (python)\n")
        if path == "/echo":
            headers = [
                ("x-method", method_name(request.get_method()).encode()),
                ("x-path", target.encode()),
            ]
            length = request.get_headers().get("content-length")
            if length:
                headers.append(("x-req-content-length", length[0]))
            body, trailers = Request.consume_body(request, unit_future())
            return Response.new(Fields.from_list(headers), body, trailers)[0]
        if path == "/headers":
            lines = b"".join(
                name.encode() + b": " + value.decode("utf-8", "replace").encode() + b"\n"
                for name, value in request.get_headers().copy_all()
            )
            return text(200, lines)
        if path == "/status":
            code = number(target, "code")
            response = Response.new(Fields(), None, no_trailers())[0]
            try:
                response.set_status_code(code if code < 2**16 else 500)
            except Err:
                pass
            return response
        if path == "/big":
            n = number(target, "bytes")
            return text(200, (ALPHABET * (n // 26 + 1))[:n])
        if path == "/trailers":
            return respond(
                200, TEXT, b"a body with trailers\n", [("x-checksum", b"abc123")]
            )
        if path == "/stream":
            return await stream(target)
        if path == "/fetch":
            return await fetch(target)
        if path == "/drip":
            return await drip(request)
        if path == "/count":
            global served
            served += 1
            return text(200, f"{served}\n".encode())
        if path == "/sleep":
            await wait_ms(number(target, "ms"))
            return text(200, b"slept\n")
        if path == "/trap":
            raise RuntimeError("asked to trap")
        return text(404, b"not found\n")
