#!/usr/bin/env python3
"""A slow tool that does not hold up the conversation (Python standard library only).

It registers `find_flights` as a **non-blocking** tool (`"behavior": "non_blocking"`): when a live
model calls it, the server answers the model at once that the search is running, and the
conversation goes on. Meanwhile the plugin works (here: it sleeps `--seconds`), reports its
progress halfway (`POST /api/tools/calls/{call_id}/progress`), and answers; the server then gives
the model the result and asks it to speak of it when nobody is talking (`scheduling:
"when_idle"`, the default). At start it also tells every live conversation that flight search is
available (`POST /api/sessions/context`).

    python3 examples/slow_tool.py
    python3 examples/slow_tool.py --server http://127.0.0.1:48911 --port 0 --seconds 8

It prints one line per step; on SIGINT / SIGTERM it clears its tool and exits 0.
Tool arguments come from the user's conversation: this plugin never prints them.

Every request it makes carries its `X-Plugin-Token`, from SLOW_TOOL_TOKEN or made once and kept in
`.slow_tool.token` beside this script (mode 0600; `--token-file` names another): its first
registration binds its source, so no other local process can take its tool over, and a server
that requires tokens takes its progress and context.
"""

import argparse
import json
import os
import secrets
import signal
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOOL = "find_flights"
SOURCE = "plugin:flights"

# The variable that may hold the plugin's token; without it, the token file is used.
TOKEN_ENV = "SLOW_TOOL_TOKEN"

# Requests to our own server never go through a proxy.
HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))

# The plugin's X-Plugin-Token, read once at start.
TOKEN = None


def plugin_token(token_file):
    """SLOW_TOOL_TOKEN, or the token kept in `token_file`, made (mode 0600) the first time."""
    token = os.environ.get(TOKEN_ENV, "").strip()
    if token:
        return token
    try:
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        with open(token_file, encoding="ascii") as kept:
            return kept.read().strip()
    token = secrets.token_hex(16)
    with os.fdopen(fd, "w", encoding="ascii") as kept:
        kept.write(token + "\n")
    return token


def post(server, path, body):
    """POSTs JSON to the server with the plugin's token; returns (status, answer)."""
    request = urllib.request.Request(
        server + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "X-Plugin-Token": TOKEN},
        method="POST",
    )
    try:
        with HTTP.open(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def handler(server, seconds):
    class Callback(BaseHTTPRequestHandler):
        def do_POST(self):
            call = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            call_id = call["call_id"]
            print(f"searching for call {call_id}", flush=True)
            time.sleep(seconds / 2)
            status, _ = post(
                server,
                f"/api/tools/calls/{call_id}/progress",
                {"message": "Found 3 flights, checking prices"},
            )
            print(f"progress for call {call_id}: HTTP {status}", flush=True)
            time.sleep(seconds / 2)
            body = json.dumps(
                {"output": {"flights": [{"number": "NH 123", "price_eur": 420}]},
                 "scheduling": "when_idle"}
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            print(f"answered call {call_id}", flush=True)

        def log_message(self, *args):
            pass

    return Callback


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default="http://127.0.0.1:48911")
    parser.add_argument("--port", type=int, default=48913, help="callback port (0: any free one)")
    parser.add_argument("--seconds", type=float, default=6.0, help="how long a search takes")
    parser.add_argument("--token-file",
                        default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".slow_tool.token"),
                        help=f"where the token is kept when {TOKEN_ENV} is not set (default: beside this script)")
    args = parser.parse_args()
    global TOKEN
    TOKEN = plugin_token(args.token_file)

    httpd = ThreadingHTTPServer(("127.0.0.1", args.port), handler(args.server, args.seconds))
    port = httpd.server_address[1]
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    status, answer = post(args.server, "/api/tools/register", {
        "name": TOOL,
        "description": "Search flights between two cities. Takes a while; the result follows.",
        "parameters": {"type": "object",
                       "properties": {"from": {"type": "string"}, "to": {"type": "string"}},
                       "required": ["from", "to"]},
        "callback_url": f"http://127.0.0.1:{port}/tools/{TOOL}",
        "source": SOURCE,
        "timeout_seconds": max(30, args.seconds * 2),
        "behavior": "non_blocking",
    })
    if status != 200 or not answer.get("ok"):
        print(f"registration failed: HTTP {status} {answer}", file=sys.stderr, flush=True)
        return 1
    print(f"registered {TOOL} (non-blocking) on port {port}", flush=True)
    _, told = post(args.server, "/api/sessions/context",
                   {"role": None, "text": "Flight search is available now."})
    print(f"told: {told.get('affected_roles')}", flush=True)

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    post(args.server, "/api/tools/clear", {"source": SOURCE})
    print("cleared", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
