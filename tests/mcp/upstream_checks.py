"""Drives `toolhost serve --mcp stdio` whose config names an MCP server (the Python SDK's
MCPServer fixture, tests/mcp/upstream_server.py) beside a plugin, with the official Python
MCP client, and checks that the server's tools behave as a plugin's do: listed beside the
plugin's, approval by the risk of their annotations, structured results with their output
schema, a long result cut by the budget and read back whole, progress and cancellation
both ways, the server's question reaching this client, its list change reaching this
client, a crash mid-call that it comes back from, and `toolhost status` naming it. Run by
tests/it/mcp_servers.rs:

    upstream_checks.py --toolhost BIN --plugins DIR --control SOCK --work DIR --mode auto|legacy

The work folder holds `toolhost/config.toml` (XDG_CONFIG_HOME). Exits 0 when every check
passed; otherwise prints what failed and exits 1.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters

LIMIT = 90.0  # seconds any one wait may take before the check fails (a bound, not a speed target: a loaded 2-core CI machine took over 20 s)


def fail(message: str) -> None:
    raise AssertionError(message)


def text_of(result: types.CallToolResult) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


class Checks:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.approve = "accept"
        self.approvals: list[str] = []
        self.questions: list[str] = []
        self.list_changed = anyio.Event()
        self.log: list[str] = []

    def note(self, what: str) -> None:
        self.log.append(what)
        print(f"ok: {what}", flush=True)

    async def on_elicit(self, _context: object, params: types.ElicitRequestParams) -> types.ElicitResult:
        schema = getattr(params, "requested_schema", None) or {}
        if "name" in schema.get("properties", {}):
            # The MCP server's own question, relayed by toolhost.
            self.questions.append(params.message)
            return types.ElicitResult(action="accept", content={"name": "Ada"})
        # toolhost's approval of a call.
        self.approvals.append(params.message)
        if self.approve == "accept":
            return types.ElicitResult(action="accept", content={"remember": False})
        return types.ElicitResult(action=self.approve)

    async def on_sample(self, _context: object, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        asked = " ".join(m.content.text for m in params.messages if isinstance(m.content, types.TextContent))
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=f"sampled: {asked}"),
            model="checks-model",
        )

    async def on_message(self, message: object) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.list_changed.set()

    def client(self) -> Client:
        a = self.args
        server = StdioServerParameters(
            command=a.toolhost,
            args=["serve", "--mcp", "stdio", "--plugins", a.plugins, "--control", a.control],
            env={"XDG_CONFIG_HOME": a.work, "XDG_STATE_HOME": str(Path(a.work) / "state"), "TOOLHOST_LOG": os.environ.get("TOOLHOST_LOG", "warn")},
        )
        return Client(
            server,
            mode=a.mode,
            elicitation_callback=self.on_elicit,
            sampling_callback=self.on_sample,
            message_handler=self.on_message,
            read_timeout_seconds=LIMIT,
        )

    async def call(self, client: Client, name: str, arguments: dict, **kw: object) -> types.CallToolResult:
        with anyio.fail_after(LIMIT):
            return await client.call_tool(name, arguments, **kw)

    async def run(self) -> None:
        async with self.client() as client:
            await self.listing(client)
            await self.approval_by_risk(client)
            await self.invalid_arguments(client)
            await self.structured(client)
            await self.budget(client)
            await self.progress_and_cancel(client)
            await self.question(client)
            if client.protocol_version >= "2026-07-28":
                # A sessionless client hears list changes on a stream it asks for.
                async with client.listen(tools_list_changed=True) as subscription:

                    async def next_event() -> None:
                        with anyio.fail_after(LIMIT):
                            async for _ in subscription:
                                return

                    await self.list_change(client, next_event)
            else:

                async def changed() -> None:
                    with anyio.fail_after(LIMIT):
                        await self.list_changed.wait()

                await self.list_change(client, changed)
            await self.crash(client)
            self.status()

    async def listing(self, client: Client) -> None:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        for name in ["echo", "up_echo", "up_weather", "up_note", "up_remove"]:
            if name not in tools:
                fail(f"{name} should be listed beside the plugin's tools: {sorted(tools)}")
        schema = tools["up_weather"].output_schema or {}
        if "celsius" not in json.dumps(schema):
            fail(f"the server's output schema should be served: {schema}")
        self.note("the server's tools are listed beside the plugin's, with their output schema")

    async def approval_by_risk(self, client: Client) -> None:
        asked = len(self.approvals)
        result = await self.call(client, "up_echo", {"text": "hi"})
        if result.is_error or text_of(result) != "echo: hi" or len(self.approvals) != asked:
            fail(f"a readOnlyHint tool runs unasked: {result} {self.approvals}")
        result = await self.call(client, "up_note", {"text": "tea"})
        if result.is_error or text_of(result) != "noted tea" or len(self.approvals) != asked + 1:
            fail(f"a tool without hints is a write, asked once: {result} {self.approvals}")
        self.approve = "decline"
        result = await self.call(client, "up_remove", {"path": "/x"})
        self.approve = "accept"
        if not result.is_error or "removed" in text_of(result) or len(self.approvals) != asked + 2:
            fail(f"a destructiveHint tool is asked, and a refusal refuses it: {result}")
        result = await self.call(client, "echo", {"text": "plugin"})
        if result.is_error:
            fail(f"the plugin's own tool still works: {result}")
        self.note("approval follows the server's annotations (read runs, write and destructive ask)")

    async def invalid_arguments(self, client: Client) -> None:
        result = await self.call(client, "up_echo", {"text": 5})
        if not result.is_error or text_of(result).startswith("echo:"):
            fail(f"arguments that fail the server's schema are refused before it is called: {result}")
        self.note("arguments are checked against the server's schema before it is called")

    async def structured(self, client: Client) -> None:
        result = await self.call(client, "up_weather", {"city": "Oslo"})
        if result.is_error or result.structured_content != {"city": "Oslo", "celsius": 21.5}:
            fail(f"the structured result should pass through: {result}")
        self.note("a structured result passes through, checked against its schema")

    async def budget(self, client: Client) -> None:
        lines = 5000
        full = "\n".join(f"line {i} of the long result" for i in range(1, lines + 1))
        result = await self.call(client, "up_long", {"lines": lines})
        said = text_of(result)
        if result.is_error or "[toolhost:" not in said or len(said) >= len(full):
            fail(f"a long result should be cut by the budget: {said[-300:]}")
        links = [b for b in result.content if getattr(b, "type", "") == "resource_link"]
        if not links:
            fail(f"the cut result should link to its full text: {result.content[-1:]}")
        with anyio.fail_after(LIMIT):
            read = await client.read_resource(str(links[0].uri))
        whole = "".join(getattr(c, "text", "") for c in read.contents)
        if whole.rstrip("\n") != full:
            fail(f"the full text should read back whole ({len(whole)} of {len(full)} chars)")
        self.note("a long result is cut by the budget and its full text reads back")

    async def progress_and_cancel(self, client: Client) -> None:
        steps: list[tuple[float, float | None]] = []

        async def on_progress(progress: float, total: float | None, _message: str | None) -> None:
            steps.append((progress, total))

        marker = Path(self.args.work) / "markers" / "cancelled.txt"
        result = await self.call(
            client, "up_slow", {"steps": 3, "marker": str(marker)}, progress_callback=on_progress
        )
        if result.is_error or steps != [(1, 3), (2, 3), (3, 3)]:
            fail(f"the server's progress should reach the client: {steps} {result}")
        self.note("the server's progress reaches the client")
        started = anyio.Event()

        async def on_long_progress(_p: float, _t: float | None, _m: str | None) -> None:
            started.set()

        async with anyio.create_task_group() as group:

            async def long_call() -> None:
                await client.call_tool(
                    "up_slow", {"steps": 1000, "marker": str(marker)}, progress_callback=on_long_progress
                )

            group.start_soon(long_call)
            with anyio.fail_after(LIMIT):
                await started.wait()
            group.cancel_scope.cancel()
        with anyio.fail_after(LIMIT):
            while not (marker.exists() and marker.read_text() == "cancelled"):
                await anyio.sleep(0.05)
        self.note("a call the client cancels is cancelled at the server")

    async def question(self, client: Client) -> None:
        result = await self.call(client, "up_ask", {})
        if result.is_error or text_of(result) != "hello Ada" or self.questions[-1:] != ["What is your name?"]:
            fail(f"the server's question should reach the client and its answer the server: {result}")
        self.note("the server's question (elicitation) reaches the client")
        result = await self.call(client, "up_summarize", {"text": "a long day"})
        if result.is_error or text_of(result) != "summary: sampled: a long day":
            fail(f"the server's sampling request should reach the client's model: {result}")
        self.note("the server's sampling request reaches the client's model")

    async def list_change(self, client: Client, changed) -> None:
        result = await self.call(client, "up_grow", {})
        if result.is_error:
            fail(f"grow: {result}")
        await changed()
        with anyio.fail_after(LIMIT):
            while "up_grown" not in [t.name for t in (await client.list_tools()).tools]:
                await anyio.sleep(0.05)
        result = await self.call(client, "up_grown", {})
        if result.is_error or text_of(result) != "grown":
            fail(f"the tool the server added should work: {result}")
        self.note("the server's list change reaches the client, and its new tool works")

    async def crash(self, client: Client) -> None:
        result = await self.call(client, "up_crash", {})
        if not result.is_error or "went away during the call" not in text_of(result):
            fail(f"a crash mid-call should be an error that says so: {result}")
        with anyio.fail_after(LIMIT):
            while True:
                result = await client.call_tool("up_echo", {"text": "back"})
                if not result.is_error:
                    break
                if "is down" not in text_of(result) and "starting" not in text_of(result) and "went away" not in text_of(result):
                    fail(f"while it restarts, a call should say so: {result}")
                await anyio.sleep(0.05)
        if text_of(result) != "echo: back":
            fail(f"after the restart: {result}")
        self.note("a server that crashes mid-call fails that call, and comes back")

    def status(self) -> None:
        a = self.args
        out = subprocess.run(
            [a.toolhost, "status", "--json", "--control", a.control],
            capture_output=True,
            text=True,
            timeout=LIMIT,
            env={**os.environ, "XDG_CONFIG_HOME": a.work},
        )
        if out.returncode != 0:
            fail(f"toolhost status: {out.stderr}")
        status = json.loads(out.stdout)
        servers = status.get("mcp_servers", [])
        if len(servers) != 1 or servers[0]["name"] != "up" or servers[0]["state"] != "running":
            fail(f"status should show the server running: {servers}")
        if servers[0]["restarts"] < 1 or "up_echo" not in servers[0]["tools"]:
            fail(f"status should count its restart and list its tools: {servers}")
        self.note("status shows the server, its tools and its restart")


def main() -> int:
    parser = argparse.ArgumentParser()
    for flag in ["toolhost", "plugins", "control", "work", "mode"]:
        parser.add_argument("--" + flag, required=True)
    args = parser.parse_args()
    checks = Checks(args)
    try:
        anyio.run(checks.run)
    except BaseException as e:  # noqa: BLE001 - report everything, with what passed
        print(f"FAILED after {len(checks.log)} checks: {type(e).__name__}: {e}", flush=True)
        import traceback

        traceback.print_exc()
        return 1
    print(json.dumps({"passed": checks.log}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
