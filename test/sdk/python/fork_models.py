"""The seed's fork: data loaded and features engineered once, then a memory
snapshot forked into two experiments, a linear model and a gradient-boosting
model, each printing its R². First as the seed writes it (two named
sandboxes created from the snapshot, code run with run), then with
sandbox.fork(2) and the in-memory DataFrame (run_code)."""

import re
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor

from forkbox.sandbox import CheckpointType, Sandbox

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


run_id = uuid.uuid4().hex[:6]
sandbox = Sandbox.create()
made = []
snaps = []
try:
    # The user has loaded data, cleaned it, done feature engineering.
    ex = sandbox.run_code("""
import numpy as np
import pandas as pd
rng = np.random.default_rng(11)
n = 400
x = rng.uniform(-3, 3, (n, 3))
df = pd.DataFrame(x, columns=['a', 'b', 'c'])
df['target'] = 2.0 * df['a'] - df['b'] + np.sin(3 * df['c']) * 2 + rng.normal(0, 0.3, n)
df.to_csv('/workspace/features.csv', index=False)
print(df.shape)
""")
    print("features:", "".join(ex.logs.stdout).strip())

    # A memory snapshot captures everything.
    snap = sandbox.checkpoint(checkpoint_type=CheckpointType.MEMORY)
    snaps.append(snap)
    branch_linear = Sandbox.create(snapshot_id=snap.snapshot_id, name="experiment-linear-" + run_id)
    made.append(branch_linear)
    branch_xgboost = Sandbox.create(snapshot_id=snap.snapshot_id, name="experiment-xgboost-" + run_id)
    made.append(branch_xgboost)

    # Both branches start with identical state.
    result_linear = branch_linear.run("python3", ["-c", """
from sklearn.linear_model import LinearRegression
import pandas as pd
df = pd.read_csv('/workspace/features.csv')
model = LinearRegression().fit(df.drop('target', axis=1), df['target'])
print(f"Linear R²: {model.score(df.drop('target', axis=1), df['target']):.4f}")
"""])
    result_xgboost = branch_xgboost.run("python3", ["-c", """
from sklearn.ensemble import GradientBoostingRegressor
import pandas as pd
df = pd.read_csv('/workspace/features.csv')
model = GradientBoostingRegressor().fit(df.drop('target', axis=1), df['target'])
print(f"XGBoost R²: {model.score(df.drop('target', axis=1), df['target']):.4f}")
"""])
    print(result_linear.stdout, end="")
    print(result_xgboost.stdout, end="")
    lin = re.search(r"Linear R²: ([0-9.]+)", result_linear.stdout)
    gb = re.search(r"XGBoost R²: ([0-9.]+)", result_xgboost.stdout)
    check(lin is not None and gb is not None, "both branches printed an R² (stderr: %r %r)"
          % (result_linear.stderr[-300:], result_xgboost.stderr[-300:]))
    if lin and gb:
        check(0 < float(lin.group(1)) < float(gb.group(1)) <= 1, "boosting fits the sine better than a line")

    # The same with fork(): the branches share the kernel's DataFrame.
    branches = sandbox.fork(2)
    made.extend(branches)
    snaps.append(branches.snapshot)
    print("forked", [b.id for b in branches], "from", branches.snapshot.id)
    # The two experiments run at the same time, one thread each.
    with ThreadPoolExecutor(2) as pool:
        linear_f = pool.submit(branches[0].run_code, """
from sklearn.linear_model import LinearRegression
X, y = df.drop(columns='target'), df['target']
r2 = LinearRegression().fit(X, y).score(X, y)
print(f"fork Linear R²: {r2:.4f}")
""")
        boosted_f = pool.submit(branches[1].run_code, """
from sklearn.ensemble import GradientBoostingRegressor
X, y = df.drop(columns='target'), df['target']
r2 = GradientBoostingRegressor(random_state=0).fit(X, y).score(X, y)
print(f"fork GradientBoosting R²: {r2:.4f}")
""")
        linear, boosted = linear_f.result(), boosted_f.result()
    print("".join(linear.logs.stdout), end="")
    print("".join(boosted.logs.stdout), end="")
    check(linear.error is None and boosted.error is None, "the fork branches ran (%s %s)" % (linear.error, boosted.error))
    ra = branches[0].run_code("round(r2, 4)").text
    rb = branches[1].run_code("round(r2, 4)").text
    check(ra != rb, "each branch keeps its own r2 (%s vs %s)" % (ra, rb))
    check(sandbox.run_code("'r2' in globals()").text == "False", "the source did not see the branches' work")
finally:
    for sb in made:
        sb.terminate()
    sandbox.terminate()
    for s in snaps:
        s.delete()

print("fork flow:", "FAILED %s" % failures if failures else "PASS")
sys.exit(1 if failures else 0)
