package apigen

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// source is what the generator reads from package api's Go files that
// reflection cannot see: doc comments and constants.
type source struct {
	// docs holds the doc comment of each type ("Sandbox") and struct field
	// ("Sandbox.Name"), as one line.
	docs map[string]string
	// pkg is the package's import path: its named string types are enums.
	pkg string
	// enums holds the values of the string constants of each named type
	// ("SandboxState"), in source order.
	enums map[string][]string
	// structs are the exported struct types.
	structs []string
}

// parseAPI reads the Go files of package api in dir (tests left out).
func parseAPI(dir string) (*source, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read package api: %w", err)
	}
	fset := token.NewFileSet()
	src := &source{docs: map[string]string{}, pkg: apiPkg, enums: map[string][]string{}}
	var (
		consts      []*ast.ValueSpec // of a named type
		stringTypes = map[string]bool{}
	)
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments)
		if err != nil {
			return nil, fmt.Errorf("parse package api: %w", err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok {
				continue
			}
			switch gd.Tok {
			case token.CONST:
				for _, spec := range gd.Specs {
					if vs := spec.(*ast.ValueSpec); vs.Type != nil {
						consts = append(consts, vs)
					}
				}
			case token.TYPE:
				for _, spec := range gd.Specs {
					ts := spec.(*ast.TypeSpec)
					if id, ok := ts.Type.(*ast.Ident); ok && id.Name == "string" {
						stringTypes[ts.Name.Name] = true
					}
					src.addType(gd, ts)
				}
			}
		}
	}
	for _, vs := range consts {
		if err := src.addEnumValues(fset, vs, stringTypes); err != nil {
			return nil, err
		}
	}
	sort.Strings(src.structs)
	return src, nil
}

// addEnumValues records constants of a string type of the package
// (StateRunning SandboxState = "running") as values of that type, in
// source order; a constant of such a type whose value is not a string
// literal is an error, as it would be left out of the type's enum.
func (src *source) addEnumValues(fset *token.FileSet, vs *ast.ValueSpec, stringTypes map[string]bool) error {
	typ, ok := vs.Type.(*ast.Ident)
	if !ok || !stringTypes[typ.Name] {
		return nil
	}
	for i, n := range vs.Names {
		var lit *ast.BasicLit
		if i < len(vs.Values) {
			lit, _ = vs.Values[i].(*ast.BasicLit)
		}
		if lit == nil || lit.Kind != token.STRING {
			return fmt.Errorf("%s: constant %s of type %s: write its value as a string literal", fset.Position(n.Pos()), n.Name, typ.Name)
		}
		v, err := strconv.Unquote(lit.Value)
		if err != nil {
			return fmt.Errorf("%s: constant %s: %w", fset.Position(n.Pos()), n.Name, err)
		}
		src.enums[typ.Name] = append(src.enums[typ.Name], v)
	}
	return nil
}

func (src *source) addType(gd *ast.GenDecl, ts *ast.TypeSpec) {
	doc := ts.Doc
	if doc == nil && len(gd.Specs) == 1 {
		doc = gd.Doc
	}
	st, ok := ts.Type.(*ast.StructType)
	if !ok || !ts.Name.IsExported() {
		return
	}
	src.structs = append(src.structs, ts.Name.Name)
	src.docs[ts.Name.Name] = commentText(doc)
	for _, f := range st.Fields.List {
		text := commentText(f.Doc)
		if text == "" {
			text = commentText(f.Comment)
		}
		for _, n := range f.Names {
			src.docs[ts.Name.Name+"."+n.Name] = text
		}
	}
}

// commentText is a comment as one line of text.
func commentText(g *ast.CommentGroup) string {
	if g == nil {
		return ""
	}
	return strings.Join(strings.Fields(g.Text()), " ")
}

// jsonNames rewrites the Go names of a struct's fields in a doc comment to
// their JSON names ("Truncated says ..." becomes "truncated says ..."), as
// the document's readers see only the latter.
func jsonNames(text string, names map[string]string) string {
	if text == "" || len(names) == 0 {
		return text
	}
	goNames := make([]string, 0, len(names))
	for n := range names {
		goNames = append(goNames, regexp.QuoteMeta(n))
	}
	sort.Slice(goNames, func(i, j int) bool { return len(goNames[i]) > len(goNames[j]) })
	re := regexp.MustCompile(`\b(` + strings.Join(goNames, "|") + `)\b`)
	return re.ReplaceAllStringFunc(text, func(n string) string { return names[n] })
}
