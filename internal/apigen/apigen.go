// Package apigen generates the API's description from its sources: the
// OpenAPI document the daemon serves (internal/httpapi/openapi.json),
// the wire types of the TypeScript and Python SDKs (sdk/js/src/wire.ts,
// sdk/python/forkbox/wire.py), and a human-readable reference laid out from
// that document (docs/API-reference.md).
//
// What can be derived is: the schemas' shapes come from the Go types of
// package api by reflection (JSON names; a field without omitempty is
// required; a pointer without omitempty may be null; a field of a string
// type of package api is an enum of that type's constants, so a state or a
// kind is listed once, in Go; descriptions from doc comments), and the
// paths from the routes that routes() of internal/httpapi/server.go
// registers. The rest is written by hand in openapi.in.json: per-route operations
// (summaries, request and response bodies, statuses), the constraints and
// descriptions of schemas and their fields, and the shared parts of the
// document. A value the overlay gives for something derived is an error,
// so that the two cannot disagree; a route the overlay neither documents
// nor names in x-undocumented is one too.
//
// Regenerate with `go generate ./internal/apigen`; the tests of package
// client fail when a generated file is out of date.
package apigen

//go:generate go run ./cmd/apigen

import (
	_ "embed"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/forkbox/forkbox/api"
)

//go:embed openapi.in.json
var overlayJSON []byte

// Generated files, by path from the repository's root.
const (
	OpenAPIPath = "internal/httpapi/openapi.json"
	TSPath      = "sdk/js/src/wire.ts"
	PythonPath  = "sdk/python/forkbox/wire.py"
)

// Regenerate is the command that rewrites the generated files.
const Regenerate = "go generate ./internal/apigen"

