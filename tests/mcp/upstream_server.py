"""An MCP server written with the Python SDK's MCPServer (FastMCP before mcp 2.x), for the
tests of MCP servers as toolhost's tool sources (tests/it/mcp_servers.rs). Its tools cover
what toolhost must carry across: each risk annotation, a structured result, a long text,
progress, cancellation, a question for the user, a list change, a crash mid-call, and the
sandbox a stdio server runs in (a write and a TCP connection it should be refused).

    upstream_server.py stdio
    upstream_server.py http PORT
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys

from pydantic import BaseModel

import mcp_types as types
from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("toolhost-upstream-fixture", version="1.0.0")


class Weather(BaseModel):
    city: str
    celsius: float


class Name(BaseModel):
    name: str


@server.tool(annotations=types.ToolAnnotations(read_only_hint=True))
def echo(text: str) -> str:
    """Says the text back."""
    return f"echo: {text}"


@server.tool(annotations=types.ToolAnnotations(destructive_hint=True))
def remove(path: str) -> str:
    """Pretends to delete a file (destructive)."""
    return f"removed {path}"


@server.tool(annotations=types.ToolAnnotations(open_world_hint=True))
def lookup(query: str) -> str:
    """Pretends to search the web (network)."""
    return f"found {query}"


@server.tool()
def note(text: str) -> str:
    """Keeps a note (no annotations: write)."""
    return f"noted {text}"


@server.tool(annotations=types.ToolAnnotations(read_only_hint=True))
def weather(city: str) -> Weather:
    """The weather in a city, as a structured result."""
    return Weather(city=city, celsius=21.5)


@server.tool(annotations=types.ToolAnnotations(read_only_hint=True))
def long(lines: int) -> str:
    """A text of many numbered lines."""
    return "\n".join(f"line {i} of the long result" for i in range(1, lines + 1))


@server.tool(annotations=types.ToolAnnotations(read_only_hint=True))
async def slow(steps: int, marker: str, ctx: Context) -> str:
    """Reports progress once per step; writes `cancelled` to the marker file if cancelled."""
    try:
        for step in range(1, steps + 1):
            await ctx.report_progress(step, steps, f"step {step}")
            await asyncio.sleep(0.05 if steps < 100 else 0.2)
    except asyncio.CancelledError:
        with open(marker, "w") as f:
            f.write("cancelled")
        raise
    return f"done after {steps} steps"


@server.tool(annotations=types.ToolAnnotations(read_only_hint=True))
async def ask(ctx: Context) -> str | types.InputRequiredResult:
    """Asks the user for a name: a server request under 2025-11-25, an input-required
    result under 2026-07-28 (which has no server requests)."""
    if (ctx.protocol_version or "") < "2026-07-28":
        answer = await ctx.elicit("What is your name?", Name)
        if answer.action == "accept" and answer.data is not None:
            return f"hello {answer.data.name}"
        return f"no name ({answer.action})"
    given = (ctx.input_responses or {}).get("name")
    if given is None:
        return types.InputRequiredResult(
            input_requests={
                "name": types.ElicitRequest(
                    params=types.ElicitRequestFormParams(
                        message="What is your name?",
                        requested_schema={
                            "type": "object",
                            "properties": {"name": {"type": "string"}},
                            "required": ["name"],
                        },
                    )
                )
            }
        )
    given = given if isinstance(given, dict) else given.model_dump(by_alias=True)
    if given.get("action") == "accept":
        return f"hello {(given.get('content') or {}).get('name')}"
    return f"no name ({given.get('action')})"


@server.tool(annotations=types.ToolAnnotations(read_only_hint=True))
async def summarize(text: str, ctx: Context) -> str | types.InputRequiredResult:
    """Asks the client's model for a summary: a sampling request under 2025-11-25, an
    input-required result under 2026-07-28."""
    message = types.SamplingMessage(role="user", content=types.TextContent(type="text", text=text))
    if (ctx.protocol_version or "") < "2026-07-28":
        result = await ctx.session.create_message([message], max_tokens=50)
        return f"summary: {getattr(result.content, 'text', '')}"
    given = (ctx.input_responses or {}).get("summary")
    if given is None:
        return types.InputRequiredResult(
            input_requests={
                "summary": types.CreateMessageRequest(
                    params=types.CreateMessageRequestParams(messages=[message], max_tokens=50)
                )
            }
        )
    given = given if isinstance(given, dict) else given.model_dump(by_alias=True)
    return f"summary: {(given.get('content') or {}).get('text')}"


@server.tool(annotations=types.ToolAnnotations(read_only_hint=True))
async def grow(ctx: Context) -> str:
    """Adds the tool `grown` and says the list changed."""

    def grown() -> str:
        """A tool that appeared."""
        return "grown"

    server.add_tool(grown, annotations=types.ToolAnnotations(read_only_hint=True))
    if (ctx.protocol_version or "") < "2026-07-28":
        await ctx.session.send_tool_list_changed()
    else:
        # 2026-07-28: to the `subscriptions/listen` streams that asked for it.
        await ctx.notify_tools_changed()
    return "grew"


@server.tool(annotations=types.ToolAnnotations(read_only_hint=True))
def crash() -> str:
    """Ends the server's process in the middle of the call."""
    os._exit(3)


@server.tool(annotations=types.ToolAnnotations(read_only_hint=True))
def daemon() -> str:
    """Starts `sleep 300` in a session of its own (out of the server's process group) and
    says its process id as the host sees it (`/proc/self` names it so: `/proc` is the
    host's, while the server may be in a PID namespace of its own)."""
    import subprocess
    import sys

    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os; print(os.readlink('/proc/self'), flush=True); "
            "os.execv('/bin/sleep', ['sleep', '300'])",
        ],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    return child.stdout.readline().strip()


@server.tool(annotations=types.ToolAnnotations(read_only_hint=True))
def hog(mb: int) -> str:
    """Allocates and touches `mb` MiB."""
    block = bytearray(mb << 20)
    for i in range(0, len(block), 4096):
        block[i] = 1
    return f"held {mb} MiB"


@server.tool(annotations=types.ToolAnnotations(read_only_hint=True))
def try_write(path: str) -> str:
    """Tries to write a file; says what happened."""
    try:
        with open(path, "w") as f:
            f.write("written by the MCP server")
        return "wrote"
    except OSError as e:
        return f"refused: {e.strerror}"


@server.tool(annotations=types.ToolAnnotations(read_only_hint=True))
def try_connect(port: int) -> str:
    """Tries a TCP connection to 127.0.0.1:PORT; says what happened."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            return "connected"
    except OSError as e:
        return f"refused: {e.strerror or e}"


@server.tool(annotations=types.ToolAnnotations(read_only_hint=True))
def try_control(path: str) -> str:
    """Connects to a Unix socket (the host's control socket) and says what it answered."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect(path)
            data = b""
            try:
                while True:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    data += chunk
            except socket.timeout:
                return "admitted: no refusal within 5 s"
            return "answered: " + data.decode(errors="replace")
    except OSError as e:
        return f"refused: {e.strerror or e}"


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
