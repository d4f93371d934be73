// Unit tests of the error mapping: every API error code becomes its typed
// error with the server's message; bodies that are not the API's fall back
// on the status.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  AuthenticationError,
  ConflictError,
  ConnectionError,
  FailedPreconditionError,
  ForkboxError,
  InternalError,
  InvalidArgumentError,
  NotFoundError,
  PermissionDeniedError,
  ResourceExhaustedError,
  TimeoutError,
  TooLargeError,
  UnavailableError,
  errorFromResponse,
  codeForStatus,
} from "../dist/index.js";

const CASES = [
  ["invalid_argument", 400, InvalidArgumentError],
  ["unauthenticated", 401, AuthenticationError],
  ["permission_denied", 403, PermissionDeniedError],
  ["not_found", 404, NotFoundError],
  ["conflict", 409, ConflictError],
  ["failed_precondition", 409, FailedPreconditionError],
  ["too_large", 413, TooLargeError],
  ["resource_exhausted", 429, ResourceExhaustedError],
  ["timeout", 504, TimeoutError],
  ["unavailable", 503, UnavailableError],
  ["internal", 500, InternalError],
];

test("errorFromResponse: each code maps to its class with the server's message", () => {
  for (const [code, status, cls] of CASES) {
    const msg = `sandbox "x" ${code} here`;
    const err = errorFromResponse(status, "", JSON.stringify({ error: { code, message: msg } }));
    assert.ok(err instanceof cls, `${code} → ${err.constructor.name}`);
    assert.ok(err instanceof ForkboxError);
    assert.ok(err instanceof Error);
    assert.equal(err.code, code);
    assert.equal(err.status, status);
    assert.equal(err.message, msg);
    assert.equal(err.name, cls.name);
  }
});

test("error class hierarchy", () => {
  assert.ok(new FailedPreconditionError("failed_precondition", 409, "m") instanceof ConflictError);
  assert.ok(new ConnectionError("unavailable", 0, "m") instanceof UnavailableError);
  assert.ok(!(new NotFoundError("not_found", 404, "m") instanceof ConflictError));
});

test("errorFromResponse: an unknown code is an InternalError keeping the code", () => {
  const err = errorFromResponse(418, "I'm a teapot", '{"error":{"code":"teapot","message":"short and stout"}}');
  assert.ok(err instanceof InternalError);
  assert.equal(err.code, "teapot");
  assert.equal(err.status, 418);
  assert.equal(err.message, "short and stout");
});

test("errorFromResponse: bodies that are not the API's", () => {
  let err = errorFromResponse(404, "Not Found", "404 page not found\n");
  assert.ok(err instanceof NotFoundError);
  assert.equal(err.message, "404 page not found");
  err = errorFromResponse(502, "Bad Gateway", "<html><body>bad gateway</body></html>");
  assert.ok(err instanceof UnavailableError);
  assert.equal(err.message, "HTTP 502 Bad Gateway");
  err = errorFromResponse(500, "", "");
  assert.ok(err instanceof InternalError);
  assert.equal(err.message, "HTTP 500");
  err = errorFromResponse(401, "Unauthorized", '{"error":{}}');
  assert.ok(err instanceof AuthenticationError);
  // An error body without a message reads as its code.
  err = errorFromResponse(409, "", '{"error":{"code":"conflict"}}');
  assert.equal(err.message, "conflict");
});

test("codeForStatus", () => {
  assert.equal(codeForStatus(400), "invalid_argument");
  assert.equal(codeForStatus(413), "too_large");
  assert.equal(codeForStatus(504), "timeout");
  assert.equal(codeForStatus(599), "internal");
});