// schemas lists components.schemas in the document's order: each named for
// its Go type, or (nil) written whole in the overlay.
var schemas = []struct {
	name string
	typ  reflect.Type
}{
	{"CreateSandboxRequest", reflect.TypeFor[api.CreateSandboxRequest]()},
	{"Sandbox", reflect.TypeFor[api.Sandbox]()},
	{"Usage", reflect.TypeFor[api.Usage]()},
	{"SandboxList", reflect.TypeFor[api.SandboxList]()},
	{"ExecRequest", reflect.TypeFor[api.ExecRequest]()},
	{"ExecResult", reflect.TypeFor[api.ExecResult]()},
	{"OutputChunk", reflect.TypeFor[api.OutputChunk]()},
	{"FileInfo", reflect.TypeFor[api.FileInfo]()},
	{"FileList", reflect.TypeFor[api.FileList]()},
	{"WriteFileResult", reflect.TypeFor[api.WriteFileResult]()},
	{"RunCodeRequest", reflect.TypeFor[api.RunCodeRequest]()},
	{"Execution", reflect.TypeFor[api.Execution]()},
	{"Logs", reflect.TypeFor[api.Logs]()},
	{"ExecutionError", reflect.TypeFor[api.ExecutionError]()},
	// Result is one map[string]any of Execution.Results (and of a result
	// event): its keys are the formats Jupyter displays, open-ended.
	{"Result", nil},
	{"CreateContextRequest", reflect.TypeFor[api.CreateContextRequest]()},
	{"Context", reflect.TypeFor[api.Context]()},
	{"ContextList", reflect.TypeFor[api.ContextList]()},
	{"CheckpointRequest", reflect.TypeFor[api.CheckpointRequest]()},
	{"Snapshot", reflect.TypeFor[api.Snapshot]()},
	{"SnapshotList", reflect.TypeFor[api.SnapshotList]()},
	{"ForkRequest", reflect.TypeFor[api.ForkRequest]()},
	{"ForkResult", reflect.TypeFor[api.ForkResult]()},
	{"CreatePoolRequest", reflect.TypeFor[api.CreatePoolRequest]()},
	{"Pool", reflect.TypeFor[api.Pool]()},
	{"PoolMember", reflect.TypeFor[api.PoolMember]()},
	{"PoolList", reflect.TypeFor[api.PoolList]()},
	{"Image", reflect.TypeFor[api.Image]()},
	{"ImageList", reflect.TypeFor[api.ImageList]()},
	{"Recipe", reflect.TypeFor[api.Recipe]()},
	{"RecipeStep", reflect.TypeFor[api.RecipeStep]()},
	{"CopyStep", reflect.TypeFor[api.CopyStep]()},
	{"BuildEvent", reflect.TypeFor[api.BuildEvent]()},
	{"Error", reflect.TypeFor[api.Error]()},
	{"ErrorBody", reflect.TypeFor[api.ErrorBody]()},
	{"Health", reflect.TypeFor[api.Health]()},
	{"ChatRequest", reflect.TypeFor[api.ChatRequest]()},
	{"ChatImage", reflect.TypeFor[api.ChatImage]()},
	{"ChatStep", reflect.TypeFor[api.ChatStep]()},
	{"ChatResponse", reflect.TypeFor[api.ChatResponse]()},
	{"ChatOutput", reflect.TypeFor[api.ChatOutput]()},
	{"ChatEvent", reflect.TypeFor[api.ChatEvent]()},
	{"ChatTurn", reflect.TypeFor[api.ChatTurn]()},
	{"UploadedFile", reflect.TypeFor[api.UploadedFile]()},
	{"Conversation", reflect.TypeFor[api.Conversation]()},
	{"ConversationList", reflect.TypeFor[api.ConversationList]()},
	{"CreateConversationRequest", reflect.TypeFor[api.CreateConversationRequest]()},
	{"NetworkPolicy", reflect.TypeFor[api.NetworkPolicy]()},
	{"UpdateSandboxRequest", reflect.TypeFor[api.UpdateSandboxRequest]()},
	{"Port", reflect.TypeFor[api.Port]()},
	{"UpdatePortRequest", reflect.TypeFor[api.UpdatePortRequest]()},
	{"Key", reflect.TypeFor[api.Key]()},
	{"CreateKeyRequest", reflect.TypeFor[api.CreateKeyRequest]()},
	{"KeyList", reflect.TypeFor[api.KeyList]()},
	{"Quotas", reflect.TypeFor[api.Quotas]()},
	{"TenantUsage", reflect.TypeFor[api.TenantUsage]()},
	{"Tenant", reflect.TypeFor[api.Tenant]()},
	{"TenantList", reflect.TypeFor[api.TenantList]()},
	{"QuotaExceeded", reflect.TypeFor[api.QuotaExceeded]()},
	{"AuditEntry", reflect.TypeFor[api.AuditEntry]()},
	{"AuditList", reflect.TypeFor[api.AuditList]()},
	{"PortList", reflect.TypeFor[api.PortList]()},
	{"Cell", reflect.TypeFor[api.Cell]()},
	{"CellList", reflect.TypeFor[api.CellList]()},
	{"NotebookRun", reflect.TypeFor[api.NotebookRun]()},
	{"ImageReadiness", reflect.TypeFor[api.ImageReadiness]()},
	{"ChatReadiness", reflect.TypeFor[api.ChatReadiness]()},
	{"Node", reflect.TypeFor[api.Node]()},
	{"NodeList", reflect.TypeFor[api.NodeList]()},
}

// apiPkg is package api's import path.
var apiPkg = reflect.TypeFor[api.Sandbox]().PkgPath()

// Root returns the repository's root: the nearest directory at or above
// the working directory that holds go.mod.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find the repository: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("find the repository: no go.mod at or above the working directory")
		}
		dir = parent
	}
}

