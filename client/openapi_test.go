package client

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/apigen"
)

// The OpenAPI document and the SDKs' wire types are generated (package
// internal/apigen) from package api, the routes of internal/httpapi and the
// hand-written internal/apigen/openapi.in.json. TestGeneratedFilesUpToDate
// regenerates them and fails when a checked-in copy differs; the other
// tests pin what the client relies on to the document.

const openapiPath = "../internal/httpapi/openapi.json"

func TestGeneratedFilesUpToDate(t *testing.T) {
	files, err := apigen.Generate("..")
	if err != nil {
		t.Fatalf("generate: %v", err)
	}
	if len(files) == 0 {
		t.Fatal("the generator made no files")
	}
	for path, want := range files {
		got, err := os.ReadFile(filepath.Join("..", path))
		if err != nil {
			t.Errorf("%s: %v (run `%s`)", path, err, apigen.Regenerate)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is not what the generator makes of package api, the routes and openapi.in.json: run `%s`\n%s",
				path, apigen.Regenerate, lineDiff(string(got), string(want)))
		}
	}
}

// lineDiff shows where have and want differ: the lines from the first
// that differs to the last (at most 40 of each side), between a line of
// context either side.
func lineDiff(have, want string) string {
	a, b := strings.Split(have, "\n"), strings.Split(want, "\n")
	start := 0
	for start < len(a) && start < len(b) && a[start] == b[start] {
		start++
	}
	ea, eb := len(a), len(b)
	for ea > start && eb > start && a[ea-1] == b[eb-1] {
		ea--
		eb--
	}
	var out strings.Builder
	line := func(prefix string, n int, text string) { fmt.Fprintf(&out, "%s%5d %s\n", prefix, n+1, text) }
	show := func(prefix string, lines []string, from, to int) {
		for i := from; i < to && i < from+40; i++ {
			line(prefix, i, lines[i])
		}
		if to-from > 40 {
			fmt.Fprintf(&out, "%s      … %d more lines\n", prefix, to-from-40)
		}
	}
	if start > 0 {
		line(" ", start-1, a[start-1])
	}
	show("-", a, start, ea)
	show("+", b, start, eb)
	if ea < len(a) {
		line(" ", ea, a[ea])
	}
	return out.String()
}

// requestBodies are decoded strictly by the daemon, so their schemas must
// forbid unknown properties.
var requestBodies = []string{"CreateSandboxRequest", "UpdateSandboxRequest", "NetworkPolicy", "UpdatePortRequest", "ExecRequest", "RunCodeRequest", "CreateContextRequest",
	"CheckpointRequest", "ForkRequest", "CreatePoolRequest", "Recipe", "RecipeStep", "CopyStep",
	"ChatRequest", "CreateConversationRequest", "CreateKeyRequest", "Quotas"}

type schema struct {
	Type                 any                `json:"type"`
	Format               string             `json:"format"`
	Ref                  string             `json:"$ref"`
	Properties           map[string]*schema `json:"properties"`
	Required             []string           `json:"required"`
	Items                *schema            `json:"items"`
	AdditionalProperties any                `json:"additionalProperties"`
	OneOf                []*schema          `json:"oneOf"`
	AnyOf                []*schema          `json:"anyOf"`
}

