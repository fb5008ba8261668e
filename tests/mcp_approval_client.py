"""Calls a tool that needs a person's approval through `/mcp` with the official MCP Python SDK's
client, for tests/api/approval.rs.

    python mcp_approval_client.py MCP_URL

Prints one JSON line per step on stdout: `initialized`; then calls `send_message` twice, each
call waiting for the decision the test makes, and `send_soon`, whose approval expires unanswered:
`approved`, `denied`, `expired`, each with the call's result. Exits 1 on any failure.
"""

import json
import sys

import anyio
import mcp_types as types
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client


def emit(step, **fields):
    print(json.dumps({"step": step, **fields}), flush=True)


def result_fields(result):
    return {
        "is_error": result.is_error,
        "texts": [c.text for c in result.content if isinstance(c, types.TextContent)],
    }


async def main(url):
    async with streamable_http_client(url) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            emit("initialized")
            emit("approved", **result_fields(await session.call_tool("send_message", {"to": "Ann"})))
            emit("denied", **result_fields(await session.call_tool("send_message", {"to": "Bo"})))
            emit("expired", **result_fields(await session.call_tool("send_soon", {"to": "Cy"})))


if __name__ == "__main__":
    try:
        anyio.run(main, sys.argv[1])
    except Exception as e:  # noqa: BLE001 - any failure fails the test
        print(f"failed: {e!r}", file=sys.stderr, flush=True)
        sys.exit(1)
