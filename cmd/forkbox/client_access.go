package main

// Tenants, API keys, quotas and the audit log: forkbox key, tenant, usage and
// audit.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/client"
	"github.com/forkbox/forkbox/internal/units"
)

func keyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "key",
		Short: "Create, list and revoke API keys (admin key)",
		Long: `API keys belong to tenants: whatever a key makes belongs to its tenant, and
another tenant's sandboxes, snapshots and pools do not exist for it. A user
key works with its tenant's resources; an admin key also manages keys and
tenants' quotas and reads the audit log. These commands need an admin key
(--api-key or FORKBOX_API_KEY), such as the daemon's own.`,
		Example: `  forkbox key create --tenant acme --name ci --expires 720h --max-running 4
  forkbox key ls --tenant acme
  forkbox key revoke key_0123456789ab`,
		Args: cobra.NoArgs, // an unknown subcommand is an error, not help
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(keyCreateCmd(), keyLsCmd(), keyRevokeCmd())
	return cmd
}

func keyCreateCmd() *cobra.Command {
	var (
		req     api.CreateKeyRequest
		role    string
		expires string
		quotas  quotaFlags
	)
	cmd := &cobra.Command{
		Use:   "create --tenant TENANT [--role user|admin] [--name NOTE] [--expires DURATION|TIME] [quota flags]",
		Short: "Create an API key and print its secret",
		Long: `Create an API key for --tenant and print its id and secret. The secret is
shown this once (the daemon keeps only its hash): store it now. With --json
the key is printed as JSON, its "secret" included.

--expires ends the key after a duration (720h, 90m, or days: 30d) or at a time
(2027-01-01T00:00:00Z, or a date: 2027-01-01, midnight UTC); without it the
key lasts until revoked.

The --max-* flags also set the tenant's quotas, as a whole: a quota not given
becomes unlimited (-1 says so explicitly). To change some quotas of a tenant
and keep the others, use forkbox tenant set.`,
		Example: `  forkbox key create --tenant acme --name ci
  forkbox key create --tenant acme --expires 30d --max-running 4 --max-memory-mb 8192
  forkbox key create --tenant ops --role admin --expires 2027-01-01T00:00:00Z
  SECRET=$(forkbox key create --tenant acme --json | jq -r .secret)`,
		Args: cobra.NoArgs,
		RunE: run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			if req.Tenant == "" {
				return errors.New("key create: give the key's --tenant")
			}
			if req.Role = api.Role(role); !req.Role.Valid() {
				return fmt.Errorf("key create: --role %q: want %s or %s", role, api.RoleUser, api.RoleAdmin)
			}
			if expires != "" {
				var err error
				if req.ExpiresIn, req.ExpiresAt, err = parseExpires(expires); err != nil {
					return fmt.Errorf("key create: --expires %q: %w", expires, err)
				}
			}
			var q api.Quotas
			given, err := quotas.apply(cmd, &q)
			if err != nil {
				return fmt.Errorf("key create: %w", err)
			}
			if given {
				req.Quotas = &q
			}
			k, err := c.CreateKey(ctx, req)
			if err != nil {
				return err
			}
			if clientFlags.json {
				return printJSON(cmd.OutOrStdout(), k)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "key %s for tenant %s (%s)\n", k.ID, k.Tenant, k.Role)
			if k.ExpiresAt != nil {
				fmt.Fprintf(w, "expires: %s\n", k.ExpiresAt.Format(time.RFC3339))
			}
			fmt.Fprintf(w, "secret: %s\n", k.Secret)
			fmt.Fprintln(w, "store it now: it is not shown again")
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVar(&req.Tenant, "tenant", "", "the `TENANT` the key belongs to")
	f.StringVar(&role, "role", string(api.RoleUser), "`ROLE`: user (its tenant's resources) or admin (also keys, quotas, audit)")
	f.StringVar(&req.Name, "name", "", "a `NOTE` on what the key is for (ci, alice's laptop)")
	f.StringVar(&expires, "expires", "", "end the key `WHEN`: after a duration (720h, 30d) or at a time (RFC 3339, or a date)")
	quotas.add(cmd)
	return cmd
}

// parseExpires reads --expires: a Go duration or a number of days ("30d"),
// sent as expires_in, or a time (RFC 3339, or a date: midnight UTC), sent as
// expires_at.
func parseExpires(s string) (in string, at *time.Time, err error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return "", nil, errors.New("want a positive duration")
		}
		return s, nil, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n <= 0 {
			return "", nil, errors.New("want a positive number of days, like 30d")
		}
		return strconv.Itoa(n*24) + "h", nil, nil
	}
	for _, layout := range []string{time.RFC3339, "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return "", &t, nil
		}
	}
	return "", nil, errors.New("want a duration (720h, 30d) or a time (2027-01-01T00:00:00Z, 2027-01-01)")
}

