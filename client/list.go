package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/forkbox/forkbox/api"
)

// The daemon's lists come a page at a time: GET /v1/sandboxes, snapshots,
// images, conversations and audit take a limit and a cursor and answer
// the cursor of the next page (NextCursor, "" on the last). ListSandboxes,
// ListSnapshots, ImageList (ListImages) and ListConversations follow the
// cursors and return every page; the …Page calls return one.

// Page asks for one page of a list.
type Page struct {
	// Limit bounds the page: 0 means the daemon's default (100); at most
	// 1000.
	Limit int
	// Cursor is the NextCursor of the page before; "" asks for the first
	// page.
	Cursor string
}

// walkLimit is the page size the List calls walk with unless WithPageLimit
// set another: the most the daemon gives, for the fewest round trips.
const walkLimit = 1000

// maxPages bounds a walk: a daemon that kept answering cursors would
// otherwise keep a List call going forever.
const maxPages = 100000

func (p Page) query(q url.Values) url.Values {
	if q == nil {
		q = url.Values{}
	}
	if p.Limit != 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	if p.Cursor != "" {
		q.Set("cursor", p.Cursor)
	}
	return q
}

// walk calls page from the first page on, each time with the cursor the
// one before returned, until a page returns none. A cursor that comes back
// unchanged is an error, not a loop.
func (c *Client) walk(ctx context.Context, page func(ctx context.Context, p Page) (next string, err error)) error {
	p := Page{Limit: walkLimit}
	if c.pageLimit > 0 {
		p.Limit = c.pageLimit
	}
	for range maxPages {
		next, err := page(ctx, p)
		if err != nil {
			return err
		}
		if next == "" {
			return nil
		}
		if next == p.Cursor {
			return fmt.Errorf("the daemon answered the cursor it was sent (%q) as the next page's: the list cannot go on", next)
		}
		p.Cursor = next
	}
	return fmt.Errorf("the list did not end after %d pages", maxPages)
}

// ListSandboxesPage returns one page of the sandboxes that match opts,
// newest first, and in its NextCursor the cursor of the next page ("" on
// the last).
//
// Errors: ErrInvalidArgument for a Limit out of 0–1000, a cursor the
// daemon did not make for this list, or a bad filter.
func (c *Client) ListSandboxesPage(ctx context.Context, opts ListOptions, p Page) (*api.SandboxList, error) {
	var list api.SandboxList
	if err := c.doJSON(ctx, http.MethodGet, "/v1/sandboxes", p.query(opts.query()), nil, &list); err != nil {
		return nil, err
	}
	return &list, nil
}

// ListSnapshotsPage returns one page of the snapshots (of one sandbox, id
// or name, when sandbox is set), newest first, and in its NextCursor the
// cursor of the next page ("" on the last).
func (c *Client) ListSnapshotsPage(ctx context.Context, sandbox string, p Page) (*api.SnapshotList, error) {
	q := url.Values{}
	if sandbox != "" {
		q.Set("sandbox", sandbox)
	}
	var list api.SnapshotList
	if err := c.doJSON(ctx, http.MethodGet, "/v1/snapshots", p.query(q), nil, &list); err != nil {
		return nil, err
	}
	return &list, nil
}

// ListImagesPage returns one page of the images, by name, and in its
// NextCursor the cursor of the next page ("" on the last); the first page
// also lists the daemon's own images being built.
func (c *Client) ListImagesPage(ctx context.Context, p Page) (*api.ImageList, error) {
	var list api.ImageList
	if err := c.doJSON(ctx, http.MethodGet, "/v1/images", p.query(nil), nil, &list); err != nil {
		return nil, err
	}
	return &list, nil
}

// ListConversationsPage returns one page of the conversations, the most
// recently updated first, and in its NextCursor the cursor of the next
// page ("" on the last).
func (c *Client) ListConversationsPage(ctx context.Context, p Page) (*api.ConversationList, error) {
	var list api.ConversationList
	if err := c.doJSON(ctx, http.MethodGet, "/v1/conversations", p.query(nil), nil, &list); err != nil {
		return nil, err
	}
	return &list, nil
}
