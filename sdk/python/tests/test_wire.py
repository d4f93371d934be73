"""The generated wire types (forkbox/wire.py, made by internal/apigen from
the API's Go types) against the SDK's hand-written objects and requests.

Every object the SDK builds from the daemon's JSON names the wire TypedDict
of that JSON (``_wire``). Its attributes must be the TypedDict's keys: an
attribute the wire lacks is a key the API renamed or dropped (or a typo),
and a key no attribute reaches is one the SDK does not show. Names that
differ from the wire on purpose are listed in the class (``_aliases``,
``_derived``) with why. The requests the SDK sends are checked the same way
against the wire's request types."""

import inspect
import sys
import typing
import unittest
from typing import Any, Literal, Union

import forkbox
from forkbox import Client, ChatResponse, Image, Sandbox, create_pool, models, wire
from forkbox.image import BuildEvent
from forkbox.models import wire_keys
from forkbox.sandbox import ForkResult, Snapshot

from .stub import StubServer, json_answer

chat_module = sys.modules["forkbox.chat"]

# Each object the SDK builds from a JSON answer, with the wire type of that
# answer.
MODELS = {
    models.SandboxInfo: wire.Sandbox,
    models.CommandResult: wire.ExecResult,
    models.Result: wire.Result,
    models.Logs: wire.Logs,
    models.ExecutionError: wire.ExecutionError,
    models.Execution: wire.Execution,
    models.FileInfo: wire.FileInfo,
    models.WriteInfo: wire.WriteFileResult,
    models.ImageInfo: wire.Image,
    models.CodeContext: wire.Context,
    models.Cell: wire.Cell,
    models.NotebookRun: wire.NotebookRun,
    models.Pool: wire.Pool,
    Snapshot: wire.Snapshot,
    ForkResult: wire.ForkResult,
    BuildEvent: wire.BuildEvent,
    ChatResponse: wire.ChatResponse,
}

# The classes forkbox exports that are not built from a JSON answer.
NOT_MODELS = {Client, Sandbox, forkbox.AsyncSandbox, forkbox.Files, forkbox.AsyncFiles, forkbox.AsyncSnapshot,
              Image, models.CheckpointType}

OFFLINE = Client("http://127.0.0.1:9", api_key="")  # never called: a model's client for its methods


def keys(td):
    return set(td.__required_keys__) | set(td.__optional_keys__)


def is_typeddict(tp):
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__required_keys__")


def sample(tp, depth=0):
    """A JSON value of wire type tp with every key set (lists of one)."""
    if depth > 12:
        raise RecursionError("wire type nests too deep: %r" % (tp,))
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if is_typeddict(tp):
        return {k: sample(t, depth + 1) for k, t in typing.get_type_hints(tp).items()}
    if tp is str or tp is Any:
        return "s"
    if tp is bool:
        return True
    if tp is int:
        return 2
    if tp is float:
        return 1.5
    if origin is Literal:
        return args[0]
    if origin is Union:
        return sample(next(a for a in args if a is not type(None)), depth + 1)
    if origin is list:
        return [sample(args[0], depth + 1)]
    if origin is dict:
        return {"k": sample(args[1], depth + 1)}
    raise TypeError("no sample for wire type %r" % (tp,))


def build(cls, doc):
    """The model as the SDK builds it from a JSON document."""
    if cls in (models.Execution, models.ExecutionError):
        return cls.from_dict(doc)
    if cls is models.Logs:
        return models.Logs(doc.get("stdout"), doc.get("stderr"))
    if cls is Snapshot:
        return Snapshot(doc, OFFLINE)
    if cls is ForkResult:  # as Sandbox.fork builds it
        return ForkResult((Sandbox(s, OFFLINE) for s in doc["sandboxes"]), Snapshot(doc["snapshot"], OFFLINE))
    return cls(doc)


def model_fields(cls, obj):
    """The public names a model offers as data: instance attributes,
    annotated attributes and properties (methods are not fields)."""
    names = {n for n in vars(obj) if not n.startswith("_")}
    for klass in cls.__mro__:
        names |= {n for n, t in klass.__dict__.get("__annotations__", {}).items()
                  if not n.startswith("_") and "ClassVar" not in str(t)}
        names |= {n for n, v in klass.__dict__.items() if isinstance(v, property) and not n.startswith("_")}
    names.discard("raw")
    return names


