"""A question a 2026-07-28 client leaves unanswered: once `[mcp] client_answer_secs` pass,
the plugin is told nobody answered (its call ends in an error, which `toolhost status`
counts) and a retry with the old requestState is refused.

    python expiry_check.py --toolhost BIN --plugins DIR --work DIR

The work folder holds `toolhost/config.toml` (it is the server's XDG_CONFIG_HOME).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

LIMIT = 60.0


def fail(message: str) -> None:
    raise AssertionError(message)


async def main(args: argparse.Namespace) -> None:
    control = os.path.join(args.work, "control.sock")
    env = {**os.environ, "XDG_CONFIG_HOME": args.work, "TOOLHOST_LOG": "warn"}

    async def never(_context: object, params: types.ElicitRequestParams) -> types.ElicitResult:
        fail(f"the SDK answered on its own: {params}")

    server = StdioServerParameters(
        command=args.toolhost,
        args=["serve", "--mcp", "stdio", "--no-watch", "--plugins", args.plugins, "--control", control],
        env=env,
    )
    async with Client(server, elicitation_callback=never, read_timeout_seconds=LIMIT) as client:
        if client.protocol_version < "2026-07-28":
            fail(f"negotiated {client.protocol_version}")
        first = await client.session.call_tool(
            "clarify", {"question": "Still there?"}, allow_input_required=True
        )
        if not isinstance(first, types.InputRequiredResult) or not first.request_state:
            fail(f"expected an input-required result: {first}")
        print("ok: the question came back as an input-required result", flush=True)

        def clarify_errors() -> int:
            out = subprocess.run(
                [args.toolhost, "status", "--json", "--control", control],
                capture_output=True, text=True, timeout=LIMIT, env=env,
            )
            if out.returncode != 0:
                fail(f"toolhost status failed: {out.stderr}")
            tools = json.loads(out.stdout).get("tools", [])
            return sum(t.get("errors", 0) for t in tools if t.get("name") == "clarify")

        # Nobody answers: wait (bounded) for the plugin's call to end in an error.
        deadline = time.monotonic() + LIMIT
        while clarify_errors() < 1:
            if time.monotonic() > deadline:
                fail("the unanswered call did not end within the limit")
            await anyio.sleep(0.1)
        print("ok: the unanswered question ended the plugin's call in an error", flush=True)

        try:
            await client.session.call_tool(
                "clarify",
                {"question": "Still there?"},
                allow_input_required=True,
                input_responses={"toolhost_question": {"action": "accept", "content": {"answer": "late"}}},
                request_state=first.request_state,
            )
        except MCPError as e:
            if "requestState refused" not in str(e):
                fail(f"an expired state should be refused saying so: {e}")
        else:
            fail("an expired state was accepted")
        print("ok: the expired requestState is refused", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    for flag in ["toolhost", "plugins", "work"]:
        parser.add_argument("--" + flag, required=True)
    try:
        anyio.run(main, parser.parse_args())
    except BaseException as e:  # noqa: BLE001 - report it with what passed
        print(f"FAILED: {type(e).__name__}: {e}", flush=True)
        sys.exit(1)
