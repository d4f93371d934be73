"""The seed's named session: a user works in a named sandbox (a file and a
variable), it is suspended (zero compute), and later connect(name) +
resume() brings both back. A second round relies on auto-resume: connect by
name and just use it."""

import sys
import time
import uuid

from forkbox.sandbox import Sandbox

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


name = "session-alice-" + uuid.uuid4().hex[:6]
# Morning: the user starts working.
sandbox = Sandbox.create(name=name, timeout_secs=1800)
try:
    print("created", sandbox.id, sandbox.name, sandbox.state)
    sandbox.files.write("/workspace/sales.csv", "region,revenue\nNorth,120\nSouth,95\nNorth,30\n")
    ex = sandbox.run_code("""
import pandas as pd
df = pd.read_csv('/workspace/sales.csv')
totals = df.groupby('region')['revenue'].sum().to_dict()
print(f"Loaded {len(df)} rows")
""")
    print("".join(ex.logs.stdout).strip())
    sandbox.run_code("secret = 41 + 1")
    sandbox.close()  # a named sandbox: the handle goes, the sandbox stays
    check(Sandbox.connect(name).state == "running", "close() leaves a named sandbox running")

    # The user goes to lunch: the session is suspended.
    t = time.monotonic()
    info = Sandbox.connect(name).suspend()
    print("suspended in %.2fs: %s" % (time.monotonic() - t, info.state))
    check(Sandbox.connect(name).state == "suspended", "connect(name) sees it suspended")
    check(info.usage is None or not info.usage.get("memory_bytes"), "no memory in use while suspended")

    # Afternoon: the user comes back.
    t = time.monotonic()
    sandbox = Sandbox.connect(name)
    sandbox.resume()
    print("resumed in %.2fs: %s (same id: %s)" % (time.monotonic() - t, sandbox.state, sandbox.id == info.id))
    sandbox.resume()  # resuming a running sandbox is harmless
    check(sandbox.files.read("/workspace/sales.csv").startswith("region,revenue"), "the file survived")
    ex = sandbox.run_code("(secret, totals, len(df))")
    print("variables:", ex.text)
    check(ex.text == "(42, {'North': 150, 'South': 95}, 3)", "the variables survived")

    # Again, without an explicit resume: the first call resumes it.
    sandbox.suspend()
    sandbox.suspend()  # suspending a suspended sandbox is harmless
    later = Sandbox.connect(name)
    check(later.state == "suspended", "suspended again")
    ex = later.run_code("secret * 2")
    check(ex.text == "84", "a call on a suspended named sandbox resumes it (%s)" % ex.text)
    check(later.state == "running", "running after that call")
finally:
    Sandbox.connect(name).terminate()

print("named session flow:", "FAILED %s" % failures if failures else "PASS")
sys.exit(1 if failures else 0)
