"""Drives `toolhost serve --mcp` with the official Python MCP SDK (PyPI `mcp` 2.x), the way
a real client does, and checks what it sees. Run by the Rust integration tests
(tests/it/mcp.rs), which build the plugins and pass the paths:

    client_checks.py --transport stdio|http --mode auto|legacy --plugins DIR
        --toolhost BIN --control SOCK [--url URL [--token TOKEN]] --echo-v2 SO --hello SO --work DIR

Exits 0 when every check passed; otherwise prints what failed and exits 1.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared._httpx_utils import create_mcp_http_client

LIMIT = 20.0  # seconds any one wait may take before the check fails


def fail(message: str) -> None:
    raise AssertionError(message)


def text_of(result: types.CallToolResult) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


class Checks:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.elicit_answer = "accept"
        self.elicitations: list[str] = []
        self.samples: list[str] = []
        self.roots_asked = 0
        self.urls: list[str] = []
        self.list_changed = anyio.Event()
        self.log: list[str] = []

    def note(self, what: str) -> None:
        self.log.append(what)
        print(f"ok: {what}", flush=True)

    async def on_elicit(
        self, _context: object, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        self.elicitations.append(params.message)
        if getattr(params, "url", None):
            # A page to open (URL elicitation): "opened" at once.
            self.urls.append(params.url)
            return types.ElicitResult(action="accept")
        schema = getattr(params, "requested_schema", None) or {}
        if self.elicit_answer == "accept" and "answer" in schema.get("properties", {}):
            # A plugin's own question (clarify), not an approval.
            return types.ElicitResult(action="accept", content={"answer": "blue"})
        if self.elicit_answer == "accept" and "name" in schema.get("properties", {}):
            # The conformance fixture's question for a name.
            return types.ElicitResult(action="accept", content={"name": "Ada"})
        if self.elicit_answer == "accept":
            return types.ElicitResult(action="accept", content={"remember": False})
        return types.ElicitResult(action=self.elicit_answer)

    async def on_roots(self, _context: object) -> types.ListRootsResult:
        self.roots_asked += 1
        return types.ListRootsResult(roots=[types.Root(uri="file:///checks/root", name="checks")])

    async def several_questions(self, client: Client) -> None:
        # The conformance fixture asks a form, the model and the roots at once: under
        # 2026-07-28 in one input-required result, before as three server requests.
        asked = self.roots_asked
        result = await client.call_tool("test_input_required_result_multiple_inputs", {})
        said = text_of(result)
        if result.is_error or "Ada" not in said or "sampled: Generate a greeting" not in said:
            fail(f"the three answers should reach the plugin: {result}")
        if "1 roots" not in said or self.roots_asked != asked + 1:
            fail(f"the client's roots should reach the plugin: {result}")
        result = await client.call_tool("test_input_required_result_list_roots", {})
        if result.is_error or "file:///checks/root" not in text_of(result):
            fail(f"ctx.roots() should return the client's roots: {result}")
        self.note("a plugin's form, sampling and roots questions at once, and its roots")
        result = await client.call_tool("toolhost_url_elicitation", {})
        if result.is_error or text_of(result) != "signed in":
            fail(f"the page to open should reach the client as URL elicitation: {result}")
        if self.urls[-1:] != ["https://example.com/sign-in"]:
            fail(f"the client was not asked to open the page: {self.urls}")
        self.note("a plugin's page to open arrives as URL elicitation")

    async def on_message(self, message: object) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.list_changed.set()

    def client(self, elicit: bool = True, control: str | None = None) -> Client:
        a = self.args
        if a.transport == "stdio":
            server: object = StdioServerParameters(
                command=a.toolhost,
                args=[
                    "serve",
                    "--mcp",
                    "stdio",
                    "--plugins",
                    a.plugins,
                    "--control",
                    control or a.control,
                ]
                + (["--isolate"] if a.isolate else []),
                env={"XDG_CONFIG_HOME": a.work, "TOOLHOST_LOG": "warn"},
            )
        elif a.token:
            # The host needs a bearer token on every request.
            server = streamable_http_client(
                a.url,
                http_client=create_mcp_http_client(headers={"Authorization": f"Bearer {a.token}"}),
            )
        else:
            server = a.url
        return Client(
            server,
            mode=a.mode,
            elicitation_callback=self.on_elicit if elicit else None,
            sampling_callback=self.on_sample,
            list_roots_callback=self.on_roots,
            message_handler=self.on_message,
            read_timeout_seconds=LIMIT,
        )

    async def run(self) -> None:
        async with self.client() as client:
            version = client.protocol_version
            modern = version >= "2026-07-28"
            if (self.args.mode == "legacy") == modern:
                fail(f"mode {self.args.mode} negotiated protocol {version}")
            self.note(f"connected, protocol {version}")
            self.modern = modern
            await self.list_tools(client)
            await self.call_echo(client)
            await self.outcomes(client)
            await self.errors(client)
            await self.approval(client)
            await self.without_elicitation()
            await self.cancel(client)
            await self.ask_user(client)
            await self.sampling(client)
            await self.several_questions(client)
            if modern:
                await self.request_states(client)
            if modern:
                async with client.listen(tools_list_changed=True) as subscription:
                    await self.reload(client, lambda: self.next_event(subscription))
            else:
                await self.reload(client, self.wait_list_changed)

    async def list_tools(self, client: Client) -> None:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        for name in ["echo", "risky_write", "wait_cancel", "build_version"]:
            if name not in tools:
                fail(f"tools/list lacks {name}: {sorted(tools)}")
        for hidden in ["risky_deny", "needs_env", "needs_program"]:
            if hidden in tools:
                fail(f"tools/list shows {hidden}, which is denied or unavailable")
        echo = tools["echo"]
        if echo.annotations is None or echo.annotations.read_only_hint is not True:
            fail(f"echo (read) should be readOnlyHint: {echo.annotations}")
        write = tools["risky_write"]
        ann = write.annotations
        if ann is None or ann.read_only_hint is not False or ann.destructive_hint is not False:
            fail(f"risky_write (write) annotations wrong: {ann}")
        meta = write.meta or {}
        if meta.get("toolhost/risk") != "write":
            fail(f"risky_write _meta lacks the exact risk: {meta}")
        if echo.input_schema.get("type") != "object":
            fail(f"echo inputSchema: {echo.input_schema}")
        self.note(f"tools/list: {len(tools)} tools, annotations and _meta risk")

    async def call_echo(self, client: Client) -> None:
        result = await client.call_tool("echo", {"text": "hello over MCP"})
        if result.is_error or text_of(result) != "hello over MCP":
            fail(f"echo returned {result}")
        self.note("tools/call echo")

    async def outcomes(self, client: Client) -> None:
        """Structured results (the SDK validates them against the listed outputSchema),
        details under _meta, content blocks, and a result that breaks its schema."""
        tools = {t.name: t for t in (await client.list_tools()).tools}
        weather = tools.get("weather")
        if weather is None or not weather.output_schema:
            fail(f"weather should list an outputSchema: {weather}")
        props = weather.output_schema.get("properties", {})
        if weather.output_schema.get("type") != "object" or "celsius" not in props:
            fail(f"weather's outputSchema: {weather.output_schema}")
        if tools["echo"].output_schema is not None:
            fail(f"echo declares no output schema: {tools['echo'].output_schema}")
        result = await client.call_tool("weather", {"city": "Oslo"})
        expected = {"city": "Oslo", "celsius": 21.5, "conditions": "sunny"}
        if result.is_error or result.structured_content != expected:
            fail(f"weather's structuredContent: {result}")
        if json.loads(text_of(result)) != expected:
            fail(f"weather's text should be the JSON of its structured result: {result}")
        result = await client.call_tool("bad_weather", {})
        if not result.is_error or "/celsius" not in text_of(result):
            fail(f"a result that breaks its outputSchema should be an error naming the field: {result}")
        if result.structured_content is not None:
            fail(f"an error result carries no structuredContent: {result}")
        result = await client.call_tool("diagnose", {"file": "src/lib.rs"})
        details = (result.meta or {}).get("toolhost/details") or {}
        diagnostics = details.get("diagnostics") or [{}]
        if result.is_error or diagnostics[0].get("code") != "E0308":
            fail(f"diagnose's details should be under _meta['toolhost/details']: {result}")
        if "detail-marker" in text_of(result):
            fail(f"details must not be in the content: {result}")
        result = await client.call_tool("chart", {})
        kinds = [block.type for block in result.content]
        if kinds != ["text", "image"]:
            fail(f"chart's content blocks: {kinds}: {result}")
        # Over the output budget (30,000 characters by default): the call still did what was
        # asked, so it is no error. The text the model reads is cut, with a link to the
        # whole; a tool with an outputSchema owes the client its value whole, so
        # structuredContent is all of it (the SDK validates it against the schema).
        result = await client.call_tool("series", {"count": 20000})
        if result.is_error:
            fail(f"a result over the budget is no error: {str(result)[:500]}")
        if len(text_of(result)) > 31000:
            fail(f"a text over the budget was not held to it: {len(text_of(result))} characters")
        values = (result.structured_content or {}).get("values") or []
        if len(values) != 20000:
            fail(f"the structured value goes out whole: {len(values)} values")
        if not any(getattr(block, "type", "") == "resource_link" for block in result.content):
            fail(f"a cut result links to the whole: {str(result)[:500]}")
        self.note("structured results, outputSchema, details in _meta, content blocks")

    async def errors(self, client: Client) -> None:
        result = await client.call_tool("panic_in_call", {})
        if not result.is_error or "panicked" not in text_of(result):
            fail(f"a panicking tool should be an isError result: {result}")
        result = await client.call_tool("echo", {"text": 42})
        if not result.is_error or "echo" not in text_of(result):
            fail(f"invalid arguments should be an isError result: {result}")
        try:
            await client.call_tool("no_such_tool", {})
        except Exception as e:  # the spec: unknown tool is a protocol error
            if "no_such_tool" not in str(e):
                fail(f"unknown tool error does not name it: {e}")
        else:
            fail("calling an unknown tool should be a protocol error")
        self.note("error results: tool failure, invalid arguments, unknown tool")

    async def ask_user(self, client: Client) -> None:
        # The clarify plugin's question reaches this client as an elicitation, and the
        # answer reaches the plugin (in a worker, through the host).
        asked = len(self.elicitations)
        result = await client.call_tool("clarify", {"question": "Which colour?"})
        if result.is_error or text_of(result) != "blue":
            fail(f"clarify should return the elicited answer: {result}")
        if len(self.elicitations) != asked + 1 or "Which colour?" not in self.elicitations[-1]:
            fail(f"the plugin's question did not arrive as an elicitation: {self.elicitations}")
        self.note("a plugin's ask_user arrives as an elicitation and its answer returns")

    async def on_sample(
        self, _context: object, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        asked = " ".join(
            m.content.text for m in params.messages if isinstance(m.content, types.TextContent)
        )
        self.samples.append(asked)
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=f"sampled: {asked}"),
            model="checks-model",
        )

    async def sampling(self, client: Client) -> None:
        # The conformance fixture's test_sampling asks the client's model; under
        # 2026-07-28 as an input-required result, before as a server request.
        result = await client.call_tool("test_sampling", {"prompt": "Say hi"})
        if result.is_error or text_of(result) != "LLM response: sampled: Say hi":
            fail(f"test_sampling should return the sampled text: {result}")
        if self.samples[-1:] != ["Say hi"]:
            fail(f"the sampling request did not reach the client: {self.samples}")
        self.note("a plugin's sampling request reaches the client's model and returns")

    async def request_states(self, client: Client) -> None:
        # Driven by hand: the question comes back as an input-required result whose state
        # names the waiting call; a tampered state, one for other arguments and a replay
        # are refused, and the right answer resumes the same call.
        session = client.session
        first = await session.call_tool(
            "clarify", {"question": "Which shade?"}, allow_input_required=True
        )
        if not isinstance(first, types.InputRequiredResult) or not first.request_state:
            fail(f"clarify should return an input-required result: {first}")
        requests = first.input_requests or {}
        if list(requests) != ["toolhost_question"] or "Which shade?" not in str(requests):
            fail(f"the input request should carry the plugin's question: {requests}")
        state = first.request_state
        answer = {"toolhost_question": {"action": "accept", "content": {"answer": "teal"}}}

        async def refused(args: dict, with_state: str, why: str) -> None:
            try:
                await session.call_tool(
                    "clarify",
                    args,
                    allow_input_required=True,
                    input_responses=answer,
                    request_state=with_state,
                )
            except MCPError as e:
                if "requestState refused" not in str(e) or why not in str(e):
                    fail(f"a bad requestState should be refused saying why ({why}): {e}")
            else:
                fail(f"a bad requestState was accepted ({why})")

        await refused({"question": "Which shade?"}, state + "0", "did not issue it")
        await refused({"question": "Another?"}, state, "another call")
        done = await session.call_tool(
            "clarify",
            {"question": "Which shade?"},
            allow_input_required=True,
            input_responses=answer,
            request_state=state,
        )
        if isinstance(done, types.InputRequiredResult) or done.is_error or text_of(done) != "teal":
            fail(f"the answered call should return the answer: {done}")
        await refused({"question": "Which shade?"}, state, "used already")
        self.note("requestState: tampered, replayed and other-call states refused; the answer resumes the call")

    async def approval(self, client: Client) -> None:
        ran = Path(self.args.work) / "risky-write-ran"
        ran.unlink(missing_ok=True)
        self.elicit_answer = "decline"
        result = await client.call_tool("risky_write", {"marker": str(ran)})
        if not result.is_error or "declined" not in text_of(result):
            fail(f"a declined write tool should be refused: {result}")
        if ran.exists():
            fail("a declined write tool ran")
        if not self.elicitations or "risky_write" not in self.elicitations[-1]:
            fail(f"no approval question naming the tool was asked: {self.elicitations}")
        self.elicit_answer = "accept"
        asked = len(self.elicitations)
        result = await client.call_tool("risky_write", {"marker": str(ran)})
        if result.is_error or not ran.exists():
            fail(f"an approved write tool should run: {result}")
        if len(self.elicitations) != asked + 1:
            fail("approving did not go through an elicitation")
        self.note("approval by elicitation: declined, then approved")
        # Status counts what happened: two calls, one refused. On 2026-07-28 each call's
        # first leg (input-required: the question, answered by calling again) is pending,
        # not a failed call.
        stats = [t for t in self.status()["tools"] if t["name"] == "risky_write"]
        want = (2, 1, 2 if self.modern else 0)
        got = (stats[0]["calls"], stats[0]["errors"], stats[0].get("pending")) if stats else None
        if got != want:
            fail(f"status of risky_write: (calls, errors, pending) {got}, not {want}")
        self.note("status counts an input-required leg as pending, not failed")

    async def without_elicitation(self) -> None:
        ran = Path(self.args.work) / "risky-write-unasked"
        ran.unlink(missing_ok=True)
        async with self.client(elicit=False, control=self.args.control + "-2") as client:
            result = await client.call_tool("risky_write", {"marker": str(ran)})
        message = text_of(result)
        if not result.is_error or "without_elicitation" not in message or ran.exists():
            fail(f"a client without elicitation should get a refusal saying how to allow: {result}")
        self.note("no elicitation: refused with how to allow it")

    def status(self) -> dict:
        out = subprocess.run(
            [self.args.toolhost, "status", "--json", "--control", self.args.control],
            capture_output=True,
            text=True,
            timeout=LIMIT,
            env={**os.environ, "XDG_CONFIG_HOME": self.args.work},
        )
        if out.returncode != 0:
            fail(f"toolhost status failed: {out.stderr}")
        return json.loads(out.stdout)

    def status_shows_client(self) -> None:
        clients = self.status().get("mcp_clients", [])
        mine = [c for c in clients if c["transport"] == self.args.transport]
        if not mine or not mine[0]["client_name"] or not mine[0]["protocol_version"]:
            fail(f"toolhost status does not list this client: {clients}")
        self.note(f"status lists the client: {mine[0]['client_name']} {mine[0]['protocol_version']}")

    async def cancel(self, client: Client) -> None:
        work = Path(self.args.work)
        started, marker = work / "cancel-started", work / "cancel-marker"
        for f in (started, marker):
            f.unlink(missing_ok=True)
        async with anyio.create_task_group() as group:

            async def call() -> None:
                await client.call_tool(
                    "wait_cancel", {"marker": str(marker), "started": str(started)}
                )

            group.start_soon(call)
            await self.wait_for(started.exists, "the slow call to start")
            group.cancel_scope.cancel()
        await self.wait_for(marker.exists, "the plugin to see its cancel signal")
        seen = marker.read_text()
        if "is_cancelled=true" not in seen:
            fail(f"the plugin saw: {seen}")
        # The connection still serves.
        result = await client.call_tool("echo", {"text": "after cancel"})
        if text_of(result) != "after cancel":
            fail(f"echo after cancel: {result}")
        self.note("cancel reached the plugin")

    async def wait_for(self, condition, what: str) -> None:
        with anyio.fail_after(LIMIT):
            while not condition():
                await anyio.sleep(0.02)

    async def wait_list_changed(self) -> None:
        with anyio.fail_after(LIMIT):
            await self.list_changed.wait()
        self.list_changed = anyio.Event()

    async def next_event(self, subscription) -> None:
        with anyio.fail_after(LIMIT):
            async for _event in subscription:
                return
        fail("the subscriptions/listen stream ended")

    async def reload(self, client: Client, wait) -> None:
        plugins = Path(self.args.plugins)
        self.status_shows_client()
        before = text_of(await client.call_tool("build_version", {}))
        if before != "v1":
            fail(f"build_version before the reload: {before}")
        # Replace the echo plugin with its v2 build the way installers should: by rename.
        tmp = plugins / ".libfixture_echo.so.tmp"
        shutil.copyfile(self.args.echo_v2, tmp)
        replaced = time.monotonic()
        os.replace(tmp, plugins / "libfixture_echo.so")
        await wait()
        self.note(f"list_changed after a replace, {1000 * (time.monotonic() - replaced):.0f} ms")
        after = text_of(await client.call_tool("build_version", {}))
        if after != "v2":
            fail(f"build_version after list_changed: {after}")
        self.note("the new version answers")
        # A new plugin: its tools appear in tools/list and can be called.
        tmp = plugins / ".libhello_tools.so.tmp"
        shutil.copyfile(self.args.hello, tmp)
        os.replace(tmp, plugins / "libhello_tools.so")
        await wait()
        names = {t.name for t in (await client.list_tools()).tools}
        if "greet" not in names:
            fail(f"tools/list after list_changed lacks the new plugin's greet: {sorted(names)}")
        result = await client.call_tool("greet", {"name": "MCP"})
        if result.is_error or "MCP" not in text_of(result):
            fail(f"greet: {result}")
        self.note("a new plugin's tool is listed and callable")
        # Its countdown reports progress, which arrives for a call with a progress token.
        steps: list[tuple[float, float | None]] = []

        async def on_progress(progress: float, total: float | None, _message: str | None) -> None:
            steps.append((progress, total))

        result = await client.call_tool(
            "countdown", {"from": 3, "step_ms": 10}, progress_callback=on_progress
        )
        if result.is_error or text_of(result) != "3 2 1 0":
            fail(f"countdown: {result}")
        if [p for p, _ in steps] != [0.0, 1.0, 2.0, 3.0] or steps[0][1] != 3.0:
            fail(f"progress notifications: {steps}")
        self.note("progress notifications from the plugin")


def main() -> int:
    parser = argparse.ArgumentParser()
    for flag in ["transport", "mode", "plugins", "toolhost", "control", "echo_v2", "hello", "work"]:
        parser.add_argument("--" + flag.replace("_", "-"), required=True)
    parser.add_argument("--url")
    parser.add_argument("--token")
    parser.add_argument("--isolate", action="store_true", help="every plugin in a worker process")
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
