package sandbox

import (
	"context"
	"sort"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/store"
)

// The API's lists, a page at a time (the store's keyset pages: see
// store.Page). A page is as full as its limit while rows follow: rows the
// API never shows (the default pool's ready members, a sandbox's own
// suspend images) are skipped in the store's query or here, never left as
// holes.

// ListPage returns one page of the sandboxes that match f, newest first
// (oldest first with p.Oldest), with the cursor of the next page. The
// default pool's ready members, hidden from every call, are passed over:
// the store is asked for more until the page is full or the list ends.
// p.Limit 0 lists every sandbox in one page.
func (m *Manager) ListPage(ctx context.Context, f store.ListFilter, p store.Page) (*api.SandboxList, error) {
	var rows []*store.Sandbox
	page := p
	for {
		if p.Limit > 0 {
			// One more row than the page: whether another page follows.
			page.Limit = p.Limit + 1 - len(rows)
		}
		got, next, err := m.store.ListPage(ctx, f, page)
		if err != nil {
			return nil, err
		}
		for _, sb := range got {
			if !hiddenMember(sb) {
				rows = append(rows, sb)
			}
		}
		if next == "" || (p.Limit > 0 && len(rows) > p.Limit) {
			break
		}
		page.Cursor = next
	}
	out := &api.SandboxList{Sandboxes: make([]api.Sandbox, 0, len(rows))}
	if p.Limit > 0 && len(rows) > p.Limit {
		rows = rows[:p.Limit]
		out.NextCursor = store.SandboxCursor(rows[len(rows)-1], p.Oldest)
	}
	for _, sb := range rows {
		out.Sandboxes = append(out.Sandboxes, *m.view(sb))
	}
	return out, nil
}

// ListSnapshotsPage returns one page of the snapshots (of sandbox ref,
// id or name, when set; named name when set), newest first, with the
// cursor of the next page; sandboxes' own suspend images are left out by
// the store's query.
func (m *Manager) ListSnapshotsPage(ctx context.Context, ref, name string, p store.Page) (*api.SnapshotList, error) {
	f := store.SnapshotFilter{ExcludeType: snapshotSuspend, Name: name}
	if ref != "" {
		sb, err := m.store.Get(ctx, ref)
		if err != nil {
			return nil, err
		}
		f.SandboxID = sb.ID
	}
	list, next, err := m.store.ListSnapshotsPage(ctx, f, p)
	if err != nil {
		return nil, err
	}
	out := &api.SnapshotList{Snapshots: make([]api.Snapshot, 0, len(list)), NextCursor: next}
	for _, sn := range list {
		out.Snapshots = append(out.Snapshots, snapshotView(sn))
	}
	return out, nil
}

// ListImagesPage returns one page of the images ListImages returns, by
// name, with the cursor of the next page: images live in the image store,
// not in SQL, so the page is cut from the whole list in memory, after the
// name the cursor carries (an image added meanwhile is on a later page when
// its name sorts after that one).
func (m *Manager) ListImagesPage(ctx context.Context, p store.Page) ([]api.Image, string, error) {
	var after string
	if p.Cursor != "" {
		c, err := store.DecodeCursor(p.Cursor, store.CursorImages, false)
		if err != nil {
			return nil, "", err
		}
		after = c.ID
	}
	imgs, err := m.ListImages(ctx)
	if err != nil {
		return nil, "", err
	}
	if after != "" {
		imgs = imgs[sort.Search(len(imgs), func(i int) bool { return imgs[i].Name > after }):]
	}
	if p.Limit <= 0 || len(imgs) <= p.Limit {
		return imgs, "", nil
	}
	imgs = imgs[:p.Limit]
	return imgs, store.Cursor{Kind: store.CursorImages, ID: imgs[len(imgs)-1].Name}.Encode(), nil
}
