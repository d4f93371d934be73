package apigen

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
)

// routerFile is the file whose routes() registers every route of the API.
const routerFile = "internal/httpapi/server.go"

// parseRoutes returns the ServeMux patterns that func (s *Server) routes()
// of the router's source registers, in order: the first argument of every
// call of its h helper and of s.mux.Handle. Reading the source, rather than
// a server, keeps the router as it is: the patterns stay next to their
// handlers, and nothing is built to list them.
func parseRoutes(file string, src any) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, 0)
	if err != nil {
		return nil, fmt.Errorf("parse the router: %w", err)
	}
	var body *ast.BlockStmt
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == "routes" && fn.Recv != nil {
			body = fn.Body
		}
	}
	if body == nil {
		return nil, fmt.Errorf("%s has no routes method", file)
	}
	var out []string
	var bad error
	ast.Inspect(body, func(n ast.Node) bool {
		if _, ok := n.(*ast.FuncLit); ok {
			return false // the h helper itself, handlers: no route is registered inside
		}
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) != 2 || !registers(call.Fun) {
			return true
		}
		lit, ok := call.Args[0].(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			bad = fmt.Errorf("%s: a route whose pattern is not a string literal", fset.Position(call.Pos()))
			return false
		}
		p, err := strconv.Unquote(lit.Value)
		if err != nil {
			bad = fmt.Errorf("%s: %w", fset.Position(lit.Pos()), err)
			return false
		}
		out = append(out, p)
		return true
	})
	if bad != nil {
		return nil, bad
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: routes registers no route", file)
	}
	return out, nil
}

// registers reports whether fun is h or s.mux.Handle.
func registers(fun ast.Expr) bool {
	switch fun := fun.(type) {
	case *ast.Ident:
		return fun.Name == "h"
	case *ast.SelectorExpr:
		x, ok := fun.X.(*ast.SelectorExpr)
		return ok && fun.Sel.Name == "Handle" && x.Sel.Name == "mux"
	}
	return false
}
