"""The generated wire types (forkbox/wire.py, made by internal/apigen from
the API's OpenAPI document) against the SDK's hand-written objects."""

import unittest

from forkbox import ChatResponse, models, wire

# Each object the SDK builds from a JSON answer, with the wire type of that
# answer.
RECORDS = {
    models.SandboxInfo: wire.Sandbox,
    models.CommandResult: wire.ExecResult,
    models.FileInfo: wire.FileInfo,
    models.WriteInfo: wire.WriteFileResult,
    models.ImageInfo: wire.Image,
    models.CodeContext: wire.Context,
    models.Cell: wire.Cell,
    models.NotebookRun: wire.NotebookRun,
    models.Pool: wire.Pool,
    ChatResponse: wire.ChatResponse,
}


def keys(td):
    return set(td.__required_keys__) | set(td.__optional_keys__)


class WireTest(unittest.TestCase):
    def test_every_schema_is_a_typeddict(self):
        self.assertGreater(len(wire.__all__), 50)
        for name in wire.__all__:
            td = getattr(wire, name)
            self.assertTrue(isinstance(td, type) and issubclass(td, dict) and hasattr(td, "__required_keys__"), name)
            self.assertTrue(keys(td), "%s has no keys" % name)

    def test_records_read_fields_of_the_api(self):
        # A field the SDK reads that the API does not send is a typo or a
        # field the API dropped.
        for record, td in RECORDS.items():
            missing = set(record._fields) - keys(td)
            self.assertFalse(missing, "%s reads %s, which wire.%s lacks" % (record.__name__, sorted(missing), td.__name__))

    def test_required_and_optional_keys(self):
        # Sent always (no omitempty in package api) or only when set.
        self.assertIn("id", wire.Sandbox.__required_keys__)
        self.assertIn("state", wire.Sandbox.__required_keys__)
        self.assertIn("name", wire.Sandbox.__optional_keys__)
        self.assertEqual(wire.Execution.__required_keys__, frozenset({"logs", "results", "error", "execution_count", "duration_ms"}))
        self.assertEqual(wire.Result.__required_keys__, frozenset())


if __name__ == "__main__":
    unittest.main()
