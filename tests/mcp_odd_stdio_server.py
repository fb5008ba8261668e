"""An odd MCP server over stdio, written with the official MCP Python SDK, for
tests/api/mcp_bounds.rs and tests/api/redaction.rs. From its environment:

- HUGE_DESCRIPTION_BYTES: `huge` is listed with a description this long;
- DUMP_BYTES: `dump` answers a text this long;
- SERVICE_TOKEN: `leak` fails with an error that quotes it, and the server writes it to its
  stderr as it starts, as a careless server would.
"""

import os
import sys

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("odd")
token = os.environ.get("SERVICE_TOKEN", "")
huge = int(os.environ.get("HUGE_DESCRIPTION_BYTES", "0"))
dump_bytes = int(os.environ.get("DUMP_BYTES", "0"))

if huge:

    @server.tool(name="huge", description="d" * huge, structured_output=False)
    def huge_tool() -> str:
        return "ok"


@server.tool(name="dump", description="Answers a long text.", structured_output=False)
def dump() -> str:
    return "x" * dump_bytes


@server.tool(name="leak", description="Fails, quoting its token.", structured_output=False)
def leak() -> str:
    raise ToolError(f"the service refused Authorization: Bearer {token}")


if __name__ == "__main__":
    print(f"starting with SERVICE_TOKEN={token}", file=sys.stderr, flush=True)
    server.run("stdio")
