package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/tenant"
	"github.com/jackc/pgx/v5"
)

// The ConversationStore half of Postgres. Writes that read before they
// write lock the conversation's row: AppendTurn FOR UPDATE (its next Seq),
// an upload given to it FOR SHARE (the conversation stays until the upload
// is stored), so writers on several daemons take turns.

// CreateConversation implements ConversationStore.
func (p *Postgres) CreateConversation(ctx context.Context, c *Conversation) error {
	c.Tenant = ownerFor(ctx, c.Tenant)
	_, err := p.pool.Exec(ctx, `INSERT INTO conversations(`+conversationCols+`) VALUES ($1,$2,$3,$4,$5,$6,$7,$8)`,
		c.ID, c.Title, c.SandboxID, c.SandboxName, c.Model, c.CreatedAt.UnixNano(), c.UpdatedAt.UnixNano(), c.Tenant)
	if pgUniqueViolation(err) {
		return errdefs.Conflict("conversation %s already exists", c.ID)
	}
	if err != nil {
		return fmt.Errorf("insert conversation: %w", err)
	}
	return nil
}

// GetConversation implements ConversationStore.
func (p *Postgres) GetConversation(ctx context.Context, id string) (*Conversation, error) {
	c, err := scanConversation(p.pool.QueryRow(ctx, `SELECT `+conversationCols+` FROM conversations WHERE id = $1 AND ($2 = '' OR tenant = $2)`, id, tenant.Of(ctx)))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errdefs.NotFound("conversation %q not found", id)
	}
	if err != nil {
		return nil, fmt.Errorf("get conversation %q: %w", id, err)
	}
	return c, nil
}

// ListConversations implements ConversationStore.
func (p *Postgres) ListConversations(ctx context.Context) ([]*Conversation, error) {
	out, _, err := p.ListConversationsPage(ctx, Page{})
	return out, err
}

// ListConversationsPage implements ConversationStore.
func (p *Postgres) ListConversationsPage(ctx context.Context, pg Page) ([]*Conversation, string, error) {
	query, args, err := conversationListQuery(true, tenant.Of(ctx), pg)
	if err != nil {
		return nil, "", err
	}
	out, err := pgRows(ctx, p.pool, "list conversations", query, args, scanConversation)
	if err != nil {
		return nil, "", err
	}
	out, next := cutPage(out, pg, conversationCursor)
	return out, next, nil
}

// UpdateConversation implements ConversationStore.
func (p *Postgres) UpdateConversation(ctx context.Context, c *Conversation) error {
	tag, err := p.pool.Exec(ctx, `UPDATE conversations SET title=$1, sandbox_id=$2, sandbox_name=$3, model=$4, updated_at=$5
		WHERE id=$6 AND ($7 = '' OR tenant = $7)`,
		c.Title, c.SandboxID, c.SandboxName, c.Model, c.UpdatedAt.UnixNano(), c.ID, tenant.Of(ctx))
	if err != nil {
		return fmt.Errorf("update conversation %s: %w", c.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return errdefs.NotFound("conversation %q not found", c.ID)
	}
	return nil
}

// pgLockConversation locks conversation id (of the context's tenant) in tx
// with lock ("FOR UPDATE" or "FOR SHARE"); a missing one is ErrNotFound.
func pgLockConversation(ctx context.Context, tx pgx.Tx, id, lock string) error {
	var one int
	err := tx.QueryRow(ctx, `SELECT 1 FROM conversations WHERE id = $1 AND ($2 = '' OR tenant = $2) `+lock, id, tenant.Of(ctx)).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return errdefs.NotFound("conversation %q not found", id)
	}
	if err != nil {
		return fmt.Errorf("read conversation %s: %w", id, err)
	}
	return nil
}

// DeleteConversation implements ConversationStore.
func (p *Postgres) DeleteConversation(ctx context.Context, id string) error {
	return p.inTx(ctx, func(tx pgx.Tx) error {
		if err := pgLockConversation(ctx, tx, id, "FOR UPDATE"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM conversation_turns WHERE conversation_id = $1`, id); err != nil {
			return fmt.Errorf("delete turns of conversation %s: %w", id, err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM conversations WHERE id = $1`, id); err != nil {
			return fmt.Errorf("delete conversation %s: %w", id, err)
		}
		if _, err := tx.Exec(ctx, `UPDATE uploads SET conversation_id = '' WHERE conversation_id = $1`, id); err != nil {
			return fmt.Errorf("detach uploads of conversation %s: %w", id, err)
		}
		return nil
	})
}

