"""Unit tests of the SDK against a scripted HTTP server (no daemon)."""

import asyncio
import email.parser
import email.policy
import io
import json
import os
import tarfile
import tempfile
import unittest
import warnings
from unittest import mock
from urllib.parse import parse_qs, urlsplit

import forkbox
from forkbox import (AsyncSandbox, AuthenticationError, CellTimeoutError, CheckpointType, Client, ConflictError,
                     ConnectionFailedError, FailedPreconditionError, ForkboxError, Image, InternalError,
                     InvalidArgumentError, KernelDiedError, NotFoundError, Sandbox, SandboxTimeoutError, Snapshot,
                     UnavailableError)
from forkbox.errors import error_from_response

from .stub import StubServer, error_answer, json_answer, sse_answer

SB = {"id": "sbx_1", "state": "running", "image": "python", "cpus": 1, "memory_mb": 512}
NAMED = dict(SB, id="sbx_2", name="session-alice")


def execution(**kw):
    d = {"logs": {"stdout": [], "stderr": []}, "results": [], "error": None, "execution_count": 1}
    d.update(kw)
    return d


class ErrorMappingTest(unittest.TestCase):
    def test_codes(self):
        cases = {
            (404, "not_found"): NotFoundError, (400, "invalid_argument"): InvalidArgumentError,
            (409, "conflict"): ConflictError, (409, "failed_precondition"): FailedPreconditionError,
            (504, "timeout"): SandboxTimeoutError, (503, "unavailable"): UnavailableError,
            (401, "unauthenticated"): AuthenticationError, (500, "internal"): InternalError,
        }
        for (status, code), cls in cases.items():
            body = json.dumps({"error": {"code": code, "message": "the server's words"}}).encode()
            e = error_from_response(status, body)
            self.assertIs(type(e), cls)
            self.assertEqual((e.code, e.message, e.status), (code, "the server's words", status))
            self.assertEqual(str(e), "the server's words")
        self.assertTrue(issubclass(FailedPreconditionError, ConflictError))

    def test_unknown_code_keeps_code(self):
        e = error_from_response(418, b'{"error": {"code": "teapot", "message": "short and stout"}}')
        self.assertIs(type(e), ForkboxError)
        self.assertEqual((e.code, e.message, e.status), ("teapot", "short and stout", 418))

    def test_no_json_body(self):
        e = error_from_response(404, b"<html>nope</html>")
        self.assertIsInstance(e, NotFoundError)
        self.assertEqual(e.message, "HTTP 404 Not Found")
        e = error_from_response(502, b"bad gateway from proxy")
        self.assertIsInstance(e, InternalError)
        self.assertEqual(e.message, "bad gateway from proxy")


class StubTest(unittest.TestCase):
    def setUp(self):
        self.srv = StubServer()
        self.addCleanup(self.srv.close)
        self.c = Client(self.srv.url, api_key="k3y")

    def route(self, method, path, ans):
        self.srv.routes[(method, path)] = ans

    def last(self):
        return self.srv.requests[-1]


