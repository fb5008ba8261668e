"""Drives `/mcp` (a character's tools over MCP's Streamable HTTP transport) with the official MCP
Python SDK's client (`streamable_http_client`), for tests/api/mcp_http.rs.

    python mcp_http_client.py MCP_URL OTHER_ROLE_MCP_URL

Prints one JSON line per step on stdout: `initialize`, `list`, `call` (a tool that answers),
`error` (a tool that fails), `arguments` (arguments that break the tool's schema), `missing` (a
name that is not registered), `image` (a tool that answers with an image), `other_role` (the
listing at the other URL), then `waiting` -- at which point the test registers a tool -- and
`changed` with the listing after `notifications/tools/list_changed`; last, `foreign_origin`: the
same URL from a page of another site (an `Origin` header that is not loopback). Leaving each
session ends it (`DELETE`). Exits 1 on any failure.
"""

import json
import sys

import anyio
import mcp_types as types
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

# Longest wait for the list_changed notification after the test registers a tool.
CHANGED_DEADLINE_SECONDS = 60


def emit(step, **fields):
    print(json.dumps({"step": step, **fields}), flush=True)


def result_fields(result):
    return {
        "is_error": result.is_error,
        "texts": [c.text for c in result.content if isinstance(c, types.TextContent)],
        "images": [
            {"mime": c.mime_type, "bytes_b64": len(c.data)}
            for c in result.content
            if isinstance(c, types.ImageContent)
        ],
        "structured": result.structured_content,
    }


async def main(url, other_url):
    changed = anyio.Event()

    async def on_message(message):
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    async with streamable_http_client(url) as (read, write):
        async with ClientSession(read, write, message_handler=on_message) as session:
            init = await session.initialize()
            emit("initialize", server=init.server_info.name, title=init.server_info.title,
                 protocol_version=init.protocol_version,
                 list_changed=init.capabilities.tools.list_changed)
            listed = await session.list_tools()
            emit("list", tools=[{"name": t.name, "description": t.description,
                                 "input_schema": t.input_schema} for t in listed.tools])
            emit("call", **result_fields(await session.call_tool("get_weather", {"city": "Kyoto"})))
            emit("error", **result_fields(await session.call_tool("broken", {"city": "Kyoto"})))
            emit("arguments", **result_fields(await session.call_tool("get_weather", {"city": 7})))
            emit("missing", **result_fields(await session.call_tool("nope", {})))
            emit("image", **result_fields(await session.call_tool("camera", {})))
            async with streamable_http_client(other_url) as (other_read, other_write):
                async with ClientSession(other_read, other_write) as other:
                    await other.initialize()
                    listed = await other.list_tools()
                    emit("other_role", tools=[t.name for t in listed.tools])
            emit("waiting")
            with anyio.fail_after(CHANGED_DEADLINE_SECONDS):
                await changed.wait()
            listed = await session.list_tools()
            emit("changed", tools=[t.name for t in listed.tools])

    foreign = create_mcp_http_client(headers={"Origin": "https://evil.example"})
    try:
        async with foreign:
            async with streamable_http_client(url, http_client=foreign) as (read, write):
                async with ClientSession(read, write) as session:
                    with anyio.fail_after(CHANGED_DEADLINE_SECONDS):
                        await session.initialize()
        emit("foreign_origin", refused=False, error=None)
    except BaseException as e:  # noqa: BLE001 - the refusal may come wrapped in a group
        emit("foreign_origin", refused=True, error=describe(e))


def describe(error):
    """The messages of an error and of every error it groups or wraps."""
    parts = [f"{type(error).__name__}: {error}"]
    for inner in getattr(error, "exceptions", ()):
        parts.append(describe(inner))
    if error.__cause__ is not None:
        parts.append(describe(error.__cause__))
    return " | ".join(parts)


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:3])