def problems(cls, td):
    """What is wrong between model cls and its wire type td, in words that
    name the field; empty when they match."""
    out = []
    name, wname = cls.__name__, "wire." + td.__name__
    wkeys = wire_keys(td)
    if set(wkeys) != keys(td):
        out.append("wire_keys(%s) is %s, not its keys %s" % (wname, sorted(wkeys), sorted(keys(td))))
    aliases = dict(getattr(cls, "_aliases", {}) or {})
    derived = set(getattr(cls, "_derived", ()) or ())
    items = getattr(cls, "_items", None)
    doc = sample(td)
    try:
        obj = build(cls, doc)
    except Exception as e:  # noqa: BLE001 - the message is the point
        return ["%s cannot be built from a full %s: %r" % (name, wname, e)]
    fields = model_fields(cls, obj)
    for f in sorted(fields - set(wkeys) - set(aliases) - derived):
        out.append("%s.%s is not a key of %s: a key the API renamed or dropped, or a typo? Use the wire's name, "
                   "or list it in %s._aliases (another name for a key) or %s._derived (computed), with why"
                   % (name, f, wname, name, name))
    for alias, key in sorted(aliases.items()):
        if key not in wkeys:
            out.append("%s._aliases says %s.%s is the wire key %r, which %s lacks" % (name, name, alias, key, wname))
        if alias not in fields:
            out.append("%s._aliases lists %r, which %s does not have" % (name, alias, name))
    for d in sorted(derived):
        if d not in fields:
            out.append("%s._derived lists %r, which %s does not have" % (name, d, name))
        if d in wkeys:
            out.append("%s._derived lists %r, which is a key of %s, not derived" % (name, d, wname))
    reached = fields | set(aliases.values()) | ({items} if items else set())
    for k in wkeys:
        if k in reached:
            continue
        why = ""
        if hasattr(cls, k) and not isinstance(inspect.getattr_static(cls, k), property):
            why = " (%s.%s is a method or class attribute, which the key cannot take)" % (name, k)
        elif hasattr(cls, k):
            why = " (%s.%s is a property; list it in _aliases or _derived if it stands for the key)" % (name, k)
        out.append("%s key %r is not reachable from %s: the API added it? Make it an attribute%s"
                   % (wname, k, name, why))
    # Every reachable key carries the JSON's value (the sample sets them all).
    for k in wkeys:
        if k in fields and getattr(obj, k) is None:
            out.append("%s.%s is None though the JSON has %r: it reads another key?" % (name, k, k))
    for alias in aliases:
        if alias in fields and getattr(obj, alias) is None:
            out.append("%s.%s is None though the JSON has %r" % (name, alias, aliases[alias]))
    for d in derived & fields:
        getattr(obj, d)  # computes without failing
    if items and len(obj) != len(doc.get(items) or []):
        out.append("%s holds %d items, not the %d of %r" % (name, len(obj), len(doc.get(items) or []), items))
    for f in getattr(cls, "_defaults", {}):
        if f not in wkeys:
            out.append("%s._defaults names %r, which %s lacks" % (name, f, wname))
    return out


class WireTest(unittest.TestCase):
    def test_every_schema_is_a_typeddict(self):
        self.assertGreater(len(wire.__all__), 50)
        for name in wire.__all__:
            td = getattr(wire, name)
            self.assertTrue(is_typeddict(td), name)
            self.assertTrue(keys(td), "%s has no keys" % name)
            self.assertEqual(set(typing.get_type_hints(td)), keys(td), name)
            sample(td)  # every wire type resolves, to JSON types

    def test_required_and_optional_keys(self):
        # Sent always (no omitempty in package api) or only when set.
        self.assertIn("id", wire.Sandbox.__required_keys__)
        self.assertIn("state", wire.Sandbox.__required_keys__)
        self.assertIn("name", wire.Sandbox.__optional_keys__)
        self.assertEqual(wire.Execution.__required_keys__, frozenset({"logs", "results", "error", "execution_count", "duration_ms"}))
        self.assertEqual(wire.Result.__required_keys__, frozenset())


