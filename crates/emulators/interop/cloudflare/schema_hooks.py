"""Schemathesis hooks for the bridge's OpenAPI document (loaded through SCHEMATHESIS_HOOKS).

Two deliberate adjustments, both documented in docs/adapters/cloudflare.md:

- The document types the `{id}` path parameter as any string, but the bridge's first middleware
  rejects any id not matching ^[a-z2-7]{1,128}$ with 400 on every route (a status several
  operations do not document). Generated ids are mapped onto four valid ids, so the operations
  themselves are exercised.
- Generated `argv` arrays are run as arguments of `printf '%s\\n'`, never as programs: the
  emulator really runs commands as root on this machine. The bridge's shell quoting of arbitrary
  strings is still exercised, and the custom check below verifies every exec stream: SSE framing,
  base64 payloads, exactly one terminal event, and (for printf) the exact output.
"""

import base64
import hashlib
import json

import schemathesis

IDS = ["schemathesisa", "schemathesisb", "schemathesisc", "schemathesisd"]


@schemathesis.hook
def map_path_parameters(context, path_parameters):
    if path_parameters and "id" in path_parameters:
        raw = str(path_parameters["id"]).encode("utf-8", "surrogatepass")
        path_parameters["id"] = IDS[hashlib.sha256(raw).digest()[0] % len(IDS)]
    return path_parameters


@schemathesis.hook
def map_body(context, body):
    op = context.operation
    if op is not None and op.path.endswith("/exec") and isinstance(body, dict):
        argv = body.get("argv")
        if isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv):
            body["argv"] = ["printf", "%s\\n", *argv]
        if isinstance(body.get("timeout_ms"), int):
            # Keep the field, but never so short that printf itself is killed.
            body["timeout_ms"] = max(body["timeout_ms"], 10_000)
    return body


def parse_sse(text):
    events, event, data = [], None, []
    for line in text.split("\n"):
        if line == "":
            if event is not None or data:
                events.append((event or "message", "\n".join(data)))
            event, data = None, []
        elif line.startswith(":"):
            continue
        else:
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                event = value
            elif field == "data":
                data.append(value)
    if event is not None or data:
        raise AssertionError(f"the stream ends inside an event: {text[-200:]!r}")
    return events


@schemathesis.check
def bridge_exec_stream(ctx, response, case):
    if not (case.operation.path.endswith("/exec") and response.status_code == 200):
        return None
    assert response.headers.get("content-type", [""])[0].startswith("text/event-stream")
    events = parse_sse(response.text)
    assert events, "an empty exec stream"
    terminal = [i for i, (e, _) in enumerate(events) if e in ("exit", "error")]
    assert terminal == [len(events) - 1], f"want exactly one terminal event, last: {events!r}"
    out = b""
    for name, data in events[:-1]:
        assert name in ("stdout", "stderr"), f"unexpected event {name!r}"
        decoded = base64.b64decode(data, validate=True)
        if name == "stdout":
            out += decoded
    name, data = events[-1]
    payload = json.loads(data)
    if name == "exit":
        assert isinstance(payload.get("exit_code"), int), payload
        argv = (case.body or {}).get("argv") or []
        if payload["exit_code"] == 0 and argv[:2] == ["printf", "%s\\n"]:
            # The bridge decodes output as UTF-8 text: compare as text.
            want = "".join(a + "\n" for a in argv[2:])
            assert out.decode("utf-8") == want, f"printf output {out!r} != {want!r}"
    else:
        assert isinstance(payload.get("error"), str) and isinstance(payload.get("code"), str), payload
    return None
