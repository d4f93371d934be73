package client

import (
	"encoding/json"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
)

// The OpenAPI document is written by hand; this test keeps it from drifting
// from the wire types in package api, in both directions.

const openapiPath = "../internal/httpapi/openapi.json"

// documented maps each schema under components.schemas to its Go type.
var documented = map[string]reflect.Type{
	"CreateSandboxRequest": reflect.TypeFor[api.CreateSandboxRequest](),
	"Sandbox":              reflect.TypeFor[api.Sandbox](),
	"Usage":                reflect.TypeFor[api.Usage](),
	"SandboxList":          reflect.TypeFor[api.SandboxList](),
	"ExecRequest":          reflect.TypeFor[api.ExecRequest](),
	"ExecResult":           reflect.TypeFor[api.ExecResult](),
	"OutputChunk":          reflect.TypeFor[api.OutputChunk](),
	"FileInfo":             reflect.TypeFor[api.FileInfo](),
	"FileList":             reflect.TypeFor[api.FileList](),
	"WriteFileResult":      reflect.TypeFor[api.WriteFileResult](),
	"RunCodeRequest":       reflect.TypeFor[api.RunCodeRequest](),
	"Execution":            reflect.TypeFor[api.Execution](),
	"Logs":                 reflect.TypeFor[api.Logs](),
	"ExecutionError":       reflect.TypeFor[api.ExecutionError](),
	"CreateContextRequest": reflect.TypeFor[api.CreateContextRequest](),
	"Context":              reflect.TypeFor[api.Context](),
	"ContextList":          reflect.TypeFor[api.ContextList](),
	"CheckpointRequest":    reflect.TypeFor[api.CheckpointRequest](),
	"Snapshot":             reflect.TypeFor[api.Snapshot](),
	"SnapshotList":         reflect.TypeFor[api.SnapshotList](),
	"ForkRequest":          reflect.TypeFor[api.ForkRequest](),
	"NetworkPolicy":        reflect.TypeFor[api.NetworkPolicy](),
	"Port":                 reflect.TypeFor[api.Port](),
	"PortList":             reflect.TypeFor[api.PortList](),
	"UpdatePortRequest":    reflect.TypeFor[api.UpdatePortRequest](),
	"UpdateSandboxRequest": reflect.TypeFor[api.UpdateSandboxRequest](),
	"ForkResult":           reflect.TypeFor[api.ForkResult](),
	"CreatePoolRequest":    reflect.TypeFor[api.CreatePoolRequest](),
	"Pool":                 reflect.TypeFor[api.Pool](),
	"PoolList":             reflect.TypeFor[api.PoolList](),
	"Error":                reflect.TypeFor[api.Error](),
	"ErrorBody":            reflect.TypeFor[api.ErrorBody](),

	"Image":          reflect.TypeFor[api.Image](),
	"ImageList":      reflect.TypeFor[api.ImageList](),
	"ImageReadiness": reflect.TypeFor[api.ImageReadiness](),
	"Health":         reflect.TypeFor[api.Health](),
	"ChatReadiness":  reflect.TypeFor[api.ChatReadiness](),
	"Cell":           reflect.TypeFor[api.Cell](),
	"CellList":       reflect.TypeFor[api.CellList](),
	"NotebookRun":    reflect.TypeFor[api.NotebookRun](),
	"Recipe":         reflect.TypeFor[api.Recipe](),
	"RecipeStep":     reflect.TypeFor[api.RecipeStep](),
	"CopyStep":       reflect.TypeFor[api.CopyStep](),
	"BuildEvent":     reflect.TypeFor[api.BuildEvent](),

	"ChatRequest":               reflect.TypeFor[api.ChatRequest](),
	"ChatResponse":              reflect.TypeFor[api.ChatResponse](),
	"ChatImage":                 reflect.TypeFor[api.ChatImage](),
	"ChatStep":                  reflect.TypeFor[api.ChatStep](),
	"ChatEvent":                 reflect.TypeFor[api.ChatEvent](),
	"ChatOutput":                reflect.TypeFor[api.ChatOutput](),
	"Conversation":              reflect.TypeFor[api.Conversation](),
	"ChatTurn":                  reflect.TypeFor[api.ChatTurn](),
	"ConversationList":          reflect.TypeFor[api.ConversationList](),
	"CreateConversationRequest": reflect.TypeFor[api.CreateConversationRequest](),
	"UploadedFile":              reflect.TypeFor[api.UploadedFile](),

	"Key":              reflect.TypeFor[api.Key](),
	"CreateKeyRequest": reflect.TypeFor[api.CreateKeyRequest](),
	"KeyList":          reflect.TypeFor[api.KeyList](),
	"Quotas":           reflect.TypeFor[api.Quotas](),
	"TenantUsage":      reflect.TypeFor[api.TenantUsage](),
	"Tenant":           reflect.TypeFor[api.Tenant](),
	"TenantList":       reflect.TypeFor[api.TenantList](),
	"QuotaExceeded":    reflect.TypeFor[api.QuotaExceeded](),
	"AuditEntry":       reflect.TypeFor[api.AuditEntry](),
	"AuditList":        reflect.TypeFor[api.AuditList](),
	"Node":             reflect.TypeFor[api.Node](),
	"NodeList":         reflect.TypeFor[api.NodeList](),
}

