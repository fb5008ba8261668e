#!/usr/bin/env python3
"""A Runtime Tool API plugin written with the Python standard library only.

It serves one tool, `get_weather`, from a callback on loopback and keeps it registered with a
runtime-tools server:

* at start it registers the tool (source "plugin:weather");
* it answers each call per the callback contract: `{"output": ...}` on success,
  `{"error": "...", "is_error": true}` for a location it does not know;
* it follows the server's event stream (`GET /api/events`): when the stream greets it with a new
  server instance id (the server restarted and forgot every registration: they are runtime
  state) it registers again, and when a change removes its tool it checks and registers again;
* when the stream is unavailable (the server is down, or too old to have one) it falls back to
  polling `GET /api/tools`, registering whenever its tool is missing, and tries the stream again;
* on SIGINT / SIGTERM it clears its tools (`POST /api/tools/clear`) and exits 0.

Every change it asks for carries its `X-Plugin-Token`: the first registration binds its source to
it, so no other local process can take its tool over, and after a restart of a server that keeps
state (`--state`) only this plugin wakes its restored tool. The token comes from
WEATHER_PLUGIN_TOKEN, or is made once and kept in a file beside this script
(`.weather_plugin.token`, mode 0600; `--token-file` names another).

Run it beside a server started with `cargo run --profile dist -- serve`:

    python3 examples/weather_plugin.py
    python3 examples/weather_plugin.py --server http://127.0.0.1:48911 --port 48912 --role Lanlan

Every option can also come from the environment: RUNTIME_TOOLS_URL, WEATHER_PLUGIN_PORT,
WEATHER_PLUGIN_ROLE, WEATHER_PLUGIN_POLL_SECONDS, WEATHER_PLUGIN_TOKEN_FILE.

Tool arguments come from the user's conversation: this plugin never logs them.
"""

import argparse
import http.client
import json
import os
import queue
import secrets
import signal
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOOL_NAME = "get_weather"
SOURCE = "plugin:weather"
CALLBACK_PATH = "/tools/" + TOOL_NAME

# A made-up, deterministic forecast: the point is the round trip, not the weather.
FORECASTS = {
    "shanghai": {"temperature_c": 28, "conditions": "sunny"},
    "tokyo": {"temperature_c": 22, "conditions": "cloudy"},
    "berlin": {"temperature_c": 14, "conditions": "rain"},
}

# The variable that may hold the plugin's token; without it, the token file is used.
TOKEN_ENV = "WEATHER_PLUGIN_TOKEN"

# Where the token is kept when the variable is not set: beside this script, readable by its owner
# only.
DEFAULT_TOKEN_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), ".weather_plugin.token")

# Requests to our own server never go through a proxy, whatever http_proxy says.
HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))

# How long one request to the server may take before the plugin gives up on it (and retries on
# the next poll). Changes wait for live model sessions to acknowledge, which can take seconds.
SERVER_TIMEOUT_SECONDS = 30

# How long the event stream may stay silent before the plugin takes it for dead: the server sends
# a keep-alive comment every 15 s, so four missed in a row mean the connection is gone.
STREAM_SILENCE_SECONDS = 60


def say(text):
    """Progress lines go to stdout, flushed at once, so a supervisor (or a test) can follow."""
    print(text, flush=True)


def plugin_token(token_file):
    """The plugin's X-Plugin-Token and where it came from: WEATHER_PLUGIN_TOKEN, or the token file,
    made (32 random hex characters, mode 0600) the first time. The token itself is never printed."""
    token = os.environ.get(TOKEN_ENV, "").strip()
    if token:
        return token, f"from {TOKEN_ENV}"
    try:
        # O_EXCL: of two plugins started at once, one makes the file and the other reads it.
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        with open(token_file, encoding="ascii") as kept:
            return kept.read().strip(), f"kept in {token_file}"
    token = secrets.token_hex(16)
    with os.fdopen(fd, "w", encoding="ascii") as kept:
        kept.write(token + "\n")
    return token, f"made now and kept in {token_file}"


def answer_call(call):
    """Maps one callback body to the callback's JSON answer."""
    arguments = call.get("arguments") or {}
    location = arguments.get("location")
    if not isinstance(location, str) or not location.strip():
        return {"error": "argument 'location' must be a non-empty string", "is_error": True}
    forecast = FORECASTS.get(location.strip().lower())
    if forecast is None:
        known = ", ".join(name.title() for name in FORECASTS)
        return {"error": f"location not found (known: {known})", "is_error": True}
    return {"output": {"location": location, **forecast}, "is_error": False}


