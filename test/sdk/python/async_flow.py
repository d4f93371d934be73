"""AsyncSandbox under asyncio.run: two sessions at once, streamed output to
an async callback, files, a memory checkpoint restored, a fork, typed errors
awaited, and cleanup with async with."""

import asyncio
import sys

from forkbox import AsyncSandbox, AsyncSnapshot, CheckpointType, NotFoundError

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


async def session(n):
    async with await AsyncSandbox.create(labels={"flow": "async"}) as sb:
        chunks = []

        async def on_stdout(text):
            await asyncio.sleep(0)
            chunks.append(text)

        ex = await sb.run_code("for i in range(3):\n    print('tick', %d, i)\nvalue = %d * 100\nvalue" % (n, n),
                               on_stdout=on_stdout)
        check("".join(chunks) == "".join("tick %d %d\n" % (n, i) for i in range(3)),
              "session %d streamed its output to an async callback" % n)
        check(ex.text == str(n * 100), "session %d: main result %s" % (n, ex.text))
        await sb.files.write("/workspace/n.txt", str(n))
        check(await sb.files.read("/workspace/n.txt") == str(n), "session %d: file round trip" % n)
        cells = await sb.cells()
        check(len(cells) == 1 and cells[0].execution.text == str(n * 100), "session %d: its cell is in its history" % n)
        return sb.id


async def main():
    ids = await asyncio.gather(session(1), session(2))
    check(len(set(ids)) == 2, "two sessions ran concurrently: %s" % ids)
    states = {s.id: s.state for s in await AsyncSandbox.list(labels={"flow": "async"}, include_terminated=True)}
    check(all(states.get(i) == "terminated" for i in ids), "async with terminated both (%s)" % states)

    sb = await AsyncSandbox.create()
    try:
        await sb.run_code("import math\nradius = 2")
        snap = await sb.checkpoint(checkpoint_type=CheckpointType.MEMORY)
        restored = await AsyncSandbox.create(snapshot_id=snap.snapshot_id)
        ex = await restored.run_code("round(math.pi * radius ** 2, 3)")
        check(ex.text == "12.566", "restored from a memory snapshot: %s" % ex.text)
        await restored.terminate()
        branches = await sb.fork(1)
        ex = await branches[0].run_code("radius")
        check(ex.text == "2" and branches.snapshot is not None, "fork(1) carries the variables")
        await branches[0].terminate()
        await AsyncSnapshot.delete(snap)
        await AsyncSnapshot.delete(branches.snapshot)
        check(snap.id not in [s.id for s in await AsyncSnapshot.list()], "snapshots deleted")
        r = await sb.run("sh", ["-c", "echo out; echo err >&2; exit 3"])
        check((r.stdout, r.stderr, r.exit_code) == ("out\n", "err\n", 3), "run: %r %r %d" % (r.stdout, r.stderr, r.exit_code))
        print("state:", await sb.state())
    finally:
        await sb.terminate()
    try:
        await AsyncSandbox.connect("no-such-sandbox-async")
        check(False, "connect to an unknown sandbox raises")
    except NotFoundError as e:
        check("no-such-sandbox-async" in e.message, "NotFoundError: %s" % e.message)


asyncio.run(main())
print("async flow:", "FAILED %s" % failures if failures else "PASS")
sys.exit(1 if failures else 0)