// requestBodies are decoded strictly by the daemon, so their schemas must
// forbid unknown properties.
var requestBodies = []string{"CreateSandboxRequest", "UpdateSandboxRequest", "NetworkPolicy", "UpdatePortRequest", "ExecRequest", "RunCodeRequest", "CreateContextRequest",
	"CheckpointRequest", "ForkRequest", "CreatePoolRequest", "Recipe", "RecipeStep", "CopyStep",
	"ChatRequest", "CreateConversationRequest", "CreateKeyRequest", "Quotas"}

// schemaOnly are documented shapes without a Go type in package api. Result
// is the map[string]any of Execution.Results and of a result event.
var schemaOnly = map[string]bool{"Result": true}

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

type jsonField struct {
	name      string
	omitempty bool
	typ       reflect.Type
}

func jsonFields(t reflect.Type) map[string]jsonField {
	out := map[string]jsonField{}
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		if !f.IsExported() || tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		out[name] = jsonField{name: name, omitempty: strings.Contains(","+opts+",", ",omitempty,"), typ: f.Type}
	}
	return out
}

func TestOpenAPIMatchesTypes(t *testing.T) {
	raw, schemas := loadOpenAPI(t)
	if v, _ := raw["openapi"].(string); !strings.HasPrefix(v, "3.1.") {
		t.Errorf("openapi = %q, want 3.1.x", v)
	}
	for name := range schemas {
		if documented[name] == nil && !schemaOnly[name] {
			t.Errorf("components.schemas.%s has no Go type in this test's table", name)
		}
	}
	for name, typ := range documented {
		s := schemas[name]
		if s == nil {
			t.Errorf("components.schemas.%s is missing (api.%s)", name, typ.Name())
			continue
		}
		fields := jsonFields(typ)
		required := map[string]bool{}
		for _, r := range s.Required {
			required[r] = true
		}
		for prop := range s.Properties {
			if _, ok := fields[prop]; !ok {
				t.Errorf("%s.%s is documented but api.%s has no such json field", name, prop, typ.Name())
			}
		}
		for r := range required {
			if _, ok := s.Properties[r]; !ok {
				t.Errorf("%s requires %q, which is not a property", name, r)
			}
		}
		for _, f := range sortedFields(fields) {
			p := s.Properties[f.name]
			if p == nil {
				t.Errorf("api.%s field %q is not documented in components.schemas.%s", typ.Name(), f.name, name)
				continue
			}
			// A field that is always sent is required; an omitempty one is not.
			if required[f.name] == f.omitempty {
				t.Errorf("%s.%s: required=%v, but a field is required exactly when its json tag lacks omitempty (omitempty=%v)", name, f.name, required[f.name], f.omitempty)
			}
			if err := matchField(p, f, schemas); err != "" {
				t.Errorf("%s.%s: %s", name, f.name, err)
			}
		}
	}
	for _, name := range requestBodies {
		if s := schemas[name]; s != nil && s.AdditionalProperties != false {
			t.Errorf("%s: additionalProperties = %v, want false", name, s.AdditionalProperties)
		}
	}
}

