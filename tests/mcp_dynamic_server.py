"""A small MCP server, written with the official MCP Python SDK, whose tool list changes at run
time: calling `add_tool` with a `name` adds a tool of that name (it answers with a greeting) and
sends `notifications/tools/list_changed`. Speaks MCP on stdio; for tests/api/mcp_servers.rs.
"""

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("dynamic")


@server.tool()
async def add_tool(name: str, ctx: Context) -> str:
    """Adds a tool called `name` and announces the change."""

    def greet(who: str) -> str:
        return f"hello {who}, from {name}"

    server.add_tool(greet, name=name, description=f"Greets, as {name}.")
    await ctx.session.send_tool_list_changed()
    return f"added {name}"


if __name__ == "__main__":
    server.run("stdio")
