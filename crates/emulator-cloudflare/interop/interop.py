"""Runs the OpenAI Agents SDK's Cloudflare sandbox client (openai-agents on PyPI, written by
OpenAI against the @cloudflare/sandbox bridge Worker) against the execseam emulator.

Environment: CLOUDFLARE_SANDBOX_WORKER_URL and CLOUDFLARE_SANDBOX_API_KEY (the SDK reads the key
from that variable itself). Prints one `ok <what>` line per check; any failure raises.
"""

import asyncio
import io
import os
import sys
import tarfile

import aiohttp
from agents.extensions.sandbox.cloudflare import (
    CloudflareSandboxClient,
    CloudflareSandboxClientOptions,
)
from agents.sandbox.errors import WorkspaceReadNotFoundError


def ok(what):
    print(f"ok {what}", flush=True)


async def sse_exec(http, url, argv, session=None, **extra):
    """POST /exec and decode the SSE stream by hand: (stdout, stderr, terminal event, payload)."""
    import base64
    import json

    headers = {"Session-Id": session} if session else {}
    async with http.post(url, json={"argv": argv, **extra}, headers=headers) as resp:
        assert resp.status == 200, resp.status
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        text = (await resp.read()).decode()
    return decode_sse(text)


def decode_sse(text, events=None):
    import base64
    import json

    out, err, terminal = b"", b"", None
    for block in text.split("\n\n"):
        if not block:
            continue
        lines = block.split("\n")
        event = lines[0].removeprefix("event: ")
        data = "\n".join(l.removeprefix("data: ") for l in lines[1:])
        assert terminal is None, f"an event after the terminal one: {block!r}"
        if events is not None and event in ("stdout", "stderr"):
            events.append((event, base64.b64decode(data)))
        if event == "stdout":
            out += base64.b64decode(data)
        elif event == "stderr":
            err += base64.b64decode(data)
        else:
            terminal = (event, json.loads(data))
    return out, err, terminal


def check(cond, what, detail=""):
    if not cond:
        raise AssertionError(f"{what}: {detail}")
    ok(what)