func sortedFields(m map[string]jsonField) []jsonField {
	out := make([]jsonField, 0, len(m))
	for _, f := range m {
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// matchField checks the schema of one struct field. A pointer field without
// omitempty is sent as null when nil, so its schema must allow null: oneOf
// (or anyOf) the type's schema and {"type": "null"}.
func matchField(p *schema, f jsonField, schemas map[string]*schema) string {
	if f.typ.Kind() != reflect.Pointer || f.omitempty {
		if len(p.OneOf)+len(p.AnyOf) > 0 {
			return "oneOf/anyOf is only for fields that may be null (non-omitempty pointers)"
		}
		return matchType(p, f.typ, schemas)
	}
	alts := append(append([]*schema{}, p.OneOf...), p.AnyOf...)
	if len(alts) != 2 {
		return "a nil pointer is sent as null: want oneOf [the type's schema, {\"type\": \"null\"}]"
	}
	for i, a := range alts {
		if a.Type == "null" {
			return matchType(alts[1-i], f.typ, schemas)
		}
	}
	return "a nil pointer is sent as null: oneOf lacks {\"type\": \"null\"}"
}

// matchType checks that schema s describes values of Go type t; it returns
// what is wrong, or "".
func matchType(s *schema, t reflect.Type, schemas map[string]*schema) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	want := ""
	switch {
	case t == reflect.TypeFor[time.Time]():
		if s.Type != "string" || s.Format != "date-time" {
			return "want type string, format date-time"
		}
		return ""
	case t.Kind() == reflect.Struct:
		if s.Ref != "#/components/schemas/"+t.Name() {
			return "want $ref #/components/schemas/" + t.Name() + ", got " + s.Ref
		}
		return ""
	case t.Kind() == reflect.String:
		want = "string"
	case t.Kind() == reflect.Bool:
		want = "boolean"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		want = "integer"
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		want = "number"
	case t.Kind() == reflect.Slice:
		if s.Type != "array" || s.Items == nil {
			return "want type array with items"
		}
		if err := matchType(s.Items, t.Elem(), schemas); err != "" {
			return "items: " + err
		}
		return ""
	case t.Kind() == reflect.Map && t.Elem().Kind() == reflect.Interface:
		// A free-form object: inline, or a $ref to a schema-only object.
		if name, ok := strings.CutPrefix(s.Ref, "#/components/schemas/"); ok {
			if !schemaOnly[name] || schemas[name] == nil || schemas[name].Type != "object" {
				return "want $ref to a schema-only object schema, got " + s.Ref
			}
			return ""
		}
		if s.Type != "object" {
			return "want type object for Go " + t.String()
		}
		return ""
	case t.Kind() == reflect.Map:
		ap, _ := s.AdditionalProperties.(map[string]any)
		if s.Type != "object" || t.Key().Kind() != reflect.String || t.Elem().Kind() != reflect.String || ap["type"] != "string" {
			return "want type object with additionalProperties of type string"
		}
		return ""
	default:
		return "no rule for Go type " + t.String()
	}
	if s.Type != want {
		return "type " + toString(s.Type) + ", want " + want + " for Go " + t.String()
	}
	return ""
}

func toString(v any) string { b, _ := json.Marshal(v); return string(b) }

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
			api.ChatEventConversation: "ChatEvent", api.ChatEventText: "ChatEvent",
			api.ChatEventToolCall: "ChatEvent", api.ChatEventToolError: "ChatEvent",
			api.ChatEventOutput: "ChatEvent", api.ChatEventExecution: "ChatEvent",
			api.ChatEventAnswer: "ChatEvent",
			api.ChatEventDone:   "ChatResponse", api.ChatEventError: "ErrorBody",
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
		"CheckpointRequest/properties/type/enum":      []any{api.SnapshotFilesystem, api.SnapshotMemory},
		"CheckpointRequest/properties/type/default":   api.SnapshotFilesystem,
		"CheckpointRequest/properties/name/maxLength": 128.0,
		"Snapshot/properties/type/enum":               []any{api.SnapshotFilesystem, api.SnapshotMemory},
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
		"POST /v1/sandboxes/{sandbox}/checkpoint": {"201", "400", "404", "409", "429", "503"},
		"POST /v1/sandboxes/{sandbox}/fork":       {"201", "400", "404", "409", "429", "503"},
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
	if got, want := resolve(raw, "#/components/schemas/ChatEvent/properties/type/enum"), []any{
		api.ChatEventConversation, api.ChatEventText, api.ChatEventToolCall, api.ChatEventToolError,
		api.ChatEventOutput, api.ChatEventExecution, api.ChatEventAnswer,
	}; !reflect.DeepEqual(got, want) {
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
	// Query parameters, in the names the client sends.
	params := map[string][]string{"/v1/keys/get": {"tenant"}, "/v1/usage/get": {"tenant"},
		"/v1/audit/get": {"tenant", "key_id", "resource", "limit", "before"}}
	for at, want := range params {
		path, method, _ := strings.Cut(strings.TrimPrefix(at, "/"), "/get")
		list, _ := resolve(raw, "#/paths/~1"+esc(path)+method+"/get/parameters").([]any)
		var got []string
		for _, p := range list {
			if p.(map[string]any)["in"] == "query" {
				got = append(got, p.(map[string]any)["name"].(string))
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s query parameters = %q, want %q", at, got, want)
		}
	}
	var limit map[string]any
	list, _ := resolve(raw, "#/paths/~1v1~1audit/get/parameters").([]any)
	for _, p := range list {
		if p := p.(map[string]any); p["name"] == "limit" {
			limit, _ = p["schema"].(map[string]any)
		}
	}
	if limit["minimum"] != 1.0 || limit["maximum"] != 1000.0 || limit["default"] != 100.0 {
		t.Errorf("audit limit = %v, want 1..1000, default 100", limit)
	}
	get := func(ref string) any { return resolve(raw, "#/components/schemas/"+ref) }
	for ref, want := range map[string]any{
		"Key/properties/role/enum":                 []any{api.RoleAdmin, api.RoleUser},
		"CreateKeyRequest/properties/role/enum":    []any{api.RoleUser, api.RoleAdmin},
		"CreateKeyRequest/properties/role/default": api.RoleUser,
		"QuotaExceeded/properties/quota/enum": []any{api.QuotaRunningSandboxes, api.QuotaMemoryMB, api.QuotaCPUs,
			api.QuotaSuspendedSandboxes, api.QuotaSnapshotBytes, api.QuotaImageBytes},
		"ErrorBody/properties/quota/$ref": "#/components/schemas/QuotaExceeded",
	} {
		if got := get(ref); !reflect.DeepEqual(got, want) {
			t.Errorf("%s = %v, want %v", ref, got, want)
		}
	}
	// Every quota name is a Quotas and a TenantUsage property.
	for _, q := range []string{api.QuotaRunningSandboxes, api.QuotaMemoryMB, api.QuotaCPUs,
		api.QuotaSuspendedSandboxes, api.QuotaSnapshotBytes, api.QuotaImageBytes} {
		if get("Quotas/properties/"+q) == nil || get("TenantUsage/properties/"+q) == nil {
			t.Errorf("quota %s is not a property of Quotas and TenantUsage", q)
		}
	}
}