func loadOpenAPI(t *testing.T) (raw map[string]any, schemas map[string]*schema) {
	t.Helper()
	b, err := os.ReadFile(openapiPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatalf("%s is not valid JSON: %v", openapiPath, err)
	}
	var doc struct {
		Components struct {
			Schemas map[string]*schema `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	return raw, doc.Components.Schemas
}

func TestOpenAPIRequestBodiesStrict(t *testing.T) {
	raw, schemas := loadOpenAPI(t)
	if v, _ := raw["openapi"].(string); !strings.HasPrefix(v, "3.1.") {
		t.Errorf("openapi = %q, want 3.1.x", v)
	}
	for _, name := range requestBodies {
		s := schemas[name]
		if s == nil {
			t.Errorf("components.schemas.%s is missing", name)
			continue
		}
		if s.AdditionalProperties != false {
			t.Errorf("%s: additionalProperties = %v, want false", name, s.AdditionalProperties)
		}
	}
}

func TestOpenAPIRefsResolve(t *testing.T) {
	raw, _ := loadOpenAPI(t)
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			if ref, ok := v["$ref"].(string); ok {
				if resolve(raw, ref) == nil {
					t.Errorf("%s: $ref %q does not resolve", path, ref)
				}
			}
			for k, e := range v {
				walk(path+"/"+k, e)
			}
		case []any:
			for _, e := range v {
				walk(path+"[]", e)
			}
		}
	}
	walk("#", raw)
}

// enum is constants of a string type of package api as a decoded document
// holds them: an enum's values.
func enum[S ~string](vs ...S) []any {
	out := make([]any, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}

func resolve(doc map[string]any, ref string) any {
	if !strings.HasPrefix(ref, "#/") {
		return nil
	}
	var cur any = doc
	for _, part := range strings.Split(ref[2:], "/") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		part = strings.NewReplacer("~1", "/", "~0", "~").Replace(part)
		if cur, ok = m[part]; !ok {
			return nil
		}
	}
	return cur
}

// TestOpenAPIPaths pins the endpoints the client calls to the document.
func TestOpenAPIPaths(t *testing.T) {
	raw, _ := loadOpenAPI(t)
	paths, _ := raw["paths"].(map[string]any)
	for _, want := range []string{
		"POST /v1/sandboxes", "GET /v1/sandboxes",
		"GET /v1/sandboxes/{sandbox}", "DELETE /v1/sandboxes/{sandbox}",
		"POST /v1/sandboxes/{sandbox}/exec",
		"GET /v1/sandboxes/{sandbox}/files", "PUT /v1/sandboxes/{sandbox}/files", "DELETE /v1/sandboxes/{sandbox}/files",
		"GET /v1/sandboxes/{sandbox}/files/list",
		"POST /v1/sandboxes/{sandbox}/code",
		"POST /v1/sandboxes/{sandbox}/contexts", "GET /v1/sandboxes/{sandbox}/contexts",
		"DELETE /v1/sandboxes/{sandbox}/contexts/{id}",
		"POST /v1/sandboxes/{sandbox}/contexts/{id}/interrupt", "POST /v1/sandboxes/{sandbox}/contexts/{id}/restart",
		"POST /v1/sandboxes/{sandbox}/checkpoint", "POST /v1/sandboxes/{sandbox}/fork",
		"GET /v1/snapshots", "GET /v1/snapshots/{id}", "DELETE /v1/snapshots/{id}",
		"POST /v1/sandboxes/{sandbox}/suspend", "POST /v1/sandboxes/{sandbox}/resume",
		"POST /v1/pools", "GET /v1/pools", "DELETE /v1/pools/{name}",
		"POST /v1/chat", "POST /v1/conversations", "GET /v1/conversations",
		"GET /v1/conversations/{id}", "DELETE /v1/conversations/{id}",
		"POST /v1/files", "GET /v1/files/{id}",
		"POST /v1/keys", "GET /v1/keys", "DELETE /v1/keys/{id}",
		"GET /v1/tenants", "GET /v1/tenants/{tenant}", "PUT /v1/tenants/{tenant}",
		"GET /v1/usage", "GET /v1/audit", "GET /v1/nodes",
		"POST /v1/images", "GET /v1/images", "GET /v1/images/{name}", "DELETE /v1/images/{name}",
		"GET /healthz", "GET /metrics", "GET /v1/openapi.json",
	} {
		method, p, _ := strings.Cut(want, " ")
		item, _ := paths[p].(map[string]any)
		if item[strings.ToLower(method)] == nil {
			t.Errorf("%s is not documented", want)
		}
	}
}

// TestOpenAPISSEEvents pins the documented event streams to the event names
// the client reads and the schemas of their data.
func TestOpenAPISSEEvents(t *testing.T) {
	raw, _ := loadOpenAPI(t)
	for path, want := range map[string]map[string]string{
		"/v1/sandboxes/{sandbox}/exec": {
			api.EventStdout: "OutputChunk", api.EventStderr: "OutputChunk",
			api.EventExit: "ExecResult", api.EventError: "ErrorBody",
		},
		"/v1/sandboxes/{sandbox}/code": {
			api.EventStdout: "OutputChunk", api.EventStderr: "OutputChunk",
			api.EventResult: "Result", api.EventError: "ExecutionError",
			api.EventDone: "Execution", eventFailure: "ErrorBody",
		},
		"/v1/chat": {
			string(api.ChatEventConversation): "ChatEvent", string(api.ChatEventText): "ChatEvent",
			string(api.ChatEventToolCall): "ChatEvent", string(api.ChatEventToolError): "ChatEvent",
			string(api.ChatEventOutput): "ChatEvent", string(api.ChatEventExecution): "ChatEvent",
			string(api.ChatEventAnswer): "ChatEvent",
			api.ChatEventDone:           "ChatResponse", api.ChatEventError: "ErrorBody",
		},
	} {
		events, _ := resolve(raw, "#/paths/"+strings.ReplaceAll(path, "/", "~1")+"/post/responses/200/content/text~1event-stream/x-sse-events").(map[string]any)
		if events == nil {
			t.Errorf("%s: no x-sse-events", path)
			continue
		}
		got := map[string]string{}
		for name, v := range events {
			ref, _ := v.(map[string]any)["$ref"].(string)
			got[name] = strings.TrimPrefix(ref, "#/components/schemas/")
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: x-sse-events = %v, want %v", path, got, want)
		}
	}
}

// TestOpenAPIResultFormats checks the result object against docs/API.md: every
// format key, "extra" for other MIME types and is_main_result, and room for
// keys a later daemon adds.
func TestOpenAPIResultFormats(t *testing.T) {
	_, schemas := loadOpenAPI(t)
	r := schemas["Result"]
	if r == nil {
		t.Fatal("components.schemas.Result is missing")
	}
	var got []string
	for k := range r.Properties {
		got = append(got, k)
	}
	sort.Strings(got)
	want := []string{"extra", "html", "is_main_result", "javascript", "jpeg", "json", "latex", "markdown", "pdf", "png", "svg", "text"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Result properties = %q, want %q", got, want)
	}
	if r.Type != "object" || r.AdditionalProperties != true || len(r.Required) != 0 {
		t.Errorf("Result: type %v, additionalProperties %v, required %v; want object, true, none", r.Type, r.AdditionalProperties, r.Required)
	}
	for _, k := range []string{"png", "jpeg", "pdf"} {
		if p := r.Properties[k]; p == nil || p.Type != "string" {
			t.Errorf("Result.%s: want a (base64) string", k)
		}
	}
	if p := r.Properties["is_main_result"]; p == nil || p.Type != "boolean" {
		t.Errorf("Result.is_main_result: want boolean")
	}
}

// TestOpenAPISnapshotLimits pins the snapshot request limits that the daemon
// enforces (and the CLI documents) to the document.
func TestOpenAPISnapshotLimits(t *testing.T) {
	raw, _ := loadOpenAPI(t)
	get := func(ref string) any { return resolve(raw, "#/components/schemas/"+ref) }
	for ref, want := range map[string]any{
		"CheckpointRequest/properties/type/enum":      enum(api.SnapshotFilesystem, api.SnapshotMemory),
		"CheckpointRequest/properties/type/default":   string(api.SnapshotFilesystem),
		"CheckpointRequest/properties/name/maxLength": 128.0,
		"Snapshot/properties/type/enum":               enum(api.SnapshotFilesystem, api.SnapshotMemory),
		"ForkRequest/properties/count/minimum":        1.0,
		"ForkRequest/properties/count/maximum":        16.0,
		"ForkRequest/properties/names/items/pattern":  get("CreateSandboxRequest/properties/name/pattern"),
	} {
		if got := get(ref); !reflect.DeepEqual(got, want) {
			t.Errorf("%s = %v, want %v", ref, got, want)
		}
	}
	// The statuses of the snapshot errors are documented.
	for op, codes := range map[string][]string{
		"POST /v1/sandboxes/{sandbox}/checkpoint": {"201", "400", "404", "409", "429", "503", "507"},
		"POST /v1/sandboxes/{sandbox}/fork":       {"201", "400", "404", "409", "429", "503", "507"},
		"POST /v1/sandboxes/{sandbox}/suspend":    {"200", "404", "409", "503", "507"},
		"POST /v1/sandboxes/{sandbox}/resume":     {"200", "404", "409", "503", "507"},
		"POST /v1/images":                         {"201", "400", "409", "413", "507"},
		"POST /v1/files":                          {"201", "400", "413", "507"},
		"POST /v1/sandboxes":                      {"201", "404", "409", "503"},
		"GET /v1/snapshots":                       {"200", "404"},
		"GET /v1/snapshots/{id}":                  {"200", "404"},
		"DELETE /v1/snapshots/{id}":               {"204", "404"},
	} {
		method, path, _ := strings.Cut(op, " ")
		for _, code := range codes {
			ref := "#/paths/" + strings.ReplaceAll(path, "/", "~1") + "/" + strings.ToLower(method) + "/responses/" + code
			if resolve(raw, ref) == nil {
				t.Errorf("%s: no %s answer", op, code)
			}
		}
	}
}

// TestOpenAPIPoolsAndSuspend pins the pool limits, the create fields of
// suspend and pools, and the statuses of their errors to the document.
func TestOpenAPIPoolsAndSuspend(t *testing.T) {
	raw, _ := loadOpenAPI(t)
	get := func(ref string) any { return resolve(raw, "#/components/schemas/"+ref) }
	namePattern := get("CreateSandboxRequest/properties/name/pattern")
	if namePattern != "^[a-z0-9][a-z0-9_-]{0,62}$" {
		t.Fatalf("CreateSandboxRequest.name pattern = %v", namePattern)
	}
	for ref, want := range map[string]any{
		"CreatePoolRequest/properties/size/minimum":           1.0,
		"CreatePoolRequest/properties/size/maximum":           32.0,
		"CreatePoolRequest/properties/name/pattern":           namePattern,
		"CreatePoolRequest/additionalProperties":              false,
		"CreatePoolRequest/required":                          []any{"name", "size"},
		"Pool/properties/name/pattern":                        namePattern,
		"CreateSandboxRequest/properties/pool/pattern":        namePattern,
		"CreateSandboxRequest/properties/auto_resume/type":    "boolean",
		"CreateSandboxRequest/properties/auto_resume/default": true,
		"Sandbox/properties/auto_resume/type":                 "boolean",
	} {
		if got := get(ref); !reflect.DeepEqual(got, want) {
			t.Errorf("%s = %v, want %v", ref, got, want)
		}
	}
	params, _ := resolve(raw, "#/paths/~1v1~1pools~1{name}/parameters").([]any)
	if len(params) != 1 || params[0].(map[string]any)["name"] != "name" ||
		params[0].(map[string]any)["schema"].(map[string]any)["pattern"] != namePattern {
		t.Errorf("/v1/pools/{name} parameters = %v, want the name with the sandbox name pattern", params)
	}
	for op, codes := range map[string][]string{
		"POST /v1/sandboxes/{sandbox}/suspend": {"200", "404", "409", "503"},
		"POST /v1/sandboxes/{sandbox}/resume":  {"200", "404", "409", "503"},
		"POST /v1/pools":                       {"201", "400", "404", "409"},
		"GET /v1/pools":                        {"200"},
		"DELETE /v1/pools/{name}":              {"204", "404"},
	} {
		method, path, _ := strings.Cut(op, " ")
		for _, code := range codes {
			ref := "#/paths/" + strings.ReplaceAll(path, "/", "~1") + "/" + strings.ToLower(method) + "/responses/" + code
			if resolve(raw, ref) == nil {
				t.Errorf("%s: no %s answer", op, code)
			}
		}
	}
	// Suspend and resume answer the sandbox; pools answer their schemas.
	for ref, want := range map[string]string{
		"/v1/sandboxes/{sandbox}/suspend/post/responses/200": "Sandbox",
		"/v1/sandboxes/{sandbox}/resume/post/responses/200":  "Sandbox",
		"/v1/pools/post/responses/201":                       "Pool",
		"/v1/pools/get/responses/200":                        "PoolList",
		"/v1/pools/post/requestBody":                         "CreatePoolRequest",
	} {
		path, rest, _ := strings.Cut(strings.TrimPrefix(ref, "/"), "/post/")
		method := "post"
		if rest == "" {
			path, rest, _ = strings.Cut(strings.TrimPrefix(ref, "/"), "/get/")
			method = "get"
		}
		full := "#/paths/~1" + strings.ReplaceAll(path, "/", "~1") + "/" + method + "/" + rest + "/content/application~1json/schema/$ref"
		if got := resolve(raw, full); got != "#/components/schemas/"+want {
			t.Errorf("%s: schema %v, want %s", ref, got, want)
		}
	}
}

// TestOpenAPIChat pins the chat endpoints' statuses, bodies and enums to the
// document.
func TestOpenAPIChat(t *testing.T) {
	raw, _ := loadOpenAPI(t)
	esc := func(p string) string { return strings.ReplaceAll(p, "/", "~1") }
	for op, codes := range map[string][]string{
		"POST /v1/chat":                 {"200", "400", "404", "413", "503"},
		"POST /v1/conversations":        {"201", "400", "503"},
		"GET /v1/conversations":         {"200"},
		"GET /v1/conversations/{id}":    {"200", "404"},
		"DELETE /v1/conversations/{id}": {"204", "404"},
		"POST /v1/files":                {"201", "400", "404", "413"},
		"GET /v1/files/{id}":            {"200", "404"},
	} {
		method, path, _ := strings.Cut(op, " ")
		for _, code := range codes {
			if resolve(raw, "#/paths/"+esc(path)+"/"+strings.ToLower(method)+"/responses/"+code) == nil {
				t.Errorf("%s: no %s answer", op, code)
			}
		}
	}
	for _, c := range []struct{ path, at, want string }{
		{"/v1/chat", "post/requestBody", "ChatRequest"},
		{"/v1/chat", "post/responses/200", "ChatResponse"},
		{"/v1/conversations", "post/requestBody", "CreateConversationRequest"},
		{"/v1/conversations", "post/responses/201", "Conversation"},
		{"/v1/conversations", "get/responses/200", "ConversationList"},
		{"/v1/conversations/{id}", "get/responses/200", "Conversation"},
		{"/v1/files", "post/responses/201", "UploadedFile"},
		{"/v1/files/{id}", "get/responses/200", "UploadedFile"},
	} {
		ref := "#/paths/" + esc(c.path) + "/" + c.at + "/content/application~1json/schema/$ref"
		if got := resolve(raw, ref); got != "#/components/schemas/"+c.want {
			t.Errorf("%s %s: schema %v, want %s", c.path, c.at, got, c.want)
		}
	}
	// The upload is multipart with a file part and an optional conversation.
	if got := resolve(raw, "#/paths/~1v1~1files/post/requestBody/content/multipart~1form-data/schema/required"); !reflect.DeepEqual(got, []any{"file"}) {
		t.Errorf("POST /v1/files multipart required = %v, want [file]", got)
	}
	for _, part := range []string{"file", "conversation_id"} {
		if resolve(raw, "#/paths/~1v1~1files/post/requestBody/content/multipart~1form-data/schema/properties/"+part) == nil {
			t.Errorf("POST /v1/files: multipart part %q is not documented", part)
		}
	}
	// The stream's event kinds are ChatEvent's type enum; done and error
	// carry other data.
	if got, want := resolve(raw, "#/components/schemas/ChatEvent/properties/type/enum"), enum(
		api.ChatEventConversation, api.ChatEventText, api.ChatEventToolCall, api.ChatEventToolError,
		api.ChatEventOutput, api.ChatEventExecution, api.ChatEventAnswer,
	); !reflect.DeepEqual(got, want) {
		t.Errorf("ChatEvent.type enum = %v, want %v", got, want)
	}
	if got := resolve(raw, "#/components/schemas/ChatOutput/properties/type/enum"); !reflect.DeepEqual(got, []any{"stdout", "stderr", "result", "error"}) {
		t.Errorf("ChatOutput.type enum = %v", got)
	}
	if got := resolve(raw, "#/components/schemas/ChatRequest/properties/question/minLength"); got != 1.0 {
		t.Errorf("ChatRequest.question minLength = %v, want 1", got)
	}
}

// TestOpenAPIAccess pins the key, tenant, usage and audit endpoints' statuses,
// bodies, parameters and enums to the document and to package api.
func TestOpenAPIAccess(t *testing.T) {
	raw, _ := loadOpenAPI(t)
	esc := func(p string) string { return strings.ReplaceAll(p, "/", "~1") }
	for op, codes := range map[string][]string{
		"POST /v1/keys":                           {"201", "400", "401", "403", "409"},
		"GET /v1/keys":                            {"200", "401", "403"},
		"DELETE /v1/keys/{id}":                    {"200", "401", "403", "404"},
		"GET /v1/tenants":                         {"200", "401", "403"},
		"GET /v1/tenants/{tenant}":                {"200", "400", "401", "403"},
		"PUT /v1/tenants/{tenant}":                {"200", "400", "401", "403"},
		"GET /v1/usage":                           {"200", "400", "401", "403"},
		"GET /v1/audit":                           {"200", "400", "401", "403"},
		"GET /v1/nodes":                           {"200", "401"},
		"POST /v1/sandboxes":                      {"429"},
		"POST /v1/pools":                          {"429"},
		"POST /v1/images":                         {"429"},
		"POST /v1/sandboxes/{sandbox}/resume":     {"429"},
		"POST /v1/sandboxes/{sandbox}/checkpoint": {"429"},
	} {
		method, path, _ := strings.Cut(op, " ")
		for _, code := range codes {
			if resolve(raw, "#/paths/"+esc(path)+"/"+strings.ToLower(method)+"/responses/"+code) == nil {
				t.Errorf("%s: no %s answer", op, code)
			}
		}
	}
	if got := resolve(raw, "#/components/responses/Forbidden/content/application~1json/example/error/code"); got != "permission_denied" {
		t.Errorf("Forbidden example code = %v", got)
	}
	for _, c := range []struct{ path, at, want string }{
		{"/v1/keys", "post/requestBody", "CreateKeyRequest"},
		{"/v1/keys", "post/responses/201", "Key"},
		{"/v1/keys", "get/responses/200", "KeyList"},
		{"/v1/keys/{id}", "delete/responses/200", "Key"},
		{"/v1/tenants", "get/responses/200", "TenantList"},
		{"/v1/tenants/{tenant}", "get/responses/200", "Tenant"},
		{"/v1/tenants/{tenant}", "put/responses/200", "Tenant"},
		{"/v1/tenants/{tenant}", "put/requestBody/content/application~1json/schema/properties/quotas", "Quotas"},
		{"/v1/usage", "get/responses/200", "TenantUsage"},
		{"/v1/audit", "get/responses/200", "AuditList"},
		{"/v1/nodes", "get/responses/200", "NodeList"},
	} {
		ref := "#/paths/" + esc(c.path) + "/" + c.at + "/content/application~1json/schema/$ref"
		if strings.Contains(c.at, "/properties/") {
			ref = "#/paths/" + esc(c.path) + "/" + c.at + "/$ref"
		}
		if got := resolve(raw, ref); got != "#/components/schemas/"+c.want {
			t.Errorf("%s %s: schema %v, want %s", c.path, c.at, got, c.want)
		}
	}
	// The body of PUT /v1/tenants/{tenant} is a Tenant whose name is ignored.
	put := "#/paths/~1v1~1tenants~1{tenant}/put/requestBody/content/application~1json/schema/"
	if got := resolve(raw, put+"required"); !reflect.DeepEqual(got, []any{"quotas"}) || resolve(raw, put+"additionalProperties") != false {
		t.Errorf("PUT /v1/tenants/{tenant} body: required %v, additionalProperties %v", got, resolve(raw, put+"additionalProperties"))
	}
	// Query parameters, in the names the client sends (a shared
	// parameter, such as a list's limit and cursor, by its $ref).
	param := func(p any) map[string]any {
		m := p.(map[string]any)
		if ref, ok := m["$ref"].(string); ok {
			m, _ = resolve(raw, ref).(map[string]any)
		}
		return m
	}
	params := map[string][]string{"/v1/keys/get": {"tenant"}, "/v1/usage/get": {"tenant"},
		"/v1/audit/get": {"tenant", "key_id", "resource", "limit", "before", "cursor"}}
	for _, list := range []string{"/v1/sandboxes/get", "/v1/snapshots/get", "/v1/images/get", "/v1/conversations/get"} {
		params[list] = []string{"limit", "cursor"}
	}
	for at, want := range params {
		path, method, _ := strings.Cut(strings.TrimPrefix(at, "/"), "/get")
		list, _ := resolve(raw, "#/paths/~1"+esc(path)+method+"/get/parameters").([]any)
		var got []string
		for _, p := range list {
			if p := param(p); p["in"] == "query" {
				got = append(got, p["name"].(string))
			}
		}
		if len(want) == 2 && want[0] == "limit" {
			got = got[max(0, len(got)-2):] // the lists' own filters come first
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s query parameters = %q, want %q", at, got, want)
		}
	}
	var limit map[string]any
	list, _ := resolve(raw, "#/paths/~1v1~1audit/get/parameters").([]any)
	for _, p := range list {
		if p := param(p); p["name"] == "limit" {
			limit, _ = p["schema"].(map[string]any)
		}
	}
	if limit["minimum"] != 1.0 || limit["maximum"] != 1000.0 || limit["default"] != 100.0 {
		t.Errorf("audit limit = %v, want 1..1000, default 100", limit)
	}
	get := func(ref string) any { return resolve(raw, "#/components/schemas/"+ref) }
	for ref, want := range map[string]any{
		"Key/properties/role/enum":                 enum(api.RoleAdmin, api.RoleUser),
		"CreateKeyRequest/properties/role/enum":    enum(api.RoleAdmin, api.RoleUser),
		"CreateKeyRequest/properties/role/default": string(api.RoleUser),
		"QuotaExceeded/properties/quota/enum": enum(api.QuotaRunningSandboxes, api.QuotaMemoryMB, api.QuotaCPUs,
			api.QuotaSuspendedSandboxes, api.QuotaSnapshotBytes, api.QuotaImageBytes),
		"ErrorBody/properties/quota/$ref": "#/components/schemas/QuotaExceeded",
	} {
		if got := get(ref); !reflect.DeepEqual(got, want) {
			t.Errorf("%s = %v, want %v", ref, got, want)
		}
	}
	// Every quota name is a Quotas and a TenantUsage property.
	for _, q := range []api.QuotaName{api.QuotaRunningSandboxes, api.QuotaMemoryMB, api.QuotaCPUs,
		api.QuotaSuspendedSandboxes, api.QuotaSnapshotBytes, api.QuotaImageBytes} {
		if get("Quotas/properties/"+string(q)) == nil || get("TenantUsage/properties/"+string(q)) == nil {
			t.Errorf("quota %s is not a property of Quotas and TenantUsage", q)
		}
	}
}
