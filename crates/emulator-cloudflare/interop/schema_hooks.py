"""Schemathesis hooks for the bridge's OpenAPI document (loaded through SCHEMATHESIS_HOOKS).

Adjustments, each documented in docs/adapters/cloudflare.md:

- The document types the `{id}` path parameter as any string, but the bridge's first middleware
  rejects any id not matching ^[a-z2-7]{1,128}$ with 400 on every route (a status several
  operations do not document). Generated ids are mapped onto four valid ids, so the operations
  themselves are exercised.
- Generated `argv` arrays are run as arguments of `printf '%s\\n'`, never as programs: the
  emulator really runs commands as root on this machine. The bridge's shell quoting of arbitrary
  strings is still exercised, and the custom check below verifies every exec stream: SSE framing,
  base64 payloads, exactly one terminal event, and (for printf) the exact output.
- (Not an adjustment, a limit: schemathesis percent-encodes `/` inside the `{path}` parameter, and
  the bridge, like Hono's `decodeURI`, keeps `%2F` encoded, so every generated file path resolves
  outside `/workspace` and gets the documented 403. The file routes are exercised with real paths
  by the OpenAI Agents SDK interop test instead.)
- `filter_failure` drops two kinds of reports and nothing else: a 5xx that the document lists for
  that operation, answered with the bridge's `{"error","code"}` body and a code of its enum (the
  bridge's deliberate 502s: a duplicate session, a tar that does not extract, no tunnel or mount
  support in the emulator), and schemathesis's per-event validation of the exec stream against the
  document's `{"type": "string"}` (the document types the stream as one string; the check
  `bridge_exec_stream` below validates it event by event as the operation describes it). An
  undocumented 5xx, such as a crash's 500, still fails the run.
"""

import atexit
import base64
import collections
import hashlib
import json
import os

import schemathesis

IDS = ["schemathesisa", "schemathesisb", "schemathesisc", "schemathesisd"]


@schemathesis.hook
def map_path_parameters(context, path_parameters):
    if path_parameters and "id" in path_parameters:
        raw = str(path_parameters["id"]).encode("utf-8", "surrogatepass")
        path_parameters["id"] = IDS[hashlib.sha256(raw).digest()[0] % len(IDS)]
    return path_parameters


def documented_error(case, response):
    responses = case.operation.definition.raw.get("responses", {})
    if str(response.status_code) not in responses:
        return False
    try:
        body = json.loads(response.content)
    except ValueError:
        return False
    codes = json.load(open(os.environ["EXECSEAM_OPENAPI"]))["components"]["schemas"]["ErrorResponse"]["properties"]["code"]["enum"]
    return (
        isinstance(body, dict)
        and set(body) == {"error", "code"}
        and isinstance(body["error"], str)
        and body["code"] in codes
    )


DROPPED = collections.Counter()


@atexit.register
def report_dropped():
    for (code, op, status), n in sorted(DROPPED.items()):
        print(f"dropped by filter_failure: {code} {op} -> {status}: {n}", flush=True)


@schemathesis.hook
def filter_failure(context, failure, case, response):
    keep = keep_failure(failure, case, response)
    if not keep:
        op = f"{case.operation.method.upper()} {case.operation.path}"
        DROPPED[(failure.code, op, response.status_code)] += 1
    return keep


def keep_failure(failure, case, response):
    if failure.code == "ST101":
        return not documented_error(case, response)
    if (
        failure.code == "ST108"
        and case.operation.path.endswith("/exec")
        and response.status_code == 200
        and response.headers.get("content-type", [""])[0].startswith("text/event-stream")
    ):
        return False
    return True


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