class ModelsTest(unittest.TestCase):
    def test_models_name_their_wire_type(self):
        for cls, td in MODELS.items():
            with self.subTest(model=cls.__name__):
                self.assertIs(cls._wire, td, "%s._wire is %r, want wire.%s" % (cls.__name__, cls._wire, td.__name__))
                raw = typing.get_type_hints(cls).get("raw")
                if isinstance(raw, typing.TypeVar):  # _Record[td]: raw is td
                    base = next(b for b in cls.__mro__ for b in b.__dict__.get("__orig_bases__", ())
                                if typing.get_origin(b) is models._Record)
                    raw = typing.get_args(base)[0]
                if raw is not None:
                    self.assertIs(raw, td, "%s.raw is typed %r, want wire.%s" % (cls.__name__, raw, td.__name__))

    def test_every_model_is_checked(self):
        # A class forkbox exports is a model checked here, or not a model.
        for name in forkbox.__all__:
            obj = getattr(forkbox, name)
            if not isinstance(obj, type) or issubclass(obj, BaseException) or obj in NOT_MODELS:
                continue
            self.assertIn(obj, MODELS, "forkbox.%s: add it to MODELS with its wire type, or to NOT_MODELS" % name)

    def test_model_fields_match_their_wire_type(self):
        # Fields the API adds are picked up by the records or fail here;
        # fields the models have that the API lacks (renamed, dropped,
        # misspelt) fail here, by name.
        found = []
        for cls, td in MODELS.items():
            found.extend(problems(cls, td))
        self.assertFalse(found, "models and wire types disagree:\n  " + "\n  ".join(found))

    def test_the_check_names_the_field(self):
        class Probe(typing.TypedDict, total=False):
            kept: str
            added: int

        class Record(models._Record[Probe]):
            _fields = ("kept", "renamed")

        class Plain:
            _wire = Probe

            def __init__(self, raw):
                self.raw = raw
                self.kept = raw.get("kept")

        self.assertEqual(Record._fields, ("kept", "renamed", "added"))  # the new key is picked up
        self.assertEqual(len(problems(Record, Probe)), 1)
        self.assertIn("Record.renamed is not a key of wire.Probe", problems(Record, Probe)[0])
        self.assertEqual(len(problems(Plain, Probe)), 1)
        self.assertIn("wire.Probe key 'added' is not reachable from Plain", problems(Plain, Probe)[0])

    def test_a_record_without_wire_type_is_refused(self):
        with self.assertRaises(TypeError):
            class Untyped(models._Record):  # noqa: F841
                _fields = ("id",)

    def test_new_wire_keys_become_attributes(self):
        info = models.SandboxInfo({"id": "sbx_1", "node": "n2", "suspend_on_idle": True})
        self.assertEqual((info.node, info.suspend_on_idle, info.name), ("n2", True, None))
        self.assertEqual(repr(info), "SandboxInfo(id='sbx_1')")

    def test_result_formats_are_the_wire_keys(self):
        self.assertEqual(models.RESULT_FORMATS,
                         ("text", "html", "markdown", "latex", "png", "jpeg", "svg", "json", "javascript", "pdf"))
        self.assertEqual(set(models.RESULT_FORMATS) | {"extra", "is_main_result"}, keys(wire.Result))

    def test_checkpoint_type_is_the_wires(self):
        values = {t.value for t in models.CheckpointType}
        for td in (wire.CheckpointRequest, wire.Snapshot):
            lit = typing.get_type_hints(td)["type"]
            self.assertEqual(values, set(typing.get_args(lit)), "CheckpointType against wire.%s's type" % td.__name__)
        self.assertEqual(set(typing.get_args(typing.get_type_hints(models.CheckpointType)["_value_"])), values)


