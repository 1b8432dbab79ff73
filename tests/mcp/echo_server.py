"""The Python SDK's server with one echo tool, on stdio: the baseline the MCP benchmark
(cli/benches/mcp.rs) compares toolhost with."""

from mcp.server.mcpserver import MCPServer

server = MCPServer("python-echo")


@server.tool()
def echo(text: str) -> str:
    """Returns `text` unchanged."""
    return text


if __name__ == "__main__":
    server.run("stdio")
