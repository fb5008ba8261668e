"""Drives `runtime-tools mcp` with the official MCP Python SDK client, for tests/api/mcp_serve.rs.

    python mcp_client.py RUNTIME_TOOLS_BINARY SERVER_URL ROLE

Spawns the command over stdio, then prints one JSON line per step on stdout: `initialize`, `list`,
`call` (a tool that answers), `error` (a tool that fails), `missing` (a name that is not
registered), then `waiting` -- at which point the test registers a tool -- and finally `changed`
with the listing after the server's `notifications/tools/list_changed`. Exits 1 on any failure.
"""

import json
import sys

import anyio
import mcp_types as types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

# Longest wait for the list_changed notification after the test registers a tool.
CHANGED_DEADLINE_SECONDS = 60


def emit(step, **fields):
    print(json.dumps({"step": step, **fields}), flush=True)


def result_fields(result):
    return {
        "is_error": result.is_error,
        "texts": [c.text for c in result.content if isinstance(c, types.TextContent)],
        "structured": result.structured_content,
    }


async def main(binary, server, role):
    changed = anyio.Event()

    async def on_message(message):
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    params = StdioServerParameters(command=binary, args=["mcp", "--server", server, "--role", role])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, message_handler=on_message) as session:
            init = await session.initialize()
            emit("initialize", server=init.server_info.name,
                 protocol_version=init.protocol_version,
                 list_changed=init.capabilities.tools.list_changed)
            listed = await session.list_tools()
            emit("list", tools=[{"name": t.name, "description": t.description,
                                 "input_schema": t.input_schema} for t in listed.tools])
            emit("call", **result_fields(await session.call_tool("get_weather", {"city": "Kyoto"})))
            emit("error", **result_fields(await session.call_tool("broken", {})))
            emit("missing", **result_fields(await session.call_tool("nope", {})))
            emit("waiting")
            with anyio.fail_after(CHANGED_DEADLINE_SECONDS):
                await changed.wait()
            listed = await session.list_tools()
            emit("changed", tools=[t.name for t in listed.tools])


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:4])