func keyLsCmd() *cobra.Command {
	var tenant string
	cmd := &cobra.Command{
		Use:     "ls [--tenant TENANT]",
		Aliases: []string{"list"},
		Short:   "List API keys",
		Long: `List API keys (never their secrets), revoked and expired ones included.
CREATED is the key's age; EXPIRES is when it ends ("never" if it does not);
STATUS is active, revoked or expired.`,
		Example: `  forkbox key ls
  forkbox key ls --tenant acme`,
		Args: cobra.NoArgs,
		RunE: run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			list, err := c.ListKeys(ctx, tenant)
			if err != nil {
				return err
			}
			if clientFlags.json {
				if list.Keys == nil {
					list.Keys = []api.Key{}
				}
				return printJSON(cmd.OutOrStdout(), list)
			}
			printKeyTable(cmd.OutOrStdout(), list.Keys, time.Now())
			return nil
		}),
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "only the keys of `TENANT`")
	return cmd
}

func printKeyTable(w io.Writer, keys []api.Key, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "ID\tTENANT\tROLE\tNAME\tCREATED\tEXPIRES\tSTATUS")
	for _, k := range keys {
		expires := "never"
		if k.ExpiresAt != nil {
			if k.ExpiresAt.After(now) {
				expires = "in " + humanAge(*k.ExpiresAt, now)
			} else {
				expires = humanAge(now, *k.ExpiresAt) + " ago"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Tenant, k.Role, orDash(k.Name),
			humanAge(now, k.CreatedAt)+" ago", expires, keyStatus(k, now))
	}
	tw.Flush()
}

// keyStatus is active, revoked or expired.
func keyStatus(k api.Key, now time.Time) string {
	switch {
	case k.RevokedAt != nil:
		return "revoked"
	case k.ExpiresAt != nil && !k.ExpiresAt.After(now):
		return "expired"
	}
	return "active"
}

func keyRevokeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke an API key",
		Long: `Revoke an API key: it stops working at once. Prints "ID revoked" (--json: the
key). What the key made stays with its tenant.`,
		Example: `  forkbox key revoke key_0123456789ab`,
		Args:    exactArgs(1, "key revoke: name the key: forkbox key revoke ID (see forkbox key ls)"),
		RunE: run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			k, err := c.RevokeKey(ctx, args[0])
			if err != nil {
				return err
			}
			if clientFlags.json {
				return printJSON(cmd.OutOrStdout(), k)
			}
			fmt.Fprintln(cmd.OutOrStdout(), k.ID, "revoked")
			return nil
		}),
	}
}

func tenantCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tenant",
		Short: "List tenants and show or set their quotas (admin key)",
		Long: `A tenant owns the resources its API keys make (see forkbox key). Its quotas
bound what it may hold at once: running sandboxes, their memory and CPUs,
suspended sandboxes, and the bytes of its snapshots and images. A call that
would go over one fails with "quota ... exceeded". These commands need an
admin key; forkbox usage shows the caller's own tenant with any key.`,
		Example: `  forkbox tenant ls
  forkbox tenant show acme
  forkbox tenant set acme --max-running 4 --max-memory-mb 8192
  forkbox tenant set acme --max-memory-mb -1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(tenantLsCmd(), tenantShowCmd(), tenantSetCmd())
	return cmd
}

func tenantLsCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List tenants with their usage and quotas",
		Long: `List tenants. Each column after NAME is USE/LIMIT of one quota; a limit of -
is unlimited. Sizes are in binary units (MiB, GiB).`,
		Args: cobra.NoArgs,
		RunE: run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			list, err := c.ListTenants(ctx)
			if err != nil {
				return err
			}
			if clientFlags.json {
				if list.Tenants == nil {
					list.Tenants = []api.Tenant{}
				}
				return printJSON(cmd.OutOrStdout(), list)
			}
			printTenantTable(cmd.OutOrStdout(), list.Tenants)
			return nil
		}),
	}
}

func printTenantTable(w io.Writer, tenants []api.Tenant) {
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "NAME\tRUNNING\tMEMORY\tCPUS\tSUSPENDED\tSNAPSHOTS\tIMAGES")
	for _, t := range tenants {
		cells := []string{t.Name}
		for _, r := range quotaRows(t.Usage, t.Quotas) {
			use := "-"
			if t.Usage != nil {
				use = r.use
			}
			limit := "-"
			if r.limit != nil {
				limit = *r.limit
			}
			cells = append(cells, use+"/"+limit)
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	tw.Flush()
}

func tenantShowCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "show TENANT",
		Short: "Show a tenant's usage and quotas",
		Long: `Show what a tenant holds now against its quotas, one line per quota:
