"""Bad input and failing cells surface as typed exceptions carrying the
server's code and message, never as bare HTTP errors: an unknown sandbox, a
bad argument, a name in use, a call on a terminated sandbox, a cell timeout,
a killed kernel, a kernel out of memory, an unreachable daemon."""

import sys
import uuid

import forkbox
from forkbox import (CellTimeoutError, ConflictError, ConnectionFailedError, FailedPreconditionError, ForkboxError,
                     InvalidArgumentError, KernelDiedError, NotFoundError, SandboxTimeoutError, Snapshot)
from forkbox.sandbox import Sandbox

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def expect(exc_type, fn, *args, **kwargs):
    """Calls fn and returns the exception it raised, which must be exc_type."""
    try:
        fn(*args, **kwargs)
    except ForkboxError as e:
        print("     -> %s code=%s status=%s message=%r" % (type(e).__name__, e.code, e.status, e.message))
        check(isinstance(e, exc_type), "%s raised (got %s)" % (exc_type.__name__, type(e).__name__))
        return e
    except Exception as e:  # noqa: BLE001 - anything else is the failure under test
        check(False, "%s raised, got the untyped %s: %s" % (exc_type.__name__, type(e).__name__, e))
        return None
    check(False, "%s raised, but the call succeeded" % exc_type.__name__)
    return None


missing = "no-such-sandbox-" + uuid.uuid4().hex[:6]
print("# unknown sandbox")
e = expect(NotFoundError, Sandbox.connect, missing)
check(e is not None and missing in e.message and e.code == "not_found" and e.status == 404,
      "the server's message names the sandbox")
e = expect(NotFoundError, Snapshot.get, "snap_doesnotexist")
check(e is not None and "snap_doesnotexist" in e.message, "unknown snapshot, named in the message")

print("# bad arguments")
e = expect(InvalidArgumentError, Sandbox.create, cpus=-1)
check(e is not None and "cpus" in e.message, "the message names the field")

print("# unreachable daemon")
expect(ConnectionFailedError, Sandbox.connect, "x", url="http://127.0.0.1:1")

sb = Sandbox.create(name="errors-" + uuid.uuid4().hex[:6], memory_mb=512)
try:
    print("# a name in use")
    e = expect(ConflictError, Sandbox.create, name=sb.name)
    check(e is not None and sb.name in e.message, "the message names the sandbox")
    e = expect(InvalidArgumentError, sb.run_code, "1", language="no such language!")

    print("# the code's own exception is data, not an SDK error")
    ex = sb.run_code("total = 10\n1 / 0")
    check(ex.error is not None and ex.error.name == "ZeroDivisionError" and ex.error.traceback,
          "ZeroDivisionError in execution.error: %s" % ex.error)

    print("# a cell timeout")
    e = expect(CellTimeoutError, sb.run_code, "import time\nprint('started')\ntime.sleep(30)", timeout=1)
    if e is not None:
        check(isinstance(e, SandboxTimeoutError), "a CellTimeoutError is a SandboxTimeoutError")
        check("timed out" in e.message, "the server's message: %s" % e.message)
        check(e.execution is not None and e.execution.logs.stdout == ["started\n"], "the partial output is kept")
    check(sb.run_code("total").text == "10", "the context kept its variables after the timeout")
    ex = sb.run_code("import time; time.sleep(30)", timeout=0.5, raise_on_failure=False)
    check(ex.error is not None and ex.error.name == "TimeoutError", "raise_on_failure=False returns it as data")

    print("# a killed kernel")
    e = expect(KernelDiedError, sb.run_code, "import os\nos.kill(os.getpid(), 9)")
    check(e is not None and e.message != "", "the server's message: %s" % (e and e.message))
    ex = sb.run_code("'total' in globals()")
    check(ex.text == "False" and ex.error is None, "the next call runs in a fresh kernel")

    print("# a kernel out of memory")
    e = expect(KernelDiedError, sb.run_code, "hog = b'x' * (2 << 30)")
    check(e is not None and "ran out of memory" in e.message, "the message says out of memory: %s" % (e and e.message))
    check(sb.run_code("6 * 7").text == "42", "the sandbox works after that")

    print("# a command that runs too long is a result")
    r = sb.run("sleep", ["30"], timeout=1)
    check(r.timed_out and r.exit_code != 0, "run(timeout=1): timed_out=%s exit_code=%s error=%r" % (r.timed_out, r.exit_code, r.error))

    print("# calls on a terminated sandbox")
    sb.terminate()
    e = expect(FailedPreconditionError, sb.run_code, "1")
    check(isinstance(e, ConflictError), "FailedPreconditionError is a ConflictError")
    sb.close()  # harmless after terminate
finally:
    try:
        sb.terminate()
    except forkbox.ForkboxError:
        pass

print("errors flow:", "FAILED %s" % failures if failures else "PASS")
sys.exit(1 if failures else 0)