class SandboxTest(StubTest):
    def test_create_sends_only_set_fields_and_auth(self):
        self.route("POST", "/v1/sandboxes", json_answer(201, SB))
        sb = Sandbox.create(cpus=1.0, memory_mb=2048, timeout_secs=600, allow_internet_access=False,
                            labels={"team": "a"}, client=self.c)
        self.assertEqual(sb.id, "sbx_1")
        self.assertIsNone(sb.name)
        req = self.last()
        self.assertEqual(req.json(), {"cpus": 1.0, "memory_mb": 2048, "timeout_secs": 600, "labels": {"team": "a"}})
        self.assertEqual(req.headers["Authorization"], "Bearer k3y")

    def test_create_from_snapshot_object(self):
        self.route("POST", "/v1/sandboxes", json_answer(201, NAMED))
        snap = Snapshot({"id": "snap_9", "type": "memory"}, self.c)
        sb = Sandbox.create(snapshot_id=snap, name="session-alice", client=self.c)
        self.assertEqual(self.last().json(), {"snapshot_id": "snap_9", "name": "session-alice"})
        self.assertEqual(sb.name, "session-alice")

    def test_network_policy(self):
        self.route("POST", "/v1/sandboxes", json_answer(201, SB))
        sb = Sandbox.create(allow_internet_access=True, network={"allow_out": ["*.pypi.org"]}, client=self.c)
        self.assertEqual(self.last().json(), {"allow_internet_access": True, "network": {"allow_out": ["*.pypi.org"]}})
        self.route("PATCH", "/v1/sandboxes/sbx_1", json_answer(200, dict(SB, network={"deny_out": ["10.0.0.0/8"]})))
        info = sb.set_network(deny_out=["10.0.0.0/8"])
        self.assertEqual(self.last().json(), {"network": {"deny_out": ["10.0.0.0/8"]}})
        self.assertEqual(info.network, {"deny_out": ["10.0.0.0/8"]})
        sb.set_network()
        self.assertEqual(self.last().json(), {"network": {}})

    def test_ports(self):
        self.route("POST", "/v1/sandboxes", json_answer(201, SB))
        sb = Sandbox.create(client=self.c)
        port = {"sandbox": "sbx_1", "port": 8000, "path": "/v1/sandboxes/sbx_1/ports/8000/",
                "url": "http://h/v1/sandboxes/sbx_1/ports/8000/", "token": "fbxp_t", "public": False}
        self.route("GET", "/v1/sandboxes/sbx_1/ports/8000", json_answer(200, port))
        self.assertEqual(sb.get_host(8000), port["url"])
        self.route("PUT", "/v1/sandboxes/sbx_1/ports/8000", json_answer(200, dict(port, public=True)))
        self.assertTrue(sb.port(8000, public=True)["public"])
        self.assertEqual(self.last().json(), {"public": True})

    def test_env_configures_the_client(self):
        self.route("GET", "/v1/sandboxes/sbx_1", json_answer(200, SB))
        with mock.patch.dict(os.environ, {"FORKBOX_URL": self.srv.url, "FORKBOX_API_KEY": "envkey"}):
            Sandbox.connect("sbx_1")
        self.assertEqual(self.last().headers["Authorization"], "Bearer envkey")

    def test_connect_unknown_is_not_found_with_message(self):
        self.route("GET", "/v1/sandboxes/nope", error_answer(404, "not_found", 'sandbox "nope" not found'))
        with self.assertRaises(NotFoundError) as cm:
            Sandbox.connect("nope", client=self.c)
        self.assertEqual(cm.exception.message, 'sandbox "nope" not found')
        self.assertEqual(cm.exception.status, 404)

    def test_names_are_escaped(self):
        self.route("GET", "/v1/sandboxes/a%2Fb", error_answer(404, "not_found", "x"))
        with self.assertRaises(NotFoundError):
            Sandbox.connect("a/b", client=self.c)
        self.assertEqual(self.last().path, "/v1/sandboxes/a%2Fb")

    def test_connection_refused_is_typed(self):
        c = Client("http://127.0.0.1:1")
        with self.assertRaises(ConnectionFailedError) as cm:
            Sandbox.connect("x", client=c)
        self.assertIsInstance(cm.exception, UnavailableError)
        self.assertEqual(cm.exception.status, 0)
        self.assertIn("127.0.0.1:1", cm.exception.message)

    def test_run(self):
        sb = Sandbox(SB, self.c)
        self.route("POST", "/v1/sandboxes/sbx_1/exec",
                   json_answer(200, {"stdout": "hi\n", "stderr": "", "exit_code": 3, "duration_ms": 5}))
        r = sb.run("python3", ["-c", "print('hi')"], timeout=2.5)
        self.assertEqual((r.stdout, r.stderr, r.exit_code, r.duration_ms), ("hi\n", "", 3, 5))
        self.assertFalse(r.ok)
        self.assertEqual(self.last().json(), {"cmd": "python3", "args": ["-c", "print('hi')"], "timeout_secs": 2.5})
        sb.run("ls -la /workspace")
        self.assertEqual(self.last().json(), {"cmd": "sh", "args": ["-c", "ls -la /workspace"]})
        sb.run("ls")
        self.assertEqual(self.last().json(), {"cmd": "ls"})

    def test_run_streaming(self):
        sb = Sandbox(SB, self.c)
        self.route("POST", "/v1/sandboxes/sbx_1/exec", sse_answer([
            ("stdout", {"data": "a"}), ("stderr", {"data": "e"}), ("stdout", {"data": "b"}),
            ("exit", {"exit_code": 0, "duration_ms": 9})], chunk=5))
        got = []
        r = sb.run("x", [], on_stdout=lambda s: got.append(("o", s)), on_stderr=lambda s: got.append(("e", s)))
        self.assertEqual(got, [("o", "a"), ("e", "e"), ("o", "b")])
        self.assertEqual((r.stdout, r.stderr, r.exit_code), ("ab", "e", 0))
        self.assertEqual(self.last().headers["Accept"], "text/event-stream")

    def test_run_stream_failure_event(self):
        sb = Sandbox(SB, self.c)
        self.route("POST", "/v1/sandboxes/sbx_1/exec", sse_answer([
            ("stdout", {"data": "a"}), ("error", {"code": "unavailable", "message": "agent went away"})]))
        with self.assertRaises(UnavailableError) as cm:
            sb.run("x", [], on_stdout=lambda s: None)
        self.assertEqual(cm.exception.message, "agent went away")

    def test_cut_stream_is_an_error(self):
        sb = Sandbox(SB, self.c)
        self.route("POST", "/v1/sandboxes/sbx_1/exec", sse_answer([("stdout", {"data": "a"})]))
        with self.assertRaises(ConnectionFailedError) as cm:
            sb.run("x", [], on_stdout=lambda s: None)
        self.assertIn("ended before its end", cm.exception.message)

    def test_run_code_json(self):
        sb = Sandbox(SB, self.c)
        self.route("POST", "/v1/sandboxes/sbx_1/code", json_answer(200, execution(
            results=[{"text": "215", "is_main_result": True}, {"png": "iVBORw==", "text": "<Figure>"}],
            logs={"stdout": ["x\n"], "stderr": []}, execution_count=2, context_id="default-python")))
        ex = sb.run_code("sum(sales)", timeout=1.5)
        self.assertEqual(self.last().json(), {"code": "sum(sales)", "timeout_ms": 1500})
        self.assertEqual(ex.text, "215")
        self.assertEqual(ex.execution_count, 2)
        self.assertEqual(ex.logs.stdout, ["x\n"])
        self.assertIsNone(ex.error)
        self.assertEqual(ex.results[1].png, "iVBORw==")
        self.assertEqual(ex.results[1].formats(), ["text", "png"])
        self.assertTrue(ex.results[0].is_main_result)
        self.assertEqual(ex.results[0]["text"], "215")
        self.assertIsNotNone(ex.results[1].png_bytes())

    def test_run_code_user_error_is_returned_not_raised(self):
        sb = Sandbox(SB, self.c)
        err = {"name": "TimeoutError", "value": "mine", "traceback": ["Traceback...", "TimeoutError: mine"]}
        self.route("POST", "/v1/sandboxes/sbx_1/code", json_answer(200, execution(error=err)))
        ex = sb.run_code("raise TimeoutError('mine')")
        self.assertEqual((ex.error.name, ex.error.value), ("TimeoutError", "mine"))
        self.assertEqual(len(ex.error.traceback), 2)

    def test_run_code_timeout_and_kernel_death_raise_typed(self):
        sb = Sandbox(SB, self.c)
        self.route("POST", "/v1/sandboxes/sbx_1/code", json_answer(200, execution(
            logs={"stdout": ["before\n"], "stderr": []},
            error={"name": "TimeoutError", "value": "execution timed out after 1s", "traceback": []})))
        with self.assertRaises(CellTimeoutError) as cm:
            sb.run_code("while True: pass", timeout=1)
        self.assertIsInstance(cm.exception, SandboxTimeoutError)
        self.assertEqual(cm.exception.message, "execution timed out after 1s")
        self.assertEqual(cm.exception.execution.logs.stdout, ["before\n"])
        ex = sb.run_code("while True: pass", timeout=1, raise_on_failure=False)
        self.assertEqual(ex.error.name, "TimeoutError")

        self.route("POST", "/v1/sandboxes/sbx_1/code", json_answer(200, execution(
            error={"name": "KernelDied", "value": "the kernel was killed by signal 9", "traceback": []})))
        with self.assertRaises(KernelDiedError) as cm:
            sb.run_code("import os; os.kill(os.getpid(), 9)")
        self.assertEqual(cm.exception.code, "kernel_died")
        self.assertIn("signal 9", str(cm.exception))

    def test_run_code_streaming(self):
        sb = Sandbox(SB, self.c)
        done = execution(results=[{"text": "3", "is_main_result": True}], logs={"stdout": ["a", "b"], "stderr": []})
        self.route("POST", "/v1/sandboxes/sbx_1/code", sse_answer([
            ("stdout", {"data": "a"}), ("stdout", {"data": "b"}), ("future_event", {"x": 1}),
            ("result", {"text": "3", "is_main_result": True}),
            ("done", done)], chunk=3))
        seen = []
        ex = sb.run_code("x", on_stdout=lambda s: seen.append(s), on_result=lambda r: seen.append(r.text))
        self.assertEqual(seen, ["a", "b", "3"])
        self.assertEqual(ex.text, "3")

    def test_run_code_streaming_failure(self):
        sb = Sandbox(SB, self.c)
        self.route("POST", "/v1/sandboxes/sbx_1/code", sse_answer([
            ("failure", {"code": "unavailable", "message": "the sandbox's agent went away"})]))
        with self.assertRaises(UnavailableError) as cm:
            sb.run_code("x", on_stdout=print)
        self.assertEqual(cm.exception.message, "the sandbox's agent went away")

    def test_plain_answer_to_stream_request_is_replayed(self):
        sb = Sandbox(SB, self.c)
        self.route("POST", "/v1/sandboxes/sbx_1/code", json_answer(200, execution(
            logs={"stdout": ["p"], "stderr": ["q"]}, error={"name": "NameError", "value": "x", "traceback": ["t"]})))
        seen = []
        ex = sb.run_code("x", on_stdout=seen.append, on_stderr=seen.append, on_error=lambda e: seen.append(e.name))
        self.assertEqual(seen, ["p", "q", "NameError"])
        self.assertEqual(ex.error.name, "NameError")

    def test_files(self):
        sb = Sandbox(SB, self.c)
        self.route("GET", "/v1/sandboxes/sbx_1/files", (200, {"Content-Type": "application/octet-stream"}, b"\xff\x00"))
        self.assertEqual(sb.files.read("/bin/x", format="bytes"), b"\xff\x00")
        self.assertEqual(self.last().query, {"path": ["/bin/x"]})
        with self.assertRaises(InvalidArgumentError):
            sb.files.read("/bin/x")
        self.route("PUT", "/v1/sandboxes/sbx_1/files", json_answer(200, {"path": "/workspace/a.txt", "size": 5}))
        w = sb.files.write("a.txt", "héllo", mode=0o600)
        self.assertEqual((w.path, w.size), ("/workspace/a.txt", 5))
        self.assertEqual(self.last().body, "héllo".encode())
        self.assertEqual(self.last().query, {"path": ["a.txt"], "mode": ["0600"]})
        sb.files.write("b.bin", io.BytesIO(b"abc"))
        self.assertEqual(self.last().body, b"abc")
        self.route("GET", "/v1/sandboxes/sbx_1/files/list", json_answer(200, {"path": "/workspace", "entries": [
            {"name": "a.txt", "path": "/workspace/a.txt", "type": "file", "size": 5},
            {"name": "d", "path": "/workspace/d", "type": "dir", "size": 0}]}))
        entries = sb.files.list("/workspace")
        self.assertEqual([(e.name, e.is_dir) for e in entries], [("a.txt", False), ("d", True)])
        self.assertTrue(sb.files.exists("/workspace/d"))
        self.assertFalse(sb.files.exists("/workspace/zz"))
        self.route("DELETE", "/v1/sandboxes/sbx_1/files", (204, {}, b""))
        sb.files.remove("d", recursive=True)
        self.assertEqual(self.last().query, {"path": ["d"], "recursive": ["true"]})

    def test_checkpoint_fork_and_snapshots(self):
        sb = Sandbox(SB, self.c)
        snap = {"id": "snap_1", "type": "memory", "sandbox_id": "sbx_1", "size_bytes": 123}
        self.route("POST", "/v1/sandboxes/sbx_1/checkpoint", json_answer(200, snap))
        s = sb.checkpoint(checkpoint_type=CheckpointType.MEMORY, name="golden")
        self.assertEqual(self.last().json(), {"type": "memory", "name": "golden"})
        self.assertEqual((s.snapshot_id, s.id, s.type, s.size_bytes), ("snap_1", "snap_1", "memory", 123))
        sb.checkpoint()
        self.assertEqual(self.last().json(), {"type": "filesystem"})
        sb.checkpoint("memory")
        self.assertEqual(self.last().json(), {"type": "memory"})
        self.route("POST", "/v1/sandboxes/sbx_1/fork", json_answer(200, {
            "snapshot": snap, "sandboxes": [dict(SB, id="sbx_a", name="l"), dict(SB, id="sbx_b", name="g")]}))
        branches = sb.fork(2, names=["l", "g"])
        self.assertEqual([b.id for b in branches], ["sbx_a", "sbx_b"])
        self.assertEqual(branches.snapshot.id, "snap_1")
        self.assertEqual(self.last().json(), {"count": 2, "names": ["l", "g"]})
        self.route("GET", "/v1/snapshots", json_answer(200, {"snapshots": [snap]}))
        self.assertEqual([x.id for x in Snapshot.list("sbx_1", client=self.c)], ["snap_1"])
        self.assertEqual(self.last().query, {"sandbox": ["sbx_1"], "limit": ["1000"]})
        self.route("DELETE", "/v1/snapshots/snap_1", (204, {}, b""))
        Snapshot.delete("snap_1", client=self.c)
        s.delete()
        self.assertEqual([r.method for r in self.srv.requests[-2:]], ["DELETE", "DELETE"])

    def test_resume_and_suspend_are_idempotent(self):
        sb = Sandbox(NAMED, self.c)
        self.route("POST", "/v1/sandboxes/sbx_2/resume",
                   error_answer(409, "failed_precondition", "sandbox is running, not suspended"))
        self.route("GET", "/v1/sandboxes/sbx_2", json_answer(200, NAMED))
        self.assertEqual(sb.resume().state, "running")
        self.route("GET", "/v1/sandboxes/sbx_2", json_answer(200, dict(NAMED, state="terminated")))
        with self.assertRaises(FailedPreconditionError) as cm:
            sb.resume()
        self.assertEqual(cm.exception.message, "sandbox is running, not suspended")
        self.route("POST", "/v1/sandboxes/sbx_2/suspend", error_answer(409, "failed_precondition", "already"))
        self.route("GET", "/v1/sandboxes/sbx_2", json_answer(200, dict(NAMED, state="suspended")))
        self.assertEqual(sb.suspend().state, "suspended")

    def test_close_terminates_unnamed_only(self):
        self.route("DELETE", "/v1/sandboxes/sbx_1", json_answer(200, dict(SB, state="terminated")))
        with Sandbox(SB, self.c):
            pass
        self.assertEqual(self.last().method, "DELETE")
        n = len(self.srv.requests)
        Sandbox(NAMED, self.c).close()
        self.assertEqual(len(self.srv.requests), n)
        # Closing an already removed sandbox is quiet.
        self.route("DELETE", "/v1/sandboxes/sbx_1", error_answer(404, "not_found", "gone"))
        Sandbox(SB, self.c).close()
        with self.assertRaises(NotFoundError):
            Sandbox(SB, self.c).terminate()


