package apigen

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func mustDecode(t *testing.T, s string) *object {
	t.Helper()
	v, err := decodeOrdered([]byte(s))
	if err != nil {
		t.Fatalf("decode %s: %v", s, err)
	}
	o, ok := v.(*object)
	if !ok {
		t.Fatalf("%s is not an object", s)
	}
	return o
}

func mustEncode(t *testing.T, v any) string {
	t.Helper()
	b, err := encodeJSON(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// compact is JSON text without layout, for comparing.
func compact(s string) string {
	return strings.Join(strings.Fields(s), "")
}

func TestOrderedJSON(t *testing.T) {
	in := `{"z": 1, "a": {"y": [true, null, "<b>…</b>"], "b": 2.50}, "m": []}`
	got := mustEncode(t, mustDecode(t, in))
	want := "{\n  \"z\": 1,\n  \"a\": {\n    \"y\": [\n      true,\n      null,\n      \"<b>…</b>\"\n    ],\n    \"b\": 2.50\n  },\n  \"m\": []\n}\n"
	if got != want {
		t.Errorf("round trip:\n%s\nwant (keys in order, numbers as written, no HTML escapes):\n%s", got, want)
	}
	if _, err := decodeOrdered([]byte(`{"a": 1, "a": 2}`)); err == nil {
		t.Error("a key given twice was accepted")
	}
	if _, err := decodeOrdered([]byte(`{} {}`)); err == nil {
		t.Error("data after the value was accepted")
	}
}

func TestParseRoutes(t *testing.T) {
	src := `package httpapi
func (s *Server) routes() {
	h := func(pattern string, f handler) { s.mux.Handle(pattern, s.instrument(pattern, f)) }
	h("GET /healthz", s.health)
	s.mux.Handle("GET /metrics", metrics)
	h("/v1/x/{id}/{path...}", s.proxy)
	other("GET /not/a/route", nil)
}
func (s *Server) elsewhere() { h("GET /nope", nil) }
`
	got, err := parseRoutes("server.go", src)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"GET /healthz", "GET /metrics", "/v1/x/{id}/{path...}"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("routes = %q, want %q", got, want)
	}
	if _, err := parseRoutes("server.go", "package httpapi\nfunc (s *Server) routes() { h(pattern, nil) }\n"); err == nil {
		t.Error("a pattern that is not a literal was accepted")
	}
	if _, err := parseRoutes("server.go", "package httpapi\nfunc (s *Server) other() {}\n"); err == nil {
		t.Error("a router without routes() was accepted")
	}
}

type testChild struct {
	V string `json:"v"`
}

// testState stands for a string type of package api: its schema is an enum
// of its constants.
type testState string

// testName is a string type without constants.
type testName string

type testWire struct {
	ID       string            `json:"id"`
	Name     string            `json:"name,omitempty"`
	State    testState         `json:"state"`
	States   []testState       `json:"states,omitempty"`
	Size     int64             `json:"size"`
	Count    int               `json:"count"`
	Ratio    float64           `json:"ratio,omitempty"`
	At       time.Time         `json:"at"`
	Done     *time.Time        `json:"done,omitempty"`
	Child    *testChild        `json:"child"`
	Children []testChild       `json:"children,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	Free     map[string]any    `json:"free,omitempty"`
	Tags     []string          `json:"tags"`
	//lint:ignore U1000 only reflection sees it: the schema must leave unexported fields out
	hidden  string
	Skipped string `json:"-"`
}

func testGen() *gen {
	src := &source{
		docs: map[string]string{
			"testWire":       "testWire is a thing; Name names it.",
			"testWire.Count": "Count counts, unlike Size.",
			"testWire.State": "overridden by the overlay",
		},
		pkg:   reflect.TypeFor[testState]().PkgPath(),
		enums: map[string][]string{"testState": {"a", "b"}, "otherState": {"c"}},
	}
	return &gen{src: src, names: map[reflect.Type]string{
		reflect.TypeFor[testWire]():  "Wire",
		reflect.TypeFor[testChild](): "Child",
	}}
}

func TestStructSchema(t *testing.T) {
	over := mustDecode(t, `{"additionalProperties": false, "properties": {
		"state": {"description": "Its state."},
		"tags": {"maxItems": 3, "items": {"pattern": "^[a-z]+$"}},
		"free": {"$ref": "#/components/schemas/Result"},
		"child": {"description": "null until done."}}}`)
	got, err := testGen().structSchema("Wire", reflect.TypeFor[testWire](), over)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"object","additionalProperties":false,
		"description":"testWire is a thing; name names it.",
		"required":["id","state","size","count","at","child","tags"],
		"properties":{
		"id":{"type":"string"},
		"name":{"type":"string"},
		"state":{"type":"string","enum":["a","b"],"description":"Its state."},
		"states":{"type":"array","items":{"type":"string","enum":["a","b"]}},
		"size":{"type":"integer","format":"int64"},
		"count":{"type":"integer","description":"count counts, unlike size."},
		"ratio":{"type":"number"},
		"at":{"type":"string","format":"date-time"},
		"done":{"type":"string","format":"date-time"},
		"child":{"oneOf":[{"$ref":"#/components/schemas/Child"},{"type":"null"}],"description":"null until done."},
		"children":{"type":"array","items":{"$ref":"#/components/schemas/Child"}},
		"labels":{"type":"object","additionalProperties":{"type":"string"}},
		"free":{"$ref":"#/components/schemas/Result"},
		"tags":{"type":"array","items":{"type":"string","pattern":"^[a-z]+$"},"maxItems":3}}}`
	if g := compact(mustEncode(t, got)); g != compact(want) {
		t.Errorf("schema:\n%s\nwant:\n%s", g, compact(want))
	}
}

func TestOverlayCannotContradict(t *testing.T) {
	for _, over := range []string{
		`{"properties": {"size": {"type": "string"}}}`,
		`{"properties": {"child": {"oneOf": []}}}`,
		`{"properties": {"tags": {"items": {"type": "integer"}}}}`,
		`{"required": ["id"]}`,
		`{"properties": {"nope": {"description": "no such field"}}}`,
		`{"properties": {"state": {"enum": ["a", "b"]}}}`,
	} {
		if _, err := testGen().structSchema("Wire", reflect.TypeFor[testWire](), mustDecode(t, over)); err == nil {
			t.Errorf("overlay %s was accepted", over)
		}
	}
	g := testGen()
	delete(g.names, reflect.TypeFor[testChild]())
	if _, err := g.structSchema("Wire", reflect.TypeFor[testWire](), nil); err == nil {
		t.Error("a struct field whose type is no schema was accepted")
	}
	type noEnum struct {
		Name testName `json:"name"`
	}
	if _, err := testGen().structSchema("NoEnum", reflect.TypeFor[noEnum](), nil); err == nil {
		t.Error("a string type of the package without constants was accepted")
	}
}

func TestParseEnums(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.go", `package api
type State string
type Count int
const (
	StateA State = "a"
	Untyped = "u"
	StateB, StateC State = "b", "c"
	Three Count = 3
)
const StateD State = "d"
`)
	write("a_test.go", "package api\nconst StateT State = \"t\"\n")
	src, err := parseAPI(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"State": {"a", "b", "c", "d"}}
	if !reflect.DeepEqual(src.enums, want) {
		t.Errorf("enums = %q, want %q", src.enums, want)
	}
	write("b.go", "package api\nconst StateE State = \"e\" + \"f\"\n")
	if _, err := parseAPI(dir); err == nil {
		t.Error("a constant of a string type whose value is no literal was accepted")
	}
}

func TestBuildPaths(t *testing.T) {
	in := mustDecode(t, `{
		"x-undocumented": {"/jupyter/": "theirs", "/": "404", "GET /{$}": "UI"},
		"paths": {
			"/v1/things": {"get": {"operationId": "list"}, "post": {"operationId": "create"}},
			"/v1/things/{id}": {
				"parameters": [{"name": "id", "in": "path", "description": "Its id."}, {"name": "q", "in": "query"}],
				"delete": {"operationId": "delete"}},
			"/v1/things/{id}/raw/{path}": {"get": {"operationId": "rawGet"}, "head": {"operationId": "rawHead"}}
		}}`)
	routes := []string{"POST /v1/things", "GET /v1/things", "DELETE /v1/things/{id}", "/v1/things/{id}/raw/{path...}",
		"GET /jupyter/api/kernels", "GET /{$}", "/"}
	got, err := buildPaths(in, routes)
	if err != nil {
		t.Fatal(err)
	}
	want := `{
		"/v1/things": {"post": {"operationId": "create"}, "get": {"operationId": "list"}},
		"/v1/things/{id}": {
			"parameters": [{"name": "id", "in": "path", "required": true, "description": "Its id.", "schema": {"type": "string"}},
				{"name": "q", "in": "query"}],
			"delete": {"operationId": "delete"}},
		"/v1/things/{id}/raw/{path}": {
			"parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}},
				{"name": "path", "in": "path", "required": true, "schema": {"type": "string"}}],
			"get": {"operationId": "rawGet"}, "head": {"operationId": "rawHead"}}}`
	if g := compact(mustEncode(t, got)); g != compact(want) {
		t.Errorf("paths:\n%s\nwant:\n%s", g, compact(want))
	}

	for name, routes := range map[string][]string{
		"a route without an operation":    append(routes[:len(routes):len(routes)], "PUT /v1/things/{id}"),
		"a route without a path":          append(routes[:len(routes):len(routes)], "GET /v1/other"),
		"an operation without a route":    routes[1:],
		"an x-undocumented without route": routes[:5],
	} {
		if _, err := buildPaths(in, routes); err == nil {
			t.Errorf("%s was accepted", name)
		}
	}
	bad := mustDecode(t, `{"paths": {"/v1/things/{id}": {"parameters": [{"name": "nope", "in": "path"}], "delete": {}}}}`)
	if _, err := buildPaths(bad, []string{"DELETE /v1/things/{id}"}); err == nil {
		t.Error("a path parameter that is no wildcard was accepted")
	}
}

func TestEveryAPIStructIsASchema(t *testing.T) {
	src := &source{docs: map[string]string{}, pkg: apiPkg, enums: map[string][]string{}, structs: []string{"Sandbox", "NotInTheTable"}}
	_, err := openAPI(src, overlayJSON, nil)
	if err == nil || !strings.Contains(err.Error(), "api.NotInTheTable") {
		t.Errorf("a struct of package api missing from the table: err = %v", err)
	}
}

const sdkDoc = `{"components": {"schemas": {
	"Thing": {"type": "object", "description": "A thing.", "required": ["id", "error"], "properties": {
		"id": {"type": "string", "description": "Its id."},
		"state": {"type": "string", "enum": ["a", "b"]},
		"size": {"type": "integer", "format": "int64"},
		"error": {"oneOf": [{"$ref": "#/components/schemas/Err"}, {"type": "null"}]},
		"tags": {"type": "array", "items": {"type": "string"}},
		"labels": {"type": "object", "additionalProperties": {"type": "string"}},
		"results": {"type": "array", "items": {"$ref": "#/components/schemas/Open"}}}},
	"Err": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}},
	"Open": {"type": "object", "additionalProperties": true, "properties": {
		"main": {"type": "boolean", "const": true}, "json": {"description": "Any JSON value."}}}}}}`

func TestTypeScript(t *testing.T) {
	b, err := typeScript(mustDecode(t, sdkDoc))
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	for _, want := range []string{
		"// Code generated by internal/apigen",
		"/** A thing. */\nexport interface Thing {\n  /** Its id. */\n  id: string;\n  state?: \"a\" | \"b\";\n  size?: number;\n  error: Err | null;\n  tags?: string[];\n  labels?: Record<string, string>;\n  results?: Open[];\n}\n",
		"export interface Err {\n  name: string;\n}\n",
		"export interface Open {\n  main?: true;\n  /** Any JSON value. */\n  json?: unknown;\n  /** Keys a later daemon may add. */\n  [key: string]: unknown;\n}\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("wire.ts lacks\n%s\nin\n%s", want, got)
		}
	}
}

func TestPython(t *testing.T) {
	b, err := python(mustDecode(t, sdkDoc))
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	for _, want := range []string{
		"# Code generated by internal/apigen",
		"from typing import Any, Dict, List, Literal, Optional, TypedDict\n",
		"__all__ = [\n    \"Thing\",\n    \"Err\",\n    \"Open\",\n]\n",
		"class _ThingRequired(TypedDict):\n    #: Its id.\n    id: str\n    error: Optional[Err]\n\n\nclass Thing(_ThingRequired, total=False):\n    \"\"\"A thing.\"\"\"\n\n    state: Literal[\"a\", \"b\"]\n    size: int\n    tags: List[str]\n    labels: Dict[str, str]\n    results: List[Open]\n",
		"class Err(TypedDict):\n    name: str\n",
		"class Open(TypedDict, total=False):\n    \"\"\"Keys a later daemon adds may appear too.\"\"\"\n\n    main: Literal[True]\n    #: Any JSON value.\n    json: Any\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("wire.py lacks\n%s\nin\n%s", want, got)
		}
	}
	bad := mustDecode(t, `{"components": {"schemas": {"X": {"type": "object", "properties": {"from": {"type": "string"}}}}}}`)
	if _, err := python(bad); err == nil {
		t.Error("a Python keyword as a key was accepted")
	}
}

func TestJSONNames(t *testing.T) {
	got := jsonNames("Rounds is the number of rounds; Truncated says the bound was hit (Truncatedness aside).",
		map[string]string{"Rounds": "rounds", "Truncated": "truncated"})
	want := "rounds is the number of rounds; truncated says the bound was hit (Truncatedness aside)."
	if got != want {
		t.Errorf("jsonNames = %q, want %q", got, want)
	}
}