// AppendTurn implements ConversationStore.
func (p *Postgres) AppendTurn(ctx context.Context, t *Turn) error {
	turn, err := rawJSON("turn", t.Turn)
	if err != nil {
		return err
	}
	msgs, err := rawJSON("turn messages", t.Messages)
	if err != nil {
		return err
	}
	created := t.CreatedAt
	if created.IsZero() {
		created = time.Now().UTC()
	}
	var seq int
	err = p.inTx(ctx, func(tx pgx.Tx) error {
		if err := pgLockConversation(ctx, tx, t.ConversationID, "FOR UPDATE"); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `SELECT COALESCE(MAX(seq), 0) + 1 FROM conversation_turns WHERE conversation_id = $1`,
			t.ConversationID).Scan(&seq); err != nil {
			return fmt.Errorf("next turn of conversation %s: %w", t.ConversationID, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO conversation_turns(conversation_id, seq, turn, messages, created_at) VALUES ($1,$2,$3,$4,$5)`,
			t.ConversationID, seq, turn, msgs, created.UnixNano()); err != nil {
			return fmt.Errorf("insert turn: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE conversations SET updated_at = GREATEST(updated_at, $1) WHERE id = $2`,
			created.UnixNano(), t.ConversationID); err != nil {
			return fmt.Errorf("update conversation %s: %w", t.ConversationID, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	t.Seq, t.CreatedAt = seq, created
	return nil
}

// ListTurns implements ConversationStore.
func (p *Postgres) ListTurns(ctx context.Context, conversationID string) ([]*Turn, error) {
	rows, err := p.pool.Query(ctx, `SELECT conversation_id, seq, turn, messages, created_at FROM conversation_turns
		WHERE conversation_id = $1 AND conversation_id IN (SELECT id FROM conversations WHERE $2 = '' OR tenant = $2)
		ORDER BY seq`, conversationID, tenant.Of(ctx))
	if err != nil {
		return nil, fmt.Errorf("list turns: %w", err)
	}
	defer rows.Close()
	var out []*Turn
	for rows.Next() {
		var (
			t          Turn
			turn, msgs string
			created    int64
		)
		if err := rows.Scan(&t.ConversationID, &t.Seq, &turn, &msgs, &created); err != nil {
			return nil, err
		}
		t.Turn, t.Messages = fromRawJSON(turn), fromRawJSON(msgs)
		t.CreatedAt = time.Unix(0, created).UTC()
		out = append(out, &t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list turns: %w", err)
	}
	return out, nil
}

// CreateUpload implements ConversationStore.
func (p *Postgres) CreateUpload(ctx context.Context, u *Upload) error {
	header, err := json.Marshal(u.Columns)
	if err != nil {
		return fmt.Errorf("encode columns: %w", err)
	}
	u.Tenant = ownerFor(ctx, u.Tenant)
	return p.inTx(ctx, func(tx pgx.Tx) error {
		if u.ConversationID != "" {
			if err := pgLockConversation(ctx, tx, u.ConversationID, "FOR SHARE"); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO uploads(`+uploadCols+`) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9)`,
			u.ID, u.Name, u.SizeBytes, u.SHA256, string(header), u.Rows, u.ConversationID, u.CreatedAt.UnixNano(), u.Tenant)
		if pgUniqueViolation(err) {
			return errdefs.Conflict("upload %s already exists", u.ID)
		}
		if err != nil {
			return fmt.Errorf("insert upload: %w", err)
		}
		return nil
	})
}

// GetUpload implements ConversationStore.
func (p *Postgres) GetUpload(ctx context.Context, id string) (*Upload, error) {
	u, err := scanUpload(p.pool.QueryRow(ctx, `SELECT `+uploadCols+` FROM uploads WHERE id = $1 AND ($2 = '' OR tenant = $2)`, id, tenant.Of(ctx)))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errdefs.NotFound("file %q not found", id)
	}
	if err != nil {
		return nil, fmt.Errorf("get upload %q: %w", id, err)
	}
	return u, nil
}

// ListUploads implements ConversationStore.
func (p *Postgres) ListUploads(ctx context.Context, conversationID string) ([]*Upload, error) {
	rows, err := p.pool.Query(ctx, `SELECT `+uploadCols+` FROM uploads WHERE ($1 = '' OR tenant = $1)
		AND ($2 = '' OR conversation_id = $2) ORDER BY created_at, id`, tenant.Of(ctx), conversationID)
	if err != nil {
		return nil, fmt.Errorf("list uploads: %w", err)
	}
	defer rows.Close()
	var out []*Upload
	for rows.Next() {
		u, err := scanUpload(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list uploads: %w", err)
	}
	return out, nil
}

// SetUploadConversation implements ConversationStore.
func (p *Postgres) SetUploadConversation(ctx context.Context, id, conversationID string) error {
	return p.inTx(ctx, func(tx pgx.Tx) error {
		if conversationID != "" {
			if err := pgLockConversation(ctx, tx, conversationID, "FOR SHARE"); err != nil {
				return err
			}
		}
		tag, err := tx.Exec(ctx, `UPDATE uploads SET conversation_id = $1 WHERE id = $2 AND ($3 = '' OR tenant = $3)`, conversationID, id, tenant.Of(ctx))
		if err != nil {
			return fmt.Errorf("update upload %s: %w", id, err)
		}
		if tag.RowsAffected() == 0 {
			return errdefs.NotFound("file %q not found", id)
		}
		return nil
	})
}