class ImageTest(StubTest):
    def test_recipe(self):
        img = (Image(name="code-interpreter", base_image="python")
               .run("pip install pandas").run(["echo", "a b"]).env({"A": "1"}, B="2").workdir("/workspace")
               .user("user"))
        self.assertEqual(img.recipe(registered_name="ci"), {
            "name": "ci", "base": "python", "steps": [
                {"run": "pip install pandas"}, {"run": "echo 'a b'"}, {"env": {"A": "1", "B": "2"}},
                {"workdir": "/workspace"}, {"user": "user"}]})
        self.assertIsNone(img.context_tar())

    def test_docker_python_base_maps_to_python(self):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            self.assertEqual(Image("x", base_image="python:3.12-slim").recipe()["base"], "python")
        self.assertTrue(w)
        self.assertEqual(Image("x", base_image="debian:bookworm").recipe()["base"], "debian:bookworm")

    def test_build_json_streams_logs(self):
        img_doc = {"name": "ci", "id": "sha256:1", "layers": ["a"]}
        self.route("POST", "/v1/images", sse_answer([
            ("step", {"type": "step", "step": 1, "total": 1, "kind": "run", "detail": "echo hi"}),
            ("log", {"type": "log", "step": 1, "line": "hi"}),
            ("done", {"type": "done", "image": img_doc})]))
        lines, kinds = [], []
        info = Image("ci").run("echo hi").build(on_log=lines.append, on_event=lambda e: kinds.append(e.type),
                                                 client=self.c)
        self.assertEqual((info.name, info.id), ("ci", "sha256:1"))
        self.assertEqual(lines, ["hi"])
        self.assertEqual(kinds, ["step", "log", "done"])
        self.assertEqual(self.last().headers["Content-Type"], "application/json")
        self.assertEqual(self.last().json()["steps"], [{"run": "echo hi"}])

    def test_build_error_event(self):
        self.route("POST", "/v1/images", sse_answer([
            ("error", {"code": "invalid_argument", "message": "step 1 (run) exited with status 2"})]))
        with self.assertRaises(InvalidArgumentError) as cm:
            Image("ci").run("false").build(client=self.c)
        self.assertIn("status 2", cm.exception.message)

    def test_build_with_copy_sends_multipart_tar(self):
        d = tempfile.mkdtemp()
        self.addCleanup(lambda: __import__("shutil").rmtree(d))
        os.makedirs(os.path.join(d, "pkg", "sub"))
        with open(os.path.join(d, "pkg", "sub", "m.py"), "w") as f:
            f.write("X = 1\n")
        with open(os.path.join(d, "one.txt"), "w") as f:
            f.write("one")
        self.route("POST", "/v1/images", json_answer(201, {"name": "ci", "id": "sha256:2"}))
        img = Image("ci").copy(os.path.join(d, "pkg"), "/opt/pkg").copy(os.path.join(d, "one.txt"), "/opt/one.txt")
        info = img.build(client=self.c)
        self.assertEqual(info.id, "sha256:2")
        req = self.last()
        ctype = req.headers["Content-Type"]
        self.assertTrue(ctype.startswith("multipart/form-data; boundary="))
        msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            b"Content-Type: " + ctype.encode() + b"\r\n\r\n" + req.body)
        parts = {p.get_param("name", header="content-disposition"): p for p in msg.iter_parts()}
        recipe = json.loads(parts["recipe"].get_content())
        self.assertEqual(recipe["steps"], [{"copy": {"src": "0/pkg", "dest": "/opt/pkg"}},
                                           {"copy": {"src": "1/one.txt", "dest": "/opt/one.txt"}}])
        with tarfile.open(fileobj=io.BytesIO(parts["context"].get_content())) as tf:
            names = sorted(tf.getnames())
            self.assertEqual(names, ["0/pkg", "0/pkg/sub", "0/pkg/sub/m.py", "1/one.txt"])
            self.assertEqual(tf.extractfile("0/pkg/sub/m.py").read(), b"X = 1\n")
            self.assertEqual({m.uid for m in tf.getmembers()}, {0})

    def test_copy_of_missing_file(self):
        with self.assertRaises(FileNotFoundError):
            Image("x").copy("/nonexistent/zz", "/opt/zz")