// Generate returns the generated files by path from root, the
// repository's root (whose api/ it reads for doc comments and constants,
// and whose router for the routes).
func Generate(root string) (map[string][]byte, error) {
	src, err := parseAPI(filepath.Join(root, "api"))
	if err != nil {
		return nil, err
	}
	routes, err := parseRoutes(filepath.Join(root, routerFile), nil)
	if err != nil {
		return nil, err
	}
	doc, err := openAPI(src, overlayJSON, routes)
	if err != nil {
		return nil, fmt.Errorf("openapi.json: %w", err)
	}
	spec, err := encodeJSON(doc)
	if err != nil {
		return nil, fmt.Errorf("openapi.json: %w", err)
	}
	ts, err := typeScript(doc)
	if err != nil {
		return nil, fmt.Errorf("wire.ts: %w", err)
	}
	py, err := python(doc)
	if err != nil {
		return nil, fmt.Errorf("wire.py: %w", err)
	}
	ref, err := markdown(doc)
	if err != nil {
		return nil, fmt.Errorf("API-reference.md: %w", err)
	}
	return map[string][]byte{OpenAPIPath: spec, TSPath: ts, PythonPath: py, ReferencePath: ref}, nil
}

// gen derives schemas from Go types.
type gen struct {
	src   *source
	names map[reflect.Type]string
}

