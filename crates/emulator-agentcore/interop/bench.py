"""boto3's executeCommand, one call per request line: the baseline of
crates/adapter-agentcore/benches/sdk.rs. Starts one session, prints `ready`, then for every line
on stdin (a shell command) calls InvokeCodeInterpreter(executeCommand) once, reads the event
stream to its end and prints `<ms> <stdout chars>`; an empty line ends it (the session is
stopped). The endpoint and keys come from the emulator's environment, as in interop.py.
"""

import os
import sys
import time

import boto3

IDENT = os.environ.get("AGENTCORE_CODE_INTERPRETER_ID", "aws.codeinterpreter.v1")


def main():
    c = boto3.client(
        "bedrock-agentcore",
        endpoint_url=os.environ["AWS_ENDPOINT_URL_BEDROCK_AGENTCORE"],
        region_name=os.environ["AWS_REGION"],
        aws_access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"],
    )
    sid = c.start_code_interpreter_session(
        codeInterpreterIdentifier=IDENT, sessionTimeoutSeconds=900
    )["sessionId"]
    print("ready", flush=True)
    for line in sys.stdin:
        command = line.rstrip("\n")
        if not command:
            break
        t = time.perf_counter()
        resp = c.invoke_code_interpreter(
            codeInterpreterIdentifier=IDENT,
            sessionId=sid,
            name="executeCommand",
            arguments={"command": command},
        )
        result = None
        for ev in resp["stream"]:
            if "result" in ev:
                result = ev["result"]
        ms = (time.perf_counter() - t) * 1000.0
        sc = result["structuredContent"]
        if sc["exitCode"] != 0:
            print(f"failed: {result}", file=sys.stderr, flush=True)
            sys.exit(1)
        print(f"{ms:.3f} {len(sc['stdout'])}", flush=True)
    c.stop_code_interpreter_session(codeInterpreterIdentifier=IDENT, sessionId=sid)


if __name__ == "__main__":
    main()
