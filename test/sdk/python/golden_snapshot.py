"""The seed's golden snapshot: warm a sandbox up once (data loaded, pandas
imported), checkpoint it with its memory, then start several user sessions
from the snapshot; each sees the state at once. Also the filesystem
snapshot of the seed: files survive, a cold boot has no variables."""

import sys
import time
import uuid

from forkbox.sandbox import CheckpointType, Sandbox

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


run_id = uuid.uuid4().hex[:6]
setup = Sandbox.create()
try:
    setup.run_code("""
import pandas as pd
import numpy as np
rng = np.random.default_rng(7)
df = pd.DataFrame(rng.standard_normal((10000, 10)), columns=[f'col_{i}' for i in range(10)])
df.to_csv('/workspace/sample_data.csv', index=False)
checksum = round(float(df.values.sum()), 6)
print('Warm-up complete')
""")
    checksum = setup.run_code("checksum").text
    print("checksum in setup:", checksum)
    t = time.monotonic()
    golden = setup.checkpoint(checkpoint_type=CheckpointType.MEMORY)
    print("Snapshot ID: %s (%s, %.1f MB, %.2fs)" % (golden.snapshot_id, golden.type, golden.size_bytes / 1e6,
                                                    time.monotonic() - t))
    check(golden.type == "memory", "the golden snapshot is a memory snapshot")
    fs_snap = setup.checkpoint()  # the seed's default: filesystem
    check(fs_snap.type == "filesystem", "checkpoint() defaults to a filesystem snapshot")
finally:
    setup.terminate()


def create_user_session(user_id):
    return Sandbox.create(snapshot_id=golden.snapshot_id, name="session-%s-%s" % (user_id, run_id),
                          timeout_secs=1800, allow_internet_access=False)


sessions = []
try:
    for user in ("alice", "bob", "carol"):
        t = time.monotonic()
        sb = create_user_session(user)
        sessions.append(sb)
        ready = time.monotonic() - t
        ex = sb.run_code("(len(df), 'pd' in globals(), checksum)")
        print("%s: %s ready in %.2fs -> %s" % (user, sb.name, ready, ex.text))
        check(ex.error is None and ex.text == "(10000, True, %s)" % checksum,
              "%s's session has df, pandas and the checksum in memory" % user)
    # Sessions diverge: a change in one is not seen in another.
    sessions[0].run_code("df['col_0'] = 0")
    a = sessions[0].run_code("float(df['col_0'].abs().sum())").text
    b = sessions[1].run_code("float(df['col_0'].abs().sum()) > 0").text
    check(a == "0.0" and b == "True", "sessions diverge independently")
    # The snapshot is unchanged by its sessions: one more restores the original.
    sb = create_user_session("dave")
    sessions.append(sb)
    check(sb.run_code("float(df['col_0'].abs().sum()) > 0").text == "True", "a later session starts from the snapshot again")

    cold = Sandbox.create(snapshot_id=fs_snap.snapshot_id)
    sessions.append(cold)
    files = [e.name for e in cold.files.list("/workspace")]
    check("sample_data.csv" in files, "filesystem snapshot: the data file is there (%s)" % files)
    ex = cold.run_code("'df' in globals()")
    check(ex.text == "False", "filesystem snapshot: a cold boot, no variables")
    out = cold.run("python3", ["-c", "import pandas as pd; print(len(pd.read_csv('/workspace/sample_data.csv')))"])
    check(out.stdout.strip() == "10000", "filesystem snapshot: the file reads back (%r)" % out.stdout.strip())
finally:
    for sb in sessions:
        sb.terminate()
    for snap in (golden, fs_snap):
        snap.delete()

print("golden snapshot flow:", "FAILED %s" % failures if failures else "PASS")
sys.exit(1 if failures else 0)