def conforms(value, tp, where):
    """What is wrong with JSON value against wire type tp (names the key)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if is_typeddict(tp):
        if not isinstance(value, dict):
            return ["%s is %r, not an object (wire.%s)" % (where, value, tp.__name__)]
        out = ["%s lacks the required key %r of wire.%s" % (where, k, tp.__name__)
               for k in sorted(tp.__required_keys__ - set(value))]
        hints = typing.get_type_hints(tp)
        for k, v in value.items():
            if k not in hints:
                out.append("%s has %r, which wire.%s lacks" % (where, k, tp.__name__))
            else:
                out.extend(conforms(v, hints[k], "%s.%s" % (where, k)))
        return out
    if tp is Any:
        return []
    if origin is Union:
        if any(not conforms(value, a, where) for a in args):
            return []
        return ["%s is %r, not %r" % (where, value, tp)]
    if origin is Literal:
        return [] if value in args else ["%s is %r, not one of %r" % (where, value, args)]
    if origin is list:
        if not isinstance(value, list):
            return ["%s is %r, not a list" % (where, value)]
        return [p for i, v in enumerate(value) for p in conforms(v, args[0], "%s[%d]" % (where, i))]
    if origin is dict:
        if not isinstance(value, dict):
            return ["%s is %r, not an object" % (where, value)]
        return [p for k, v in value.items() for p in conforms(v, args[1], "%s[%r]" % (where, k))]
    if tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, tp)
    return [] if ok else ["%s is %r, not %s" % (where, value, tp.__name__)]


class RequestsTest(unittest.TestCase):
    """Every JSON body the SDK sends, with every argument set, is of the
    wire's request type."""

    def setUp(self):
        self.srv = StubServer()
        self.addCleanup(self.srv.close)
        self.c = Client(self.srv.url, api_key="k")
        sb = {"id": "sbx_1", "state": "running"}
        ex = {"logs": {"stdout": [], "stderr": []}, "results": [], "error": None, "execution_count": 1}
        for (method, path), doc in {
            ("POST", "/v1/sandboxes"): sb,
            ("POST", "/v1/sandboxes/sbx_1/exec"): {"stdout": "", "stderr": "", "exit_code": 0, "duration_ms": 1},
            ("POST", "/v1/sandboxes/sbx_1/code"): ex,
            ("POST", "/v1/sandboxes/sbx_1/contexts"): {"id": "ctx_1"},
            ("POST", "/v1/sandboxes/sbx_1/checkpoint"): {"id": "snap_1", "type": "memory"},
            ("PUT", "/v1/sandboxes/sbx_1/ports/8000"): {"public": True},
            ("PATCH", "/v1/sandboxes/sbx_1"): sb,
            ("POST", "/v1/sandboxes/sbx_1/fork"): {"snapshot": {"id": "snap_2"}, "sandboxes": [sb]},
            ("POST", "/v1/pools"): {"name": "p"},
            ("POST", "/v1/chat"): {"answer": "a"},
            ("POST", "/v1/images"): {"name": "img"},
        }.items():
            self.srv.routes[(method, path)] = json_answer(200, doc)

    def sent(self, td, call):
        call()
        req = self.srv.requests[-1]
        self.found.extend("not a wire.%s: %s" % (td.__name__, p)
                          for p in conforms(req.json(), td, "%s %s" % (req.method, req.path)))

    def test_requests(self):
        self.found = []
        c = self.c
        sb = Sandbox.create(client=c)
        net = {"allow_out": ["*.pypi.org"], "deny_out": ["10.0.0.0/8"]}
        self.sent(wire.CreateSandboxRequest, lambda: Sandbox.create(
            "n", "python", "snap_1", 1.5, 512, 1024, 60, True, {"A": "1"}, {"team": "a"}, "pool", pids_limit=64,
            max_lifetime_secs=600, auto_resume=False, network=net, client=c))
        self.sent(wire.CreateSandboxRequest, lambda: Sandbox.create(cpus=1, client=c))
        self.sent(wire.ExecRequest, lambda: sb.run("python3", ["-c", 1], {"E": "1"}, "/tmp", 2, stdin=b"in"))
        self.sent(wire.ExecRequest, lambda: sb.run("ls -la"))
        self.sent(wire.RunCodeRequest, lambda: sb.run_code("1", "ctx_1", "python", 1.5, env={"E": "1"}))
        self.sent(wire.CreateContextRequest, lambda: sb.create_code_context("python", "/workspace", {"E": "1"}))
        self.sent(wire.CheckpointRequest, lambda: sb.checkpoint(models.CheckpointType.MEMORY, "golden"))
        self.sent(wire.CheckpointRequest, lambda: sb.checkpoint("filesystem"))
        self.sent(wire.UpdatePortRequest, lambda: sb.port(8000, public=True))
        self.sent(wire.UpdateSandboxRequest, lambda: sb.set_network(["*.pypi.org"], ["10.0.0.0/8"]))
        self.sent(wire.UpdateSandboxRequest, lambda: sb.set_network())
        self.sent(wire.ForkRequest, lambda: sb.fork(1, ["a"], net))
        self.sent(wire.CreatePoolRequest, lambda: create_pool("p", 2, "snap_1", client=c))
        self.sent(wire.CreatePoolRequest, lambda: create_pool("p", 2, image="python", client=c))
        self.sent(wire.ChatRequest, lambda: chat_module.chat("q", "a,b\n1,2\n", "conv_1", csv_name="d.csv",
                                                             file_ids=["f_1"], model="m", client=c))
        self.sent(wire.Recipe, lambda: Image("img", mirror="http://deb.example/debian").run("true").run(["echo", "a b"])
                  .env({"A": "1"}, B="2").workdir("/workspace").user("1000").build(client=c))
        self.assertFalse(self.found, "requests the SDK sends disagree with the wire:\n  " + "\n  ".join(self.found))

    def test_recipe_with_copy(self):
        image = Image("img").copy(__file__, "/opt/t.py")
        found = conforms(image.recipe(), wire.Recipe, "recipe")
        self.assertFalse(found, "\n".join(found))


if __name__ == "__main__":
    unittest.main()