NAME USE LIMIT. Byte sizes are shown with binary units; --json gives them
exactly.`,
		Example: `  forkbox tenant show acme`,
		Args:    exactArgs(1, "tenant show: name the tenant: forkbox tenant show TENANT"),
		RunE: run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			t, err := c.GetTenant(ctx, args[0])
			if err != nil {
				return err
			}
			return printTenant(cmd, t)
		}),
	}
}

// printTenant prints t as JSON or as its usage table.
func printTenant(cmd *cobra.Command, t *api.Tenant) error {
	if clientFlags.json {
		return printJSON(cmd.OutOrStdout(), t)
	}
	usage := t.Usage
	if usage == nil {
		usage = &api.TenantUsage{Tenant: t.Name}
	}
	usage.Quotas = t.Quotas
	printUsage(cmd.OutOrStdout(), usage)
	return nil
}

func tenantSetCmd() *cobra.Command {
	var quotas quotaFlags
	cmd := &cobra.Command{
		Use:   "set TENANT --max-... N [--max-... N ...]",
		Short: "Change some of a tenant's quotas",
		Long: `Change the quotas given as flags and keep the others: the tenant's quotas are
read, changed and written back. A value of -1 removes that quota (unlimited).
Prints the tenant's usage and quotas as forkbox tenant show does.

Quotas apply to what is made from then on: a tenant over a new limit keeps
what it holds, but cannot take more.`,
		Example: `  forkbox tenant set acme --max-running 4 --max-cpus 8
  forkbox tenant set acme --max-snapshot-bytes 20G --max-image-bytes -1`,
		Args: exactArgs(1, "tenant set: name the tenant: forkbox tenant set TENANT --max-running N ..."),
		RunE: run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			name := args[0]
			if !quotas.given(cmd) {
				return errors.New("tenant set: give the quotas to change: " + quotaFlagList + " (-1: unlimited)")
			}
			var q api.Quotas
			t, err := c.GetTenant(ctx, name)
			switch {
			case err == nil:
				q = t.Quotas
			case errors.Is(err, client.ErrNotFound):
				// The daemon answers zeros for a tenant that holds
				// nothing; a 404 says the same: no quotas to keep.
			default:
				return fmt.Errorf("reading the quotas of %s: %w", name, err)
			}
			if _, err := quotas.apply(cmd, &q); err != nil {
				return fmt.Errorf("tenant set: %w", err)
			}
			t, err = c.SetTenantQuotas(ctx, name, q)
			if err != nil {
				return err
			}
			return printTenant(cmd, t)
		}),
	}
	quotas.add(cmd)
	return cmd
}

func usageCmd() *cobra.Command {
	var tenant string
	cmd := &cobra.Command{
		Use:   "usage [--tenant TENANT]",
		Short: "Show what your tenant holds against its quotas",
		Long: `Show what the API key's tenant holds now against its quotas, one line per
