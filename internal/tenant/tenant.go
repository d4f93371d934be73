// Package tenant carries who is asking through a request's context. The
// HTTP API puts the caller's Principal there after checking its key; the
// metadata store scopes every read and write to the context's tenant, so a
// lookup made for one tenant cannot see another's rows whichever code path
// made it. A context with no principal is the daemon's own work (reaping,
// pool refills, startup recovery) and sees every tenant.
package tenant

import (
	"context"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/lazyre"
)

// Default is the tenant of the daemon's own key and of every resource made
// before tenants existed.
const Default = api.DefaultTenant

// ValidName is what a tenant name must match: it is used in image names,
// labels and metric labels, so it is kept short and plain.
var ValidName = lazyre.New(`^[a-z0-9][a-z0-9-]{0,31}$`)

// Principal is an authenticated caller.
type Principal struct {
	// KeyID names the key ("admin" for the daemon's own key, "" when no key
	// is configured).
	KeyID  string
	Tenant string
	Admin  bool
	// Via is "mcp" for calls made by the daemon's MCP tools on the
	// caller's behalf.
	Via string
}

type ctxKey struct{}

// With returns ctx carrying p.
func With(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, ctxKey{}, p)
}

// From returns the principal of ctx, if any.
func From(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(ctxKey{}).(Principal)
	return p, ok
}

// Of returns the tenant ctx is scoped to, or "" for the daemon's own work.
func Of(ctx context.Context) string {
	p, _ := From(ctx)
	return p.Tenant
}

// Unscoped returns ctx without its principal, for the daemon's own
// bookkeeping on behalf of a request (a lookup that must see every tenant,
// such as the usage of a shared image). Use sparingly.
func Unscoped(ctx context.Context) context.Context {
	return context.WithValue(ctx, ctxKey{}, nil)
}
