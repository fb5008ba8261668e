"""A plugin that offers its tools as an MCP server, written with the official MCP Python SDK (its
`MCPServer`, over the streamable-http transport), for tests/api/mcp_plugins.rs. It listens on a
free loopback port, then registers itself with a runtime-tools server:

    python mcp_plugin.py SERVER_URL NAME [--source S] [--role R] [--timeout S] [--extra-tools N]
                         [--long-name] [--list-fails] [--endless-pages] [--wait-tool] [--port P]
                         [--no-register] [--traced-tool]

Its tools: `get_weather(city)`, and `add_tool(name)`, which adds a tool of that name (it greets)
and sends `notifications/tools/list_changed`; `--extra-tools N` adds N more (`tool_0001`...),
`--long-name` one whose name is 65 characters long. With `--list-fails`, `tools/list` answers
with a JSON-RPC error (the server initializes, but cannot list); with `--endless-pages`, every
page of its listing has one tool and a cursor to the next, without end; with `--wait-tool`, a tool
`wait(seconds)` answers after that long (and prints `cancelled wait SECONDS` when the
client cancels it). `--port P` listens on port P (the same plugin started
again), `--traced-tool` adds a tool `traced()` that answers with the W3C trace context its
call carried in `_meta` (SEP-414), `--no-register` does not register (a plugin that comes back and finds its registration
still there), `--timeout S` registers with `timeout_seconds` S. It prints one line per event on stdout:
`listening PORT`, `registered JSON` (the registration's answer), and `request METHOD PATH` for
each HTTP request it receives (so the test sees the DELETE that ends its MCP session).
"""

import argparse
import json
import socket
import sys
import urllib.request

from typing import TypedDict

import anyio
import mcp_types as types
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError


class Weather(TypedDict):
    city: str
    temperature_c: int


class Traced(TypedDict):
    traceparent: str | None
    tracestate: str | None


def say(*parts):
    print(*parts, flush=True)


class ListingFails(MCPServer):
    """An MCP server whose listing always fails."""

    async def list_tools(self):
        raise MCPError(-32603, "the tool index is being rebuilt")


class EndlessPages(MCPServer):
    """An MCP server whose listing never ends: each page has one tool and a cursor to the next."""

    async def _handle_list_tools(self, ctx, params):
        page = int(params.cursor) if params is not None and params.cursor else 1
        tool = types.Tool(name=f"page_{page:04}", input_schema={"type": "object"})
        return types.ListToolsResult(tools=[tool], next_cursor=str(page + 1))


def build(name, extra_tools, long_name, list_fails, wait_tool, endless_pages, traced_tool=False):
    kind = ListingFails if list_fails else EndlessPages if endless_pages else MCPServer
    server = kind(name)

    @server.tool()
    def get_weather(city: str) -> Weather:
        """Gets the weather for a city."""
        return {"city": city, "temperature_c": 28}

    @server.tool()
    async def add_tool(name: str, ctx: Context) -> str:
        """Adds a tool called `name` and announces the change."""

        def greet(who: str) -> str:
            return f"hello {who}, from {name}"

        server.add_tool(greet, name=name, description=f"Greets, as {name}.")
        await ctx.session.send_tool_list_changed()
        return f"added {name}"

    if wait_tool:

        @server.tool()
        async def wait(seconds: float) -> str:
            """Answers after `seconds`."""
            try:
                await anyio.sleep(seconds)
            except anyio.get_cancelled_exc_class():
                # The client sent `notifications/cancelled` for this call.
                say("cancelled wait", seconds)
                raise
            return "waited"

    if traced_tool:

        @server.tool()
        def traced(ctx: Context) -> Traced:
            """Answers with the trace context the call came with."""
            meta = ctx.request_context.meta
            if meta is None:
                data = {}
            elif isinstance(meta, dict):
                data = meta
            else:
                data = meta.model_dump(by_alias=True)
            return {"traceparent": data.get("traceparent"), "tracestate": data.get("tracestate")}

    def adder(i):
        def numbered(x: int) -> int:
            return x + i

        return numbered

    for i in range(1, extra_tools + 1):
        server.add_tool(adder(i), name=f"tool_{i:04}", description=f"Adds {i}.")
    if long_name:

        def long(x: int) -> int:
            return x

        server.add_tool(long, name="l" * 65, description="A name too long for a model.")
    return server


def logged(app):
    """The ASGI app, printing the method and path of every HTTP request first."""

    async def wrapper(scope, receive, send):
        if scope["type"] == "http":
            say("request", scope["method"], scope["path"])
        await app(scope, receive, send)

    return wrapper


def register(server_url, body):
    request = urllib.request.Request(
        f"{server_url}/api/mcp/register",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


async def main(args):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # Started again on its old port, it must not wait for the old connections to time out.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(128)
    port = sock.getsockname()[1]
    say("listening", port)
    server = build(args.name, args.extra_tools, args.long_name, args.list_fails, args.wait_tool,
                   args.endless_pages, args.traced_tool)
    app = logged(server.streamable_http_app(host="127.0.0.1"))
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    http = uvicorn.Server(config)
    body = {"name": args.name, "url": f"http://127.0.0.1:{port}/mcp", "role": args.role}
    if args.source:
        body["source"] = args.source
    if args.timeout:
        body["timeout_seconds"] = args.timeout
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(http.serve, [sock])
        if args.no_register:
            return
        # The socket listens already: the server's connection waits in its queue until uvicorn
        # takes it.
        status, answer = await anyio.to_thread.run_sync(register, args.server, body)
        say("registered", json.dumps({"status": status, "answer": answer}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("server")
    parser.add_argument("name")
    parser.add_argument("--source")
    parser.add_argument("--role")
    parser.add_argument("--extra-tools", type=int, default=0)
    parser.add_argument("--long-name", action="store_true")
    parser.add_argument("--list-fails", action="store_true")
    parser.add_argument("--wait-tool", action="store_true")
    parser.add_argument("--endless-pages", action="store_true")
    parser.add_argument("--timeout", type=float)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--no-register", action="store_true")
    parser.add_argument("--traced-tool", action="store_true")
    anyio.run(main, parser.parse_args())
    sys.exit(0)
