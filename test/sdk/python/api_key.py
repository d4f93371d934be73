"""The API key: taken from FORKBOX_API_KEY (or api_key=), sent as a bearer
token; a missing or wrong key is an AuthenticationError with the server's
message. Run against a daemon started with a key."""

import os
import sys

from forkbox import AuthenticationError, Client, Sandbox, Snapshot

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


check(bool(os.environ.get("FORKBOX_API_KEY")), "FORKBOX_API_KEY is set")
listed = Sandbox.list()
check(isinstance(listed, list), "with the key from the environment: %d sandboxes listed" % len(listed))
check(isinstance(Snapshot.list(client=Client()), list), "Client() reads the environment too")

for key in ("wrong-key", ""):
    try:
        Sandbox.list(api_key=key)
        check(False, "api_key=%r is refused" % key)
    except AuthenticationError as e:
        print("     -> %s code=%s status=%s message=%r" % (type(e).__name__, e.code, e.status, e.message))
        check(e.code == "unauthenticated" and e.status == 401 and "API key" in e.message,
              "api_key=%r is an AuthenticationError with the server's message" % key)

print("api key flow:", "FAILED %s" % failures if failures else "PASS")
sys.exit(1 if failures else 0)
