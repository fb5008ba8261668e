"""Two sessions of `/mcp` calling one tool with the same arguments, with the official MCP Python
SDK's client (`streamable_http_client`), for tests/api/limits.rs.

    python mcp_dedupe_client.py MCP_URL TOOL

The first session calls TOOL twice with `{"room": "hall", "on": true}` (the second time with its
keys the other way round); then a second session calls it once more with the same arguments.
Prints one JSON line per call on stdout (`first`, `repeat`, `other_session`: `is_error` and the
result's texts). Exits 1 on any failure.
"""

import json
import sys

import anyio
import mcp_types as types
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client


def emit(step, result):
    texts = [c.text for c in result.content if isinstance(c, types.TextContent)]
    print(json.dumps({"step": step, "is_error": result.is_error, "texts": texts}), flush=True)


async def main(url, tool):
    async with streamable_http_client(url) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            emit("first", await session.call_tool(tool, {"room": "hall", "on": True}))
            emit("repeat", await session.call_tool(tool, {"on": True, "room": "hall"}))
    async with streamable_http_client(url) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            emit("other_session", await session.call_tool(tool, {"room": "hall", "on": True}))


if __name__ == "__main__":
    try:
        anyio.run(main, sys.argv[1], sys.argv[2])
    except Exception as error:  # noqa: BLE001 - any failure is the test's
        print(json.dumps({"step": "failed", "error": repr(error)}), flush=True)
        sys.exit(1)