def paged(items_key, items, size, extra=None):
    """A route answer that pages ``items`` as the daemon does, ``size`` a
    page whatever the limit asked (a daemon may give fewer): the items after
    the cursor "at-<i>", and next_cursor while more follow."""

    def write(h):
        q = parse_qs(urlsplit(h.path).query)
        start = int(q["cursor"][0][3:]) + 1 if "cursor" in q else 0
        end = min(start + size, len(items))
        doc = {items_key: items[start:end]}
        if end < len(items):
            doc["next_cursor"] = "at-%d" % (end - 1)
        if start == 0 and extra:
            doc.update(extra)
        body = json.dumps(doc).encode()
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    return write


class ListTest(StubTest):
    """The list calls follow next_cursor to the last page."""

    def test_sandboxes_follow_cursors(self):
        sbs = [dict(SB, id="sbx_%d" % i) for i in range(7)]
        self.route("GET", "/v1/sandboxes", paged("sandboxes", sbs, 3))
        got = Sandbox.list(state="running", labels={"team": "a"}, include_terminated=True, client=self.c)
        self.assertEqual([s.id for s in got], ["sbx_%d" % i for i in range(7)])
        qs = [r.query for r in self.srv.requests]
        self.assertEqual([q.get("cursor") for q in qs], [None, ["at-2"], ["at-5"]])
        for q in qs:
            self.assertEqual((q["limit"], q["state"], q["label"], q["include_terminated"]),
                             (["1000"], ["running"], ["team:a"], ["true"]))
        self.srv.requests.clear()
        Sandbox.list(client=self.c)
        self.assertNotIn("include_terminated", self.srv.requests[0].query)

    def test_snapshots_and_images_follow_cursors(self):
        snaps = [{"id": "snap_%d" % i, "type": "memory"} for i in range(5)]
        self.route("GET", "/v1/snapshots", paged("snapshots", snaps, 2))
        self.assertEqual([s.id for s in Snapshot.list(client=self.c)], ["snap_%d" % i for i in range(5)])
        self.assertEqual(len(self.srv.requests), 3)
        imgs = [{"name": "img-%d" % i} for i in range(4)]
        self.route("GET", "/v1/images", paged("images", imgs, 2, {"building": [{"name": "python", "state": "building"}]}))
        self.assertEqual([i.name for i in Image.list(client=self.c)], ["img-%d" % i for i in range(4)])
        # A list of exactly one page is one request; an empty one is [].
        self.srv.requests.clear()
        self.route("GET", "/v1/images", paged("images", imgs, 4))
        self.assertEqual(len(Image.list(client=self.c)), 4)
        self.assertEqual(len(self.srv.requests), 1)
        self.route("GET", "/v1/images", json_answer(200, {"images": []}))
        self.assertEqual(Image.list(client=self.c), [])

    def test_async_list_follows_cursors(self):
        sbs = [dict(SB, id="sbx_%d" % i) for i in range(5)]
        self.route("GET", "/v1/sandboxes", paged("sandboxes", sbs, 2))
        got = asyncio.run(AsyncSandbox.list(client=self.c))
        self.assertEqual([s.id for s in got], ["sbx_%d" % i for i in range(5)])

    def test_a_repeated_cursor_is_an_error(self):
        self.route("GET", "/v1/sandboxes", json_answer(200, {"sandboxes": [SB], "next_cursor": "same"}))
        with self.assertRaises(InternalError) as cm:
            Sandbox.list(client=self.c)
        self.assertIn("cursor", str(cm.exception))
        self.assertEqual(len(self.srv.requests), 2)

    def test_a_bad_cursor_is_invalid_argument(self):
        self.route("GET", "/v1/sandboxes", [json_answer(200, {"sandboxes": [SB], "next_cursor": "x"}),
                                           error_answer(400, "invalid_argument", "cursor: not a cursor this server made")])
        with self.assertRaises(InvalidArgumentError):
            Sandbox.list(client=self.c)


