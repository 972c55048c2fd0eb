"""What every client check script prints, as `execseam_test_util::interop::assert_checks` reads it:
one "ok <name>" line per check that held, "FAILED <name>: <detail>" and exit status 1 at the first
that did not, and "OK" last (the script prints it). `interop::run_python` puts this folder on
`PYTHONPATH`, so a script says `from checks import ok, check`."""

import sys


def ok(name):
    print(f"ok {name}", flush=True)


def check(cond, name, detail=""):
    if not cond:
        print(f"FAILED {name}: {detail}", flush=True)
        sys.exit(1)
    ok(name)
