"""An ankh plugin in Python: the same WIT world as the Rust examples, built by componentize-py.

Routes (under the mount, /py by default):
  GET  /          a greeting
  GET  /json      the request as JSON
  POST /visits    count visits in the plugin's key-value namespace
  GET  /boom      raise: the host answers 500 and replaces the instance
  GET  /ws        a WebSocket that echoes every message upper-cased
"""

import json
import sys

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import kv, log, websocket
from wit_world.imports.types import (
    Header, LogLevel, Message_Binary, Message_Text, Outcome_Respond, Outcome_Upgrade, Response,
    Upgrade,
)


def respond(status, body, content_type="text/plain; charset=utf-8"):
    if isinstance(body, str):
        body = body.encode()
    return Outcome_Respond(Response(status, [Header("content-type", content_type.encode())], body))


def to_json(request):
    return {
        "method": request.method,
        "path": request.path,
        "mount": request.mount,
        "query": request.query,
        "headers": [[h.name, h.value.decode("utf-8", "replace")] for h in request.headers],
        "body": request.body.decode("utf-8", "replace"),
        "python": sys.version.split()[0],
    }


class Handler(exports.Handler):
    def handle_request(self, request):
        route = request.path[len(request.mount):] or "/"
        if request.method == "GET" and route == "/":
            return respond(200, f"Hello from Python {sys.version.split()[0]}!\n")
        if route == "/json":
            return respond(200, json.dumps(to_json(request)), "application/json")
        if request.method == "POST" and route == "/visits":
            try:
                count = kv.increment("visits", 1)
            except Err as e:
                return respond(503, f"the key-value store failed: {e.value}\n")
            log.log(LogLevel.INFO, "visit", [("count", str(count))])
            return respond(200, json.dumps({"visits": count}), "application/json")
        if route == "/boom":
            raise RuntimeError("boom: an uncaught Python exception")
        if request.method == "GET" and route == "/ws":
            return Outcome_Upgrade(Upgrade(None, []))
        return respond(404, "not found\n")


class WebsocketHandler(exports.WebsocketHandler):
    def on_open(self, conn, request):
        send(conn, Message_Text("hello from python"))

    def on_message(self, conn, message):
        if isinstance(message, Message_Text):
            send(conn, Message_Text(message.value.upper()))
        else:
            send(conn, Message_Binary(bytes(reversed(message.value))))

    def on_close(self, conn, info):
        log.log(LogLevel.DEBUG, "closed", [("code", str(info.code))])


def send(conn, message):
    try:
        websocket.send(conn, message)
    except Err:
        pass  # the peer has gone: nothing to do