class CallbackHandler(BaseHTTPRequestHandler):
    """The tool's callback: `POST /tools/get_weather` with {name, arguments, call_id, raw_arguments}."""

    # Keep-alive, so the server can reuse its connection for the next call.
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        # Every tool under /tools/ is answered the same way, so a tool registered by hand with
        # curl (README walk-through) can use this callback too.
        if not self.path.startswith("/tools/"):
            self.send_json(404, {"error": f"no tool at {self.path}", "is_error": True})
            return
        length = int(self.headers.get("Content-Length") or 0)
        try:
            call = json.loads(self.rfile.read(length))
        except ValueError:
            self.send_json(400, {"error": "the call body is not JSON", "is_error": True})
            return
        self.send_json(200, answer_call(call))
        # The call id identifies the call without revealing what the user asked.
        say(f"answered call {call.get('call_id')}")

    def send_json(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format, *args):
        # The default writes every request line to stderr; the progress lines above suffice.
        pass


class ServerError(Exception):
    """The server answered with an error status; `status` and `body` say which."""

    def __init__(self, status, body):
        super().__init__(f"HTTP {status}: {body}")
        self.status = status
        self.body = body


def request(server, method, path, body=None, token=None):
    """One JSON request to the server (with the plugin's token, when given); returns the decoded
    answer or raises ServerError/OSError."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(server + path, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if token is not None:
        req.add_header("X-Plugin-Token", token)
    try:
        with HTTP.open(req, timeout=SERVER_TIMEOUT_SECONDS) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            detail = json.loads(raw)
        except ValueError:
            detail = raw.decode(errors="replace")
        raise ServerError(e.code, detail) from None


class Plugin:
    def __init__(self, server, callback_url, role, token):
        self.server = server.rstrip("/")
        self.callback_url = callback_url
        self.role = role
        self.token = token
        # None until the first answer, then whether the server answered last time.
        self.reachable = None
        self.last_problem = None

    def register(self):
        answer = request(self.server, "POST", "/api/tools/register", {
            "name": TOOL_NAME,
            "description": "Get the current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {"location": {"type": "string", "description": "a city name"}},
                "required": ["location"],
            },
            "callback_url": self.callback_url,
            "role": self.role,
            "source": SOURCE,
            "timeout_seconds": 10,
        }, token=self.token)
        roles = ", ".join(answer["affected_roles"]) or "none"
        say(f"registered {TOOL_NAME} (affected_roles: {roles})")
        for failure in answer["failed_roles"]:
            # The registry took the tool; only that character's live session missed the update.
            say(f"  {failure['role']} did not sync: {failure['error']}")

    def is_registered(self):
        """Whether every role the server lists (or our role) has our tool with our callback."""
        path = "/api/tools" if self.role is None else "/api/tools?role=" + urllib.parse.quote(self.role)
        listing = request(self.server, "GET", path)
        return all(
            any(t["name"] == TOOL_NAME and t["callback_url"] == self.callback_url for t in tools)
            for tools in listing["tools_by_role"].values()
        )

    def ensure_registered(self):
        """One watch step: register when the tool is missing. Returns whether it had to; never
        raises for a server problem."""
        registered = False
        try:
            present = self.is_registered()
            if not present:
                if self.reachable is not None:
                    say(f"{TOOL_NAME} is missing from the server; registering again")
                self.register()
                registered = True
            self.reachable = True
            self.last_problem = None
        except ServerError as e:
            if e.status == 422:
                # A bug in this plugin's request: retrying cannot help.
                say(f"the server refused the registration: {json.dumps(e.body)}")
                raise SystemExit(2)
            # 404: the role does not exist (yet); 403: we are not on loopback, or our source is
            # bound to another token. Keep watching, and say so once rather than on every poll.
            problem = f"server answered {e.status}: {json.dumps(e.body)}"
            if problem != self.last_problem:
                say(problem)
            self.last_problem = problem
        except OSError as e:
            if self.reachable is not False:
                say(f"server {self.server} unreachable ({e}); retrying")
            self.reachable = False
        return registered

    def open_events(self):
        """Opens the event stream; returns the response, or raises ServerError / OSError."""
        path = "/api/events" if self.role is None else "/api/events?role=" + urllib.parse.quote(self.role)
        req = urllib.request.Request(self.server + path, headers={"Accept": "text/event-stream"})
        try:
            return HTTP.open(req, timeout=STREAM_SILENCE_SECONDS)
        except urllib.error.HTTPError as e:
            raise ServerError(e.code, e.read().decode(errors="replace")) from None

    def clear(self):
        try:
            answer = request(self.server, "POST", "/api/tools/clear", {"source": SOURCE, "role": self.role},
                             token=self.token)
            say(f"cleared {answer['removed']} tool(s) of {SOURCE}")
        except (OSError, ServerError) as e:
            # A stopped server has no registrations to clear.
            say(f"could not clear {SOURCE}: {e}")


def read_events(stream, inbox):
    """Reads Server-Sent Events off `stream` into `inbox` as ("event", name, data) items, then
    ("lost", reason) when the stream ends. Runs on its own thread: the read blocks."""
    name, data = None, []
    try:
        for raw in stream:
            line = raw.decode("utf-8").rstrip("\r\n")
            if not line:
                if name is not None:
                    inbox.put(("event", name, json.loads("\n".join(data))))
                name, data = None, []
            elif line.startswith(":"):
                continue  # a keep-alive comment
            else:
                field, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if field == "event":
                    name = value
                elif field == "data":
                    data.append(value)
        inbox.put(("lost", "the server closed the stream"))
    except (OSError, ValueError, http.client.HTTPException) as e:
        inbox.put(("lost", str(e) or type(e).__name__))


def concerns_us(change):
    """Whether a `tools.changed` event may have removed our tool."""
    return change.get("op") != "register" and (
        change.get("name") == TOOL_NAME or change.get("source") == SOURCE
    )


def watch(plugin, poll_interval, inbox, stop):
    """Keeps the tool registered until `stop` is set: follows the event stream while it is
    available, polls `GET /api/tools` while it is not."""
    instance = None
    stream_missing = False
    while not stop.is_set():
        stream = None
        if not stream_missing:
            try:
                stream = plugin.open_events()
            except ServerError as e:
                # An older server without the stream: poll, and try the stream again only once
                # the server has visibly restarted (our tool went missing).
                say(f"event stream unavailable (HTTP {e.status}); polling every {poll_interval:g} s")
                stream_missing = True
            except OSError:
                pass  # the server is down: polling below says so
        if stream is None:
            if plugin.ensure_registered() and stream_missing:
                stream_missing = False
            try:
                item = inbox.get(timeout=poll_interval)
            except queue.Empty:
                continue
            if item[0] == "stop":
                return
            continue
        threading.Thread(target=read_events, args=(stream, inbox), daemon=True).start()
        while True:
            item = inbox.get()
            if item[0] == "stop":
                # The reader thread is a daemon: it ends with the process.
                return
            if item[0] == "lost":
                say(f"event stream lost ({item[1]}); polling every {poll_interval:g} s until it is back")
                break
            _, name, data = item
            if name == "hello":
                if instance is not None and data["instance_id"] != instance:
                    say(f"the server restarted (instance {data['instance_id']}); registering again")
                    plugin.reachable = None
                instance = data["instance_id"]
                plugin.ensure_registered()
            elif name == "reset" or (name == "tools.changed" and concerns_us(data)):
                plugin.ensure_registered()


def main():
    env = os.environ.get
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default=env("RUNTIME_TOOLS_URL", "http://127.0.0.1:48911"),
                        help="runtime-tools server URL (default: %(default)s)")
    parser.add_argument("--port", type=int, default=int(env("WEATHER_PLUGIN_PORT", "48912")),
                        help="callback port on 127.0.0.1; 0 picks a free one (default: %(default)s)")
    parser.add_argument("--role", default=env("WEATHER_PLUGIN_ROLE") or None,
                        help="register for this character only (default: every character)")
    parser.add_argument("--poll-interval", type=float,
                        default=float(env("WEATHER_PLUGIN_POLL_SECONDS", "2")),
                        help="while the event stream is unavailable: seconds between checks of "
                             "GET /api/tools (default: %(default)s)")
    parser.add_argument("--token-file", default=env("WEATHER_PLUGIN_TOKEN_FILE", DEFAULT_TOKEN_FILE),
                        help=f"where the plugin's token is kept when {TOKEN_ENV} is not set "
                             "(default: beside this script)")
    args = parser.parse_args()
    try:
        token, origin = plugin_token(args.token_file)
    except OSError as e:
        say(f"cannot keep the plugin's token in {args.token_file} ({e}); set {TOKEN_ENV} instead")
        return 1
    say(f"X-Plugin-Token {origin}")

    try:
        callbacks = ThreadingHTTPServer(("127.0.0.1", args.port), CallbackHandler)
    except OSError as e:
        say(f"cannot serve the callback on 127.0.0.1:{args.port} ({e}); "
            "pass --port 0 to pick a free port")
        return 1
    callbacks.daemon_threads = True
    callback_url = f"http://127.0.0.1:{callbacks.server_address[1]}{CALLBACK_PATH}"
    threading.Thread(target=callbacks.serve_forever, daemon=True).start()
    say(f"callback listening on {callback_url}")

    stop = threading.Event()
    inbox = queue.Queue()

    def on_signal(*_):
        stop.set()
        inbox.put(("stop",))

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, on_signal)

    plugin = Plugin(args.server, callback_url, args.role, token)
    try:
        watch(plugin, args.poll_interval, inbox, stop)
    finally:
        plugin.clear()
        callbacks.shutdown()
        say("stopped")


if __name__ == "__main__":
    sys.exit(main())
