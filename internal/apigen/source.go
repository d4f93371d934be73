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
// reflection cannot see: doc comments and const blocks.
type source struct {
	// docs holds the doc comment of each type ("Sandbox") and struct field
	// ("Sandbox.Name"), as one line.
	docs map[string]string
	// blocks holds the string constants of each const block, in source
	// order, by the name of every constant in it.
	blocks map[string][]string
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
	src := &source{docs: map[string]string{}, blocks: map[string][]string{}}
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
				src.addConsts(gd)
			case token.TYPE:
				for _, spec := range gd.Specs {
					src.addType(gd, spec.(*ast.TypeSpec))
				}
			}
		}
	}
	sort.Strings(src.structs)
	return src, nil
}

func (src *source) addConsts(gd *ast.GenDecl) {
	var names, values []string
	for _, spec := range gd.Specs {
		vs := spec.(*ast.ValueSpec)
		for i, n := range vs.Names {
			if i >= len(vs.Values) {
				continue
			}
			lit, ok := vs.Values[i].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				continue
			}
			v, err := strconv.Unquote(lit.Value)
			if err != nil {
				continue
			}
			names = append(names, n.Name)
			values = append(values, v)
		}
	}
	for _, n := range names {
		src.blocks[n] = values
	}
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