// openAPI builds the document from the overlay, package api and the
// routes.
func openAPI(src *source, overlay []byte, routes []string) (*object, error) {
	v, err := decodeOrdered(overlay)
	if err != nil {
		return nil, fmt.Errorf("openapi.in.json: %w", err)
	}
	in, ok := v.(*object)
	if !ok {
		return nil, fmt.Errorf("openapi.in.json is not an object")
	}
	g := &gen{src: src, names: map[reflect.Type]string{}}
	for _, s := range schemas {
		if s.typ != nil {
			g.names[s.typ] = s.name
		}
	}
	// Every exported struct of package api is a schema: a new wire type
	// cannot be left out of the document.
	for _, name := range src.structs {
		found := false
		for t := range g.names {
			found = found || t.Name() == name
		}
		if !found {
			return nil, fmt.Errorf("api.%s is not in apigen's schemas table", name)
		}
	}

	comps := in.obj("components")
	overSchemas := comps.obj("schemas")
	outSchemas := newObject()
	for _, s := range schemas {
		over := overSchemas.obj(s.name)
		if s.typ == nil {
			if over == nil {
				return nil, fmt.Errorf("components.schemas.%s has no Go type and is not in the overlay", s.name)
			}
			outSchemas.set(s.name, over)
			continue
		}
		sch, err := g.structSchema(s.name, s.typ, over)
		if err != nil {
			return nil, err
		}
		outSchemas.set(s.name, sch)
	}
	if err := overSchemas.each(func(k string, _ any) error {
		if !outSchemas.has(k) {
			return fmt.Errorf("openapi.in.json: components.schemas.%s is not in apigen's schemas table", k)
		}
		return nil
	}); err != nil {
		return nil, err
	}

	paths, err := buildPaths(in, routes)
	if err != nil {
		return nil, err
	}

	out := newObject()
	err = in.each(func(k string, v any) error {
		switch k {
		case "x-undocumented":
		case "paths":
			out.set(k, paths)
		case "components":
			c := newObject("schemas", outSchemas)
			comps.each(func(k string, v any) error {
				if k != "schemas" {
					c.set(k, v)
				}
				return nil
			})
			out.set(k, c)
		default:
			out.set(k, v)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := checkRefs(out, out, "#"); err != nil {
		return nil, err
	}
	return out, nil
}

// structSchema is the schema of struct type t, named name.
func (g *gen) structSchema(name string, t reflect.Type, over *object) (*object, error) {
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("%s: Go type %s is not a struct", name, t)
	}
	out := newObject("type", "object")
	err := over.each(func(k string, v any) error {
		switch k {
		case "properties":
			return nil
		case "type", "required":
			return fmt.Errorf("components.schemas.%s.%s is derived from api.%s: remove it from openapi.in.json", name, k, t.Name())
		}
		out.set(k, v)
		return nil
	})
	if err != nil {
		return nil, err
	}
	fields := jsonFields(t)
	goToJSON := map[string]string{}
	for _, f := range fields {
		goToJSON[f.goName] = f.name
	}
	if !out.has("description") {
		if d := jsonNames(g.src.docs[t.Name()], goToJSON); d != "" {
			out.set("description", d)
		}
	}
	overProps := over.obj("properties")
	props := newObject()
	var required []any
	for _, f := range fields {
		if f.embedded {
			return nil, fmt.Errorf("api.%s: embedded field %s is not supported", t.Name(), f.goName)
		}
		at := name + "." + f.name
		p, err := g.fieldSchema(f, overProps.obj(f.name), at)
		if err != nil {
			return nil, err
		}
		if !p.has("description") {
			if d := jsonNames(g.src.docs[t.Name()+"."+f.goName], goToJSON); d != "" {
				p.set("description", d)
			}
		}
		props.set(f.name, p)
		if !f.omitempty {
			required = append(required, f.name)
		}
	}
	if err := overProps.each(func(k string, _ any) error {
		if !props.has(k) {
			return fmt.Errorf("openapi.in.json: components.schemas.%s.properties.%s: api.%s has no such JSON field", name, k, t.Name())
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if len(required) > 0 {
		out.set("required", required)
	}
	out.set("properties", props)
	return out, nil
}

type jsonField struct {
	goName    string
	name      string
	omitempty bool
	embedded  bool
	typ       reflect.Type
}

// jsonFields are the fields encoding/json writes, in order.
func jsonFields(t reflect.Type) []jsonField {
	var out []jsonField
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		if !f.IsExported() || tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		out = append(out, jsonField{goName: f.Name, name: name, omitempty: slices.Contains(strings.Split(opts, ","), "omitempty"),
			embedded: f.Anonymous, typ: f.Type})
	}
	return out
}

// fieldSchema is the schema of one field: a pointer without omitempty is
// sent as null when nil, so its schema also allows null.
func (g *gen) fieldSchema(f jsonField, over *object, at string) (*object, error) {
	if f.typ.Kind() != reflect.Pointer || f.omitempty {
		return g.schemaOf(f.typ, over, at)
	}
	base, err := g.schemaOf(f.typ.Elem(), nil, at)
	if err != nil {
		return nil, err
	}
	out := newObject("oneOf", []any{base, newObject("type", "null")})
	return out, merge(out, over, nil, at)
}

var timeType = reflect.TypeFor[time.Time]()

// schemaOf is the schema of Go type t with what the overlay adds to it;
// nested schemas (items, additionalProperties) take the overlay's nested
// objects. A free-form map[string]any takes the overlay's $ref instead of
// its own type. A string type of package api is an enum of its constants.
func (g *gen) schemaOf(t reflect.Type, over *object, at string) (*object, error) {
	out := newObject()
	nested := map[string]bool{}
	switch {
	case t == timeType:
		out.set("type", "string")
		out.set("format", "date-time")
	case t.Kind() == reflect.Pointer:
		return g.schemaOf(t.Elem(), over, at)
	case t.Kind() == reflect.Struct:
		name, ok := g.names[t]
		if !ok {
			return nil, fmt.Errorf("%s: Go type %s is not in apigen's schemas table", at, t)
		}
		out.set("$ref", "#/components/schemas/"+name)
	case t.Kind() == reflect.String:
		out.set("type", "string")
		if t.PkgPath() != "" && t.PkgPath() == g.src.pkg {
			values := g.src.enums[t.Name()]
			if len(values) == 0 {
				return nil, fmt.Errorf("%s: Go type %s has no constants to make its enum", at, t)
			}
			enum := make([]any, len(values))
			for i, v := range values {
				enum[i] = v
			}
			out.set("enum", enum)
		}
	case t.Kind() == reflect.Bool:
		out.set("type", "boolean")
	case t.Kind() == reflect.Int64 || t.Kind() == reflect.Uint64:
		out.set("type", "integer")
		out.set("format", "int64")
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint32:
		out.set("type", "integer")
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		out.set("type", "number")
	case t.Kind() == reflect.Slice:
		items, err := g.schemaOf(t.Elem(), over.obj("items"), at+"[]")
		if err != nil {
			return nil, err
		}
		out.set("type", "array")
		out.set("items", items)
		nested["items"] = true
	case t.Kind() == reflect.Map && t.Key().Kind() == reflect.String && t.Elem().Kind() == reflect.Interface:
		if !over.has("$ref") {
			out.set("type", "object")
		}
	case t.Kind() == reflect.Map && t.Key().Kind() == reflect.String:
		values, err := g.schemaOf(t.Elem(), over.obj("additionalProperties"), at+"{}")
		if err != nil {
			return nil, err
		}
		out.set("type", "object")
		out.set("additionalProperties", values)
		nested["additionalProperties"] = true
	case t.Kind() == reflect.Interface:
		// Any JSON value: the overlay may say more.
	default:
		return nil, fmt.Errorf("%s: no schema for Go type %s", at, t)
	}
	return out, merge(out, over, nested, at)
}

// merge adds the overlay's keys to a derived schema; a key derived already
// is an error, so that the overlay cannot contradict the Go types.
func merge(out, over *object, nested map[string]bool, at string) error {
	return over.each(func(k string, v any) error {
		if nested[k] {
			return nil
		}
		if out.has(k) {
			return fmt.Errorf("openapi.in.json: %s: %q is derived from the Go type: remove it from the overlay", at, k)
		}
		out.set(k, v)
		return nil
	})
}

// wildcard matches a ServeMux wildcard: {name} or {name...} ({$} is not
// one).
var wildcard = regexp.MustCompile(`\{([A-Za-z_][A-Za-z0-9_]*)(\.\.\.)?\}`)

var methods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// buildPaths lays out the overlay's operations by route: a path for every
// documented route, in the routes' order, its path parameters from the
// route's wildcards. A route without an operation (that x-undocumented
// does not name) or an operation without a route is an error.
func buildPaths(in *object, routes []string) (*object, error) {
	overPaths := in.obj("paths")
	undoc := in.obj("x-undocumented")
	usedUndoc := map[string]bool{}
	type pathRoutes struct {
		pattern string // of the first route of the path
		methods []string
		any     bool // a route for every method
	}
	var order []string
	byPath := map[string]*pathRoutes{}
	for _, pattern := range routes {
		method, path, ok := strings.Cut(pattern, " ")
		if !ok {
			method, path = "", pattern
		}
		skip := false
		undoc.each(func(k string, _ any) error {
			if k == pattern || (!strings.Contains(k, " ") && (k == path || (len(k) > 1 && strings.HasSuffix(k, "/") && strings.HasPrefix(path, k)))) {
				usedUndoc[k] = true
				skip = true
			}
			return nil
		})
		if skip {
			continue
		}
		oaPath := wildcard.ReplaceAllString(path, "{$1}")
		item := overPaths.obj(oaPath)
		if item == nil {
			return nil, fmt.Errorf("route %q is not documented: add %s to the paths of internal/apigen/openapi.in.json (or name it in x-undocumented)", pattern, oaPath)
		}
		pr := byPath[oaPath]
		if pr == nil {
			pr = &pathRoutes{pattern: pattern}
			byPath[oaPath] = pr
			order = append(order, oaPath)
		}
		if method == "" {
			pr.any = true
			continue
		}
		m := strings.ToLower(method)
		if item.obj(m) == nil {
			return nil, fmt.Errorf("route %q is not documented: add %s to paths.%s of internal/apigen/openapi.in.json", pattern, m, oaPath)
		}
		pr.methods = append(pr.methods, m)
	}
	if err := undoc.each(func(k string, _ any) error {
		if !usedUndoc[k] {
			return fmt.Errorf("openapi.in.json: x-undocumented names %q, which is no route", k)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if err := overPaths.each(func(k string, _ any) error {
		if byPath[k] == nil {
			return fmt.Errorf("openapi.in.json: paths.%s is no route of internal/httpapi", k)
		}
		return nil
	}); err != nil {
		return nil, err
	}

	out := newObject()
	for _, p := range order {
		pr := byPath[p]
		over := overPaths.obj(p)
		item := newObject()
		params, err := pathParams(p, over.get("parameters"))
		if err != nil {
			return nil, err
		}
		if len(params) > 0 {
			item.set("parameters", params)
		}
		ops := pr.methods
		if pr.any {
			ops = nil
			over.each(func(k string, _ any) error {
				if slices.Contains(methods, k) {
					ops = append(ops, k)
				}
				return nil
			})
		}
		for _, m := range ops {
			item.set(m, over.get(m))
		}
		if err := over.each(func(k string, _ any) error {
			if k != "parameters" && !item.has(k) {
				return fmt.Errorf("openapi.in.json: paths.%s.%s is no route of internal/httpapi", p, k)
			}
			return nil
		}); err != nil {
			return nil, err
		}
		out.set(p, item)
	}
	return out, nil
}

// pathParams are the parameters of a path: one per wildcard of its route,
// completed by the overlay's entry of that name, then the overlay's other
// (query) parameters.
func pathParams(path string, over any) ([]any, error) {
	list, _ := over.([]any)
	byName := map[string]*object{}
	var others []any
	for _, v := range list {
		p, ok := v.(*object)
		if !ok {
			return nil, fmt.Errorf("openapi.in.json: paths.%s.parameters: not an object", path)
		}
		if p.str("in") == "path" {
			byName[p.str("name")] = p
		} else {
			others = append(others, p)
		}
	}
	var out []any
	for _, m := range wildcard.FindAllStringSubmatch(path, -1) {
		name := m[1]
		p := newObject("name", name, "in", "path", "required", true)
		if err := byName[name].each(func(k string, v any) error {
			if k == "name" || k == "in" {
				return nil
			}
			if p.has(k) {
				return fmt.Errorf("openapi.in.json: paths.%s: parameter %s: %q is derived from the route", path, name, k)
			}
			p.set(k, v)
			return nil
		}); err != nil {
			return nil, err
		}
		if !p.has("schema") {
			p.set("schema", newObject("type", "string"))
		}
		delete(byName, name)
		out = append(out, p)
	}
	if len(byName) > 0 {
		return nil, fmt.Errorf("openapi.in.json: paths.%s: path parameters %q are no wildcards of the route", path, slices.Sorted(maps.Keys(byName)))
	}
	return append(out, others...), nil
}

// checkRefs fails on a local $ref that does not resolve.
func checkRefs(doc *object, v any, at string) error {
	switch v := v.(type) {
	case *object:
		if ref, ok := v.get("$ref").(string); ok && resolve(doc, ref) == nil {
			return fmt.Errorf("%s: $ref %q does not resolve", at, ref)
		}
		return v.each(func(k string, e any) error { return checkRefs(doc, e, at+"/"+k) })
	case []any:
		for i, e := range v {
			if err := checkRefs(doc, e, fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

func resolve(doc *object, ref string) any {
	rest, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return nil
	}
	var cur any = doc
	for _, part := range strings.Split(rest, "/") {
		o, ok := cur.(*object)
		if !ok {
			return nil
		}
		part = strings.NewReplacer("~1", "/", "~0", "~").Replace(part)
		if !o.has(part) {
			return nil
		}
		cur = o.get(part)
	}
	return cur
}