quota: NAME USE LIMIT ("unlimited" when there is no limit). With an admin key,
--tenant shows another tenant.`,
		Example: `  forkbox usage
  forkbox usage --tenant acme --json`,
		Args: cobra.NoArgs,
		RunE: run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			u, err := c.Usage(ctx, tenant)
			if err != nil {
				return err
			}
			if clientFlags.json {
				return printJSON(cmd.OutOrStdout(), u)
			}
			printUsage(cmd.OutOrStdout(), u)
			return nil
		}),
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "another `TENANT` (admin key)")
	return cmd
}

// printUsage prints the tenant's name, then one line per quota.
func printUsage(w io.Writer, u *api.TenantUsage) {
	fmt.Fprintf(w, "tenant %s\n", u.Tenant)
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "NAME\tUSE\tLIMIT")
	for _, r := range quotaRows(u, u.Quotas) {
		limit := "unlimited"
		if r.limit != nil {
			limit = *r.limit
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.name, r.use, limit)
	}
	tw.Flush()
}

// quotaRow is one quota, formatted: what is used of it (of u, when given)
// and its limit (nil: unlimited).
type quotaRow struct {
	name  api.QuotaName
	use   string
	limit *string
}

// quotaRows lists the quotas in a fixed order, formatted for people.
func quotaRows(u *api.TenantUsage, q api.Quotas) []quotaRow {
	if u == nil {
		u = &api.TenantUsage{}
	}
	rows := []quotaRow{
		intRow(api.QuotaRunningSandboxes, u.RunningSandboxes, q.RunningSandboxes),
		intRow(api.QuotaMemoryMB, u.MemoryMB, q.MemoryMB),
		{name: api.QuotaCPUs, use: quotaValue(api.QuotaCPUs, u.CPUs)},
		intRow(api.QuotaSuspendedSandboxes, u.SuspendedSandboxes, q.SuspendedSandboxes),
		intRow(api.QuotaSnapshotBytes, u.SnapshotBytes, q.SnapshotBytes),
		intRow(api.QuotaImageBytes, u.ImageBytes, q.ImageBytes),
	}
	if q.CPUs != nil {
		l := quotaValue(api.QuotaCPUs, *q.CPUs)
		rows[2].limit = &l
	}
	return rows
}

func intRow(name api.QuotaName, use int64, limit *int64) quotaRow {
	r := quotaRow{name: name, use: quotaValue(name, float64(use))}
	if limit != nil {
		l := quotaValue(name, float64(*limit))
		r.limit = &l
	}
	return r
}

// quotaValue formats an amount of quota name: bytes with binary units, the
// rest as plain numbers.
func quotaValue(name api.QuotaName, v float64) string {
	switch {
	case strings.HasSuffix(string(name), "_bytes"):
		return units.Bytes(int64(v))
	case name == api.QuotaMemoryMB && v > 0:
		return humanMiB(int64(v))
	case name == api.QuotaMemoryMB:
		return "0 MiB"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// quotaFlags are the --max-* flags of key create and tenant set.
type quotaFlags struct {
	running, suspended        int64
	memoryMB                  mibFlag
	snapshotBytes, imageBytes sizeFlag
	cpus                      float64
}

const quotaFlagList = "--max-running, --max-memory-mb, --max-cpus, --max-suspended, --max-snapshot-bytes, --max-image-bytes"

func (q *quotaFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.Int64Var(&q.running, "max-running", 0, "quota: at most `N` running sandboxes (-1: unlimited)")
	q.memoryMB = mibFlag{name: "max-memory-mb", unlimited: true}
	f.Var(&q.memoryMB, "max-memory-mb", "quota: at most this much memory over the running sandboxes: 4G, 512M or MiB (-1: unlimited)")
	f.Float64Var(&q.cpus, "max-cpus", 0, "quota: at most `F` CPUs over the running sandboxes (-1: unlimited)")
	f.Int64Var(&q.suspended, "max-suspended", 0, "quota: at most `N` suspended sandboxes (-1: unlimited)")
	f.Var(&q.snapshotBytes, "max-snapshot-bytes", "quota: at most `N` bytes of snapshots, or with a unit: 20G (-1: unlimited)")
	f.Var(&q.imageBytes, "max-image-bytes", "quota: at most `N` bytes of images, or with a unit: 5G (-1: unlimited)")
	sizeFlagErrors(cmd)
}

// given reports whether any quota flag was given.
func (q *quotaFlags) given(cmd *cobra.Command) bool {
	for _, name := range strings.Split(quotaFlagList, ", ") {
		if cmd.Flags().Changed(strings.TrimPrefix(name, "--")) {
			return true
		}
	}
	return false
}

// apply sets the quotas whose flags were given in qs (-1: nil, unlimited)
// and leaves the others. It reports whether any flag was given.
func (q *quotaFlags) apply(cmd *cobra.Command, qs *api.Quotas) (bool, error) {
	f := cmd.Flags()
	for _, it := range []struct {
		flag string
		v    int64
		dst  **int64
	}{
		{"max-running", q.running, &qs.RunningSandboxes},
		{"max-memory-mb", q.memoryMB.mib, &qs.MemoryMB},
		{"max-suspended", q.suspended, &qs.SuspendedSandboxes},
		{"max-snapshot-bytes", q.snapshotBytes.n, &qs.SnapshotBytes},
		{"max-image-bytes", q.imageBytes.n, &qs.ImageBytes},
	} {
		if !f.Changed(it.flag) {
			continue
		}
		switch v := it.v; {
		case v == -1:
			*it.dst = nil
		case v < 0:
			return false, fmt.Errorf("--%s %d: want 0 or more, or -1 for unlimited", it.flag, v)
		default:
			*it.dst = &v
		}
	}
	if f.Changed("max-cpus") {
		switch v := q.cpus; {
		case v == -1:
			qs.CPUs = nil
		case v < 0:
			return false, fmt.Errorf("--max-cpus %s: want 0 or more, or -1 for unlimited", strconv.FormatFloat(v, 'f', -1, 64))
		default:
			qs.CPUs = &v
		}
	}
	return q.given(cmd), nil
}

// sizeFlag is a byte count: plain bytes ("1073741824") or with a binary unit
// ("512M", "20G", "1.5GiB"); -1 passes through.
type sizeFlag struct{ n int64 }

func (f *sizeFlag) String() string {
	if f.n == 0 {
		return ""
	}
	return strconv.FormatInt(f.n, 10)
}

func (f *sizeFlag) Set(s string) error {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		f.n = n
		return nil
	}
	num := strings.TrimRight(s, "KMGTiBb")
	unit := strings.TrimSuffix(strings.TrimSuffix(s[len(num):], "B"), "i")
	shift := map[string]uint{"K": 10, "M": 20, "G": 30, "T": 40}[unit]
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || shift == 0 || v < 0 || v*float64(int64(1)<<shift) > 1<<62 {
		return errors.New("want bytes, or a size with a unit: 512M, 20G, 1.5T")
	}
	f.n = int64(v * float64(int64(1)<<shift))
	return nil
}

func (f *sizeFlag) Type() string { return "bytes" }

func auditCmd() *cobra.Command {
	var opts client.AuditOptions
	cmd := &cobra.Command{
		Use:   "audit [--tenant T] [--key ID] [--resource R] [--limit N] [--before ID]",
		Short: "Show the audit log (admin key)",
		Long: `Show the audit log, newest first: every call that changed something, or
