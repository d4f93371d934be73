"""The seed's Image: a recipe built into a registered image (run steps, env,
a copied local directory, workdir), then sandboxes booted from it. The
recipe is the seed's, minus the pip installs (the default python image has
the data-science packages already, and tests run offline); the base is
written as the seed writes it, a Docker Hub name that forkbox takes as its
own python image."""

import os
import sys
import tempfile
import uuid
import warnings

from forkbox.sandbox import Image, Sandbox

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


name = "code-interpreter-" + uuid.uuid4().hex[:6]
ctx = tempfile.mkdtemp()
os.makedirs(os.path.join(ctx, "helpers"))
with open(os.path.join(ctx, "helpers", "fbhelpers.py"), "w") as f:
    f.write("def greet(who):\n    return 'hello ' + who\n")

with warnings.catch_warnings(record=True) as warned:
    warnings.simplefilter("always")
    image = (
        Image(name=name, base_image="python:3.12-slim")
        .run("mkdir -p /workspace /opt/fb && python3 -c 'import pandas, sklearn' && echo built > /opt/fb/marker")
        .env({"PYTHONPATH": "/opt/helpers", "ANALYST": "forkbox"})
        .copy(os.path.join(ctx, "helpers"), "/opt/helpers")
        .workdir("/workspace")
    )
    lines = []
    info = image.build(registered_name=name, on_log=lines.append)
print("built", info.name, info.id, "%d layers" % len(info.layers or []), "%.0f MB" % ((info.size_bytes or 0) / 1e6))
print("build log:", lines[-3:])
check(info.name == name, "registered as %s" % name)
check(any("Docker Hub" in str(w.message) for w in warned), "the Docker Hub base was taken as forkbox's python image")

sandbox = Sandbox.create(image=name)
try:
    r = sandbox.run("sh", ["-c", "cat /opt/fb/marker; echo $ANALYST; pwd"])
    check(r.stdout.split() == ["built", "forkbox", "/workspace"], "run step, env and workdir: %r" % r.stdout)
    ex = sandbox.run_code("import fbhelpers\nfbhelpers.greet('seed')")
    check(ex.text == "'hello seed'", "the copied directory is importable: %s %s" % (ex.text, ex.error))
finally:
    sandbox.terminate()

# A second build of the same recipe comes from the layer cache.
again = image.build(registered_name=name)
check(again.id == info.id, "a rebuild is served from the cache (same id)")
check(any(i.name == name for i in Image.list()), "Image.list() has it")
Image.delete(name)
check(all(i.name != name for i in Image.list()), "Image.delete() removed it")

print("image flow:", "FAILED %s" % failures if failures else "PASS")
sys.exit(1 if failures else 0)