async def main():
    url = os.environ["CLOUDFLARE_SANDBOX_WORKER_URL"]
    client = CloudflareSandboxClient(exec_timeout_s=30, request_timeout_s=30)
    session = await client.create(options=CloudflareSandboxClientOptions(worker_url=url))
    sandbox_id = session._inner.state.sandbox_id
    check(
        len(sandbox_id) == 26 and all(c in "abcdefghijklmnopqrstuvwxyz234567" for c in sandbox_id),
        "create returns a 26-character base32 sandbox id",
        sandbox_id,
    )
    await session.start()
    ok("start (mkdir -p /workspace through exec)")

    r = await session.exec("printf out; printf err >&2; exit 3")
    check(
        (r.stdout, r.stderr, r.exit_code) == (b"out", b"err", 3),
        "exec keeps stdout, stderr and the exit code apart",
        repr((r.stdout, r.stderr, r.exit_code)),
    )

    r = await session.exec("printf", "%s|", "a b", "it's", "$HOME", shell=False)
    check(
        r.stdout == b"a b|it's|$HOME|" and r.exit_code == 0,
        "argv is quoted by the bridge (shellQuote) and reaches the program exactly",
        repr(r.stdout),
    )

    r = await session.exec("pwd; printf '%s' \"$HOME\"")
    check(r.stdout == b"/workspace\n/root", "default cwd /workspace and HOME /root", repr(r.stdout))

    payload = bytes(range(256)) * 4
    await session.write("/workspace/dir/data.bin", io.BytesIO(payload))
    ok("write (PUT /file) of 1024 binary bytes")
    r = await session.exec("od -An -tx1 -v /workspace/dir/data.bin | tr -d ' \\n' | head -c 64")
    check(
        r.stdout == payload[:32].hex().encode(),
        "a file written through the files API is seen by commands at the same path",
        repr(r.stdout),
    )
    data = (await session.read("/workspace/dir/data.bin")).read()
    check(data == payload, "read (GET /file) returns the raw bytes", f"{len(data)} bytes")

    r = await session.exec("printf 'from a command' > /workspace/made.txt")
    data = (await session.read("/workspace/made.txt")).read()
    check(data == b"from a command", "a file made by a command is read through the files API", repr(data))

    try:
        await session.read("/workspace/no-such-file")
    except WorkspaceReadNotFoundError:
        ok("a missing file is WorkspaceReadNotFoundError (404 workspace_read_not_found)")
    else:
        raise AssertionError("reading a missing file succeeded")

    entries = await session.ls("/workspace/dir")
    names = sorted(e.path.rsplit("/", 1)[-1] for e in entries)
    check("data.bin" in names, "ls through exec", repr(names))

    check(await session.running(), "running is true")

    archive = await session.persist_workspace()
    tar = archive.read()
    check(len(tar) > 1024, "persist_workspace returns a tar of /workspace", f"{len(tar)} bytes")
    await session.exec("rm -rf /workspace/dir /workspace/made.txt")
    await session.hydrate_workspace(io.BytesIO(tar))
    data = (await session.read("/workspace/dir/data.bin")).read()
    check(data == payload, "hydrate_workspace restores it", f"{len(data)} bytes")

    # Wire-level checks with the SDK's own HTTP stack: an SSE error event and the JSON errors.
    key = os.environ["CLOUDFLARE_SANDBOX_API_KEY"]
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {key}"}) as http:
        async with http.post(f"{url}/v1/sandbox/{sandbox_id}/exec", json={"argv": []}) as resp:
            body = await resp.json()
            check(
                resp.status == 400 and body == {"error": "argv must be a non-empty array", "code": "invalid_request"},
                "empty argv is 400 invalid_request",
                f"{resp.status} {body}",
            )
        async with http.post(
            f"{url}/v1/sandbox/{sandbox_id}/exec", json={"argv": ["true"], "cwd": "/etc"}
        ) as resp:
            body = await resp.json()
            check(resp.status == 403 and body["code"] == "invalid_request", "cwd outside /workspace is 403", f"{resp.status} {body}")
        async with http.get(f"{url}/v1/sandbox/{sandbox_id}/file/etc/passwd") as resp:
            check(resp.status == 403, "file path outside /workspace is 403", str(resp.status))
        exec_url = f"{url}/v1/sandbox/{sandbox_id}/exec"
        out, _, term = await sse_exec(http, exec_url, ["printf", "a\\377b"])
        check(
            out == "a\ufffdb".encode() and term == ("exit", {"exit_code": 0}),
            "non-UTF-8 output arrives as U+FFFD (the bridge decodes output as text)",
            repr((out, term)),
        )
        # persist?excludes= (routes.ts: `tar cf … --exclude './<rel>' -C /workspace .`), what the
        # execseam adapter sends to leave its temp dir out of a snapshot.
        await session.exec("mkdir -p /workspace/skipme && printf x > /workspace/skipme/f && printf y > /workspace/kept")
        async with http.post(f"{url}/v1/sandbox/{sandbox_id}/persist", params={"excludes": "skipme"}) as resp:
            status, tar = resp.status, await resp.read()
        names = tarfile.open(fileobj=io.BytesIO(tar)).getnames()
        check(
            status == 200 and "./kept" in names and not any(n.startswith("./skipme") for n in names),
            "persist?excludes= leaves the path out of the tar",
            repr((status, names[:8])),
        )
        async with http.post(f"{url}/v1/sandbox/{sandbox_id}/session", json={"id": "interop", "env": {"GREETING": "hi"}}) as resp:
            body = await resp.json()
            check(resp.status == 200 and body == {"id": "interop"}, "session create", f"{resp.status} {body}")
        # The real bridge always runs exec on the container's streaming path, which runs a
        # session command in the background of the session's shell (container session.ts
        # buildFIFOScript(isBackground=true); Cloudflare's docs/SESSION_EXECUTION.md: Background,
        # "State Persists? No"): cd, export and functions do not persist, the creation-time env
        # and cwd apply (research note cf-vercel-modal-nf.md, correction "Cloudflare bridge
        # sessions"; the bridge's exec route in @cloudflare/sandbox 0.12.10 dist/bridge/index.js).
        async with http.post(f"{url}/v1/sandbox/{sandbox_id}/session", json={"id": "placed", "cwd": "/workspace/dir"}) as resp:
            check(resp.status == 200 and (await resp.json()) == {"id": "placed"}, "session create with a cwd")
        out, _, term = await sse_exec(http, exec_url, ["pwd"], session="placed")
        check(out == b"/workspace/dir\n", "a session's creation-time cwd applies", repr((out, term)))
        await sse_exec(http, exec_url, ["bash", "-c", "true"], session="interop")
        out, _, term = await sse_exec(http, exec_url, ["cd", "/tmp"], session="interop")
        out, _, term = await sse_exec(http, exec_url, ["export", "LEVEL=2"], session="interop")
        out, _, term = await sse_exec(http, exec_url, ["bash", "-c", "f() { :; }"], session="interop")
        out, _, term = await sse_exec(http, exec_url, ["bash", "-c", 'printf "%s %s %s %s" "$PWD" "$GREETING" "${LEVEL-unset}" "$(type -t f || echo nofunc)"'], session="interop")
        check(
            out == b"/workspace hi unset nofunc\n",
            "a session applies its creation-time env; cd, export and functions do not persist",
            repr((out, term)),
        )
        out, _, term = await sse_exec(http, exec_url, ["bash", "-c", "exit 3"], session="interop")
        check(term == ("exit", {"exit_code": 3}), "exit in a session command is its exit code", repr(term))
        # Line by line, each line with a newline; a final partial line gains one.
        async with http.post(exec_url, json={"argv": ["bash", "-c", "printf 'a\\nb\\nc'; printf 'e1\\ne2' >&2"]}, headers={"Session-Id": "interop"}) as resp:
            events = []
            out, err, term = decode_sse((await resp.read()).decode(), events)
        check(
            [e for e in events if e[0] == "stdout"] == [("stdout", b"a\n"), ("stdout", b"b\n"), ("stdout", b"c\n")]
            and err == b"e1\ne2\n" and term == ("exit", {"exit_code": 0}),
            "session output is re-emitted line by line with a trailing newline",
            repr((events, term)),
        )
        async with http.post(f"{url}/v1/sandbox/{sandbox_id}/session", json={}) as resp:
            sid = (await resp.json())["id"]
            # The SDK's createSession: options?.id || `session-${Date.now()}`.
            check(
                resp.status == 200 and sid.startswith("session-") and sid[8:].isdigit() and len(sid[8:]) == 13,
                "a session created without an id is session-<ms>",
                sid,
            )
        out, _, term = await sse_exec(http, exec_url, ["sh", "-c", 'printf "%s %s" "$PWD" "${LEVEL-unset}"'])
        check(out == b"/workspace unset", "without Session-Id a command runs sessionless", repr(out))
        # The container's executeStream emits `Command timed out after ${timeoutMs}ms\n` as is,
        # with no newline inserted before it (correction note).
        out, err, term = await sse_exec(http, exec_url, ["bash", "-c", "printf partial >&2; sleep 5"], timeout_ms=300)
        check(
            term == ("exit", {"exit_code": 124}) and err == b"partialCommand timed out after 300ms\n",
            "timeout_ms: sessionless exit 124 with the timeout line on stderr, no newline inserted",
            repr((err, term)),
        )
        # timeout_ms is not applied to session targets (execution-service.ts executeStream).
        out, err, term = await sse_exec(http, exec_url, ["bash", "-c", "sleep 0.6; echo late"], session="interop", timeout_ms=100)
        check(
            term == ("exit", {"exit_code": 0}) and out == b"late\n",
            "timeout_ms is not applied to a session command",
            repr((out, term)),
        )
        async with http.delete(f"{url}/v1/sandbox/{sandbox_id}/session/interop") as resp:
            body = await resp.json()
            check(resp.status == 200 and body["success"] is True and body["sessionId"] == "interop", "session delete", f"{resp.status} {body}")
    async with aiohttp.ClientSession(headers={"Authorization": "Bearer wrong"}) as http:
        async with http.post(f"{url}/v1/sandbox") as resp:
            body = await resp.json()
            check(
                resp.status == 401 and body == {"error": "Unauthorized", "code": "unauthorized"},
                "a wrong token is 401 unauthorized",
                f"{resp.status} {body}",
            )

    await client.delete(session)
    ok("delete (DELETE /v1/sandbox/{id})")
    print("interop: all checks passed", flush=True)


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except Exception as e:  # noqa: BLE001
        print(f"FAILED: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        raise