tried to. TIME is local; KEY is the key that made the call ("admin" for the
daemon's own key); ACTION is the route, marked (mcp) for calls an MCP tool
made; RESOURCE is the sandbox, snapshot, ... the call named; STATUS is the
HTTP status of the answer and OUTCOME "ok" or the error code.

--limit bounds the entries shown (default 100, at most 1000). When the page is
full, the --before ID that shows the next, older page is printed on stderr.`,
		Example: `  forkbox audit --tenant acme --limit 20
  forkbox audit --resource analysis
  forkbox audit --key key_0123456789ab --before 1234`,
		Args: cobra.NoArgs,
		RunE: run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			if opts.Limit < 0 || opts.Limit > 1000 {
				return fmt.Errorf("audit: --limit %d: want 1 to 1000", opts.Limit)
			}
			list, err := c.Audit(ctx, opts)
			if err != nil {
				return err
			}
			if clientFlags.json {
				if list.Entries == nil {
					list.Entries = []api.AuditEntry{}
				}
				return printJSON(cmd.OutOrStdout(), list)
			}
			printAuditTable(cmd.OutOrStdout(), list.Entries, time.Local)
			limit := opts.Limit
			if limit == 0 {
				limit = 100
			}
			if n := len(list.Entries); n > 0 && n >= limit {
				fmt.Fprintf(cmd.ErrOrStderr(), "older entries: --before %d\n", list.Entries[n-1].ID)
			}
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVar(&opts.Tenant, "tenant", "", "only the calls of `TENANT`")
	f.StringVar(&opts.KeyID, "key", "", "only the calls made with the key `ID`")
	f.StringVar(&opts.Resource, "resource", "", "only the calls that named `R` (a sandbox id or name, a snapshot id, ...)")
	f.IntVarP(&opts.Limit, "limit", "n", 0, "show at most `N` entries (default 100, at most 1000)")
	f.Int64Var(&opts.Before, "before", 0, "only entries older than the entry `ID` (to page)")
	return cmd
}

func printAuditTable(w io.Writer, entries []api.AuditEntry, loc *time.Location) {
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "TIME\tKEY\tTENANT\tACTION\tRESOURCE\tSTATUS\tOUTCOME")
	for _, e := range entries {
		action := e.Action
		if e.Via != "" {
			action += " (" + e.Via + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", e.At.In(loc).Format("2006-01-02 15:04:05"), orDash(e.KeyID),
			orDash(e.Tenant), action, orDash(e.Resource), e.Status, e.Outcome)
	}
	tw.Flush()
}

// quotaError is how the CLI words an *APIError that carries a quota: "quota
// running_sandboxes exceeded: use 2 + 1 > limit 2". It unwraps to the API
// error, so errors.Is(err, errdefs.ErrResourceExhausted) still holds.
type quotaError struct {
	err error
	q   *api.QuotaExceeded
}

func (e *quotaError) Error() string {
	return fmt.Sprintf("quota %s exceeded: use %s + %s > limit %s", e.q.Quota,
		quotaValue(e.q.Quota, e.q.Use), quotaValue(e.q.Quota, e.q.Requested), quotaValue(e.q.Quota, e.q.Limit))
}

func (e *quotaError) Unwrap() error { return e.err }
