"""Drives `/mcp` of a character with more tools than its budget, with the official MCP Python
SDK's client (`streamable_http_client`), for tests/api/budget_chat.rs.

    python mcp_budget_client.py MCP_URL [list-only]

Prints one JSON line per step on stdout: `list` (the names listed, and `find_tools`' required
parameters), then -- unless `list-only` -- `bad_search` (a `find_tools` call that breaks its
schema), `search` (`find_tools` for the lights), `changed` (the names listed after
`notifications/tools/list_changed`), `call` (the tool found, called). Exits 1 on any failure.
"""

import json
import sys

import anyio
import mcp_types as types
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

# Longest wait for the list_changed notification after the search.
CHANGED_DEADLINE_SECONDS = 60


def emit(step, **fields):
    print(json.dumps({"step": step, **fields}), flush=True)


def result_fields(result):
    return {
        "is_error": result.is_error,
        "texts": [c.text for c in result.content if isinstance(c, types.TextContent)],
    }


async def main(url, mode=None):
    changed = anyio.Event()

    async def on_message(message):
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    async with streamable_http_client(url) as (read, write):
        async with ClientSession(read, write, message_handler=on_message) as session:
            await session.initialize()
            listed = await session.list_tools()
            required = [t.input_schema.get("required") for t in listed.tools
                        if t.name == "find_tools"]
            emit("list", tools=[t.name for t in listed.tools],
                 find_tools_required=required[0] if required else None)
            if mode == "list-only":
                return
            emit("bad_search", **result_fields(await session.call_tool("find_tools", {"query": 3})))
            emit("search", **result_fields(await session.call_tool(
                "find_tools", {"query": "turn on the lights", "limit": 1})))
            with anyio.fail_after(CHANGED_DEADLINE_SECONDS):
                await changed.wait()
            listed = await session.list_tools()
            emit("changed", tools=[t.name for t in listed.tools])
            emit("call", **result_fields(await session.call_tool("lights_on", {"room": "kitchen"})))


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:3])
