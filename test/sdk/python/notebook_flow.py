"""A sandbox's notebook: the cells it ran come back with their outputs, the
history exports as a Jupyter notebook, and that notebook runs again in a
new sandbox, cell by cell, stopping at the first that fails."""

import json
import sys

from forkbox import Sandbox

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


first = Sandbox.create()
second = None
try:
    first.run_code("sales = [120, 95]\nprint('loaded')")
    first.run_code("sum(sales)")
    cells = first.cells()
    check([c.code for c in cells] == ["sales = [120, 95]\nprint('loaded')", "sum(sales)"], "the history holds both cells, in order")
    check(cells[0].source == "user" and cells[0].seq == 1 and cells[1].seq == 2, "cells are the user's, numbered")
    check(cells[1].execution is not None and cells[1].execution.text == "215", "the history keeps the outputs: 215")

    nb = json.loads(first.notebook().decode("utf-8"))
    check(nb["nbformat"] == 4 and len([c for c in nb["cells"] if c["cell_type"] == "code"]) == 2, "the notebook has the two code cells")
    print("notebook outputs:", json.dumps([o for c in nb["cells"] for o in c.get("outputs", [])])[:200])

    second = Sandbox.create()
    nb["cells"].append({"cell_type": "code", "source": "1/0", "metadata": {}, "outputs": [], "execution_count": None})
    nb["cells"].append({"cell_type": "code", "source": "never = True", "metadata": {}, "outputs": [], "execution_count": None})
    run = second.run_notebook(nb)
    print("ran", run.ran, "of", run.total, "stopped", run.stopped)
    check(run.ran == 3 and run.total == 4 and run.stopped, "the run stops at the failing cell")
    check(run.cells[1].execution.text == "215" and run.cells[2].execution.error.name == "ZeroDivisionError", "the run's cells carry their outputs")
    check(second.run_code("'never' in globals()").text == "False", "no cell after the failing one ran")
finally:
    for sb in (first, second):
        if sb is not None:
            sb.terminate()

print("notebook flow:", "FAILED %s" % failures if failures else "PASS")
sys.exit(1 if failures else 0)
