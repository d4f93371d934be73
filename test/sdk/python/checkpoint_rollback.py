"""The seed's checkpoint before a risky operation: save a checkpoint, run an
aggressive filter that leaves only a few rows, and roll back by creating a
sandbox from the checkpoint, with all the data intact."""

import sys

from forkbox.sandbox import Sandbox

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


sandbox = Sandbox.create()
restored = checkpoint = None
try:
    # 30 minutes of analysis, in short: a cleaned table of 1000 rows.
    prep = sandbox.run("python3", ["-c", """
import pandas as pd
import numpy as np
rng = np.random.default_rng(3)
df = pd.DataFrame({'id': range(1000), 'score': rng.normal(70, 10, 1000).round(1)})
df.to_csv('/workspace/cleaned_data.csv', index=False)
print(len(df), int((df['score'] > 95).sum()))
"""])
    rows, above = map(int, prep.stdout.split())
    print("cleaned rows:", rows, "rows above 95:", above)

    # Save a checkpoint before the risky step.
    checkpoint = sandbox.checkpoint()
    print("checkpoint", checkpoint.snapshot_id, checkpoint.type)

    # The user tries an aggressive filter...
    result = sandbox.run("python3", ["-c", """
import pandas as pd
df = pd.read_csv('/workspace/cleaned_data.csv')
df = df[df['score'] > 95]
df.to_csv('/workspace/cleaned_data.csv', index=False)
print(f"Remaining rows: {len(df)}")
"""])
    print(result.stdout.strip())
    check(result.exit_code == 0 and result.stdout.strip() == "Remaining rows: %d" % above, "the filter ran")

    # Only a few rows left? Restore from the checkpoint.
    restored = Sandbox.create(snapshot_id=checkpoint.snapshot_id)
    back = restored.run("python3", ["-c", "import pandas as pd; print(len(pd.read_csv('/workspace/cleaned_data.csv')))"])
    print("rows after rollback:", back.stdout.strip())
    check(back.stdout.strip() == str(rows), "the rollback has all %d rows" % rows)
    now = sandbox.run("python3", ["-c", "import pandas as pd; print(len(pd.read_csv('/workspace/cleaned_data.csv')))"])
    check(now.stdout.strip() == str(above), "the original sandbox keeps its filtered data")
    check(any(s.id == checkpoint.id for s in sandbox.snapshots()), "the checkpoint is listed under its sandbox")
finally:
    sandbox.terminate()
    if restored is not None:
        restored.terminate()
    if checkpoint is not None:
        checkpoint.delete()

print("checkpoint and rollback flow:", "FAILED %s" % failures if failures else "PASS")
sys.exit(1 if failures else 0)