class AsyncTest(StubTest):
    def test_async_flow(self):
        self.route("POST", "/v1/sandboxes", json_answer(201, SB))
        self.route("POST", "/v1/sandboxes/sbx_1/code", sse_answer([
            ("stdout", {"data": "a"}), ("done", execution(results=[{"text": "1", "is_main_result": True}]))]))
        self.route("DELETE", "/v1/sandboxes/sbx_1", json_answer(200, dict(SB, state="terminated")))
        self.route("GET", "/v1/sandboxes/nope", error_answer(404, "not_found", 'sandbox "nope" not found'))
        seen = []

        async def on_stdout(s):
            seen.append((s, asyncio.get_running_loop() is loop_holder[0]))

        loop_holder = []

        async def main():
            loop_holder.append(asyncio.get_running_loop())
            async with await AsyncSandbox.create(client=self.c) as sb:
                ex = await sb.run_code("1", on_stdout=on_stdout)
                self.assertEqual(ex.text, "1")
            with self.assertRaises(NotFoundError):
                await AsyncSandbox.connect("nope", client=self.c)

        asyncio.run(main())
        self.assertEqual(seen, [("a", True)])
        self.assertEqual(self.last().method, "GET")
        self.assertIn("DELETE", [r.method for r in self.srv.requests])


class ChatTest(StubTest):
    def test_chat(self):
        self.route("POST", "/v1/chat", json_answer(200, {"answer": "North", "conversation_id": "c1",
                                                          "sandbox": "sbx_1", "rounds": 2}))
        r = forkbox.chat("which region?", csv="a,b\n1,2\n", client=self.c)
        self.assertEqual((r.answer, r.conversation_id, r.rounds, r.images), ("North", "c1", 2, []))
        self.assertEqual(self.last().json(), {"question": "which region?", "csv": "a,b\n1,2\n"})
        self.route("POST", "/v1/chat", error_answer(503, "unavailable", "chat is not enabled on this server"))
        with self.assertRaises(UnavailableError):
            forkbox.chat("q", client=self.c)


if __name__ == "__main__":
    unittest.main()
