package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/tenant"
)

// The ConversationStore half of SQLite (migration 6). Writes that read
// before they write (AppendTurn's next seq, the existence checks) run in one
// BEGIN IMMEDIATE transaction, so concurrent callers take turns.

const conversationCols = `id, title, sandbox_id, sandbox_name, model, created_at, updated_at, tenant`

func scanConversation(r scanner) (*Conversation, error) {
	var (
		c                Conversation
		created, updated int64
	)
	if err := r.Scan(&c.ID, &c.Title, &c.SandboxID, &c.SandboxName, &c.Model, &created, &updated, &c.Tenant); err != nil {
		return nil, err
	}
	c.CreatedAt = time.Unix(0, created).UTC()
	c.UpdatedAt = time.Unix(0, updated).UTC()
	return &c, nil
}

// CreateConversation implements ConversationStore.
func (s *SQLite) CreateConversation(ctx context.Context, c *Conversation) error {
	c.Tenant = ownerFor(ctx, c.Tenant)
	_, err := s.db.ExecContext(ctx, `INSERT INTO conversations(`+conversationCols+`) VALUES (?,?,?,?,?,?,?,?)`,
		c.ID, c.Title, c.SandboxID, c.SandboxName, c.Model, c.CreatedAt.UnixNano(), c.UpdatedAt.UnixNano(), c.Tenant)
	if isUniqueViolation(err) {
		return errdefs.Conflict("conversation %s already exists", c.ID)
	}
	if err != nil {
		return fmt.Errorf("insert conversation: %w", err)
	}
	return nil
}

// GetConversation implements ConversationStore.
func (s *SQLite) GetConversation(ctx context.Context, id string) (*Conversation, error) {
	c, err := scanConversation(s.db.QueryRowContext(ctx, `SELECT `+conversationCols+` FROM conversations WHERE id = ?1 AND (?2 = '' OR tenant = ?2)`, id, tenant.Of(ctx)))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.NotFound("conversation %q not found", id)
	}
	if err != nil {
		return nil, fmt.Errorf("get conversation %q: %w", id, err)
	}
	return c, nil
}

// ListConversations implements ConversationStore.
func (s *SQLite) ListConversations(ctx context.Context) ([]*Conversation, error) {
	out, _, err := s.ListConversationsPage(ctx, Page{})
	return out, err
}

// ListConversationsPage implements ConversationStore.
func (s *SQLite) ListConversationsPage(ctx context.Context, p Page) ([]*Conversation, string, error) {
	query, args, err := conversationListQuery(false, tenant.Of(ctx), p)
	if err != nil {
		return nil, "", err
	}
	out, err := sqliteRows(ctx, s.db, "list conversations", query, args, scanConversation)
	if err != nil {
		return nil, "", err
	}
	out, next := cutPage(out, p, conversationCursor)
	return out, next, nil
}

// UpdateConversation implements ConversationStore.
func (s *SQLite) UpdateConversation(ctx context.Context, c *Conversation) error {
	res, err := s.db.ExecContext(ctx, `UPDATE conversations SET title=?1, sandbox_id=?2, sandbox_name=?3, model=?4, updated_at=?5
		WHERE id=?6 AND (?7 = '' OR tenant = ?7)`,
		c.Title, c.SandboxID, c.SandboxName, c.Model, c.UpdatedAt.UnixNano(), c.ID, tenant.Of(ctx))
	if err != nil {
		return fmt.Errorf("update conversation %s: %w", c.ID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errdefs.NotFound("conversation %q not found", c.ID)
	}
	return nil
}

// DeleteConversation implements ConversationStore.
func (s *SQLite) DeleteConversation(ctx context.Context, id string) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback()
	if ok, err := conversationExists(ctx, tx, id); err != nil {
		return err
	} else if !ok {
		return errdefs.NotFound("conversation %q not found", id)
	}
	// The foreign key cascades too; deleting explicitly does not rely on
	// the pragma.
	if _, err := tx.ExecContext(ctx, `DELETE FROM conversation_turns WHERE conversation_id = ?`, id); err != nil {
		return fmt.Errorf("delete turns of conversation %s: %w", id, err)
	}
	res, err := tx.ExecContext(ctx, `DELETE FROM conversations WHERE id = ?`, id)
	if err != nil {
		return fmt.Errorf("delete conversation %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errdefs.NotFound("conversation %q not found", id)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE uploads SET conversation_id = '' WHERE conversation_id = ?`, id); err != nil {
		return fmt.Errorf("detach uploads of conversation %s: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// conversationExists reports whether conversation id exists, inside tx.
func conversationExists(ctx context.Context, tx *sql.Tx, id string) (bool, error) {
	var ok bool
	if err := tx.QueryRowContext(ctx, `SELECT EXISTS(SELECT 1 FROM conversations WHERE id = ?1 AND (?2 = '' OR tenant = ?2))`, id, tenant.Of(ctx)).Scan(&ok); err != nil {
		return false, fmt.Errorf("read conversation %s: %w", id, err)
	}
	return ok, nil
}

// rawJSON validates a JSON document to store; empty stays empty.
func rawJSON(what string, r json.RawMessage) (string, error) {
	if len(r) > 0 && !json.Valid(r) {
		return "", errdefs.InvalidArgument("%s is not valid JSON", what)
	}
	return string(r), nil
}

func fromRawJSON(s string) json.RawMessage {
	if s == "" {
		return nil
	}
	return json.RawMessage(s)
}

// AppendTurn implements ConversationStore.
func (s *SQLite) AppendTurn(ctx context.Context, t *Turn) error {
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
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback()
	if ok, err := conversationExists(ctx, tx, t.ConversationID); err != nil {
		return err
	} else if !ok {
		return errdefs.NotFound("conversation %q not found", t.ConversationID)
	}
	var seq int
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(seq), 0) + 1 FROM conversation_turns WHERE conversation_id = ?`,
		t.ConversationID).Scan(&seq); err != nil {
		return fmt.Errorf("next turn of conversation %s: %w", t.ConversationID, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO conversation_turns(conversation_id, seq, turn, messages, created_at) VALUES (?,?,?,?,?)`,
		t.ConversationID, seq, turn, msgs, created.UnixNano()); err != nil {
		return fmt.Errorf("insert turn: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE conversations SET updated_at = MAX(updated_at, ?) WHERE id = ?`,
		created.UnixNano(), t.ConversationID); err != nil {
		return fmt.Errorf("update conversation %s: %w", t.ConversationID, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	t.Seq, t.CreatedAt = seq, created
	return nil
}

// ListTurns implements ConversationStore.
func (s *SQLite) ListTurns(ctx context.Context, conversationID string) ([]*Turn, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT conversation_id, seq, turn, messages, created_at FROM conversation_turns
		WHERE conversation_id = ?1 AND conversation_id IN (SELECT id FROM conversations WHERE ?2 = '' OR tenant = ?2)
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
	return out, rows.Err()
}

const uploadCols = `id, name, size_bytes, sha256, header, row_count, conversation_id, created_at, tenant`

func scanUpload(r scanner) (*Upload, error) {
	var (
		u       Upload
		header  string
		created int64
	)
	if err := r.Scan(&u.ID, &u.Name, &u.SizeBytes, &u.SHA256, &header, &u.Rows, &u.ConversationID, &created, &u.Tenant); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(header), &u.Columns); err != nil {
		return nil, fmt.Errorf("upload %s: decode columns: %w", u.ID, err)
	}
	u.CreatedAt = time.Unix(0, created).UTC()
	return &u, nil
}

// CreateUpload implements ConversationStore.
func (s *SQLite) CreateUpload(ctx context.Context, u *Upload) error {
	header, err := json.Marshal(u.Columns)
	if err != nil {
		return fmt.Errorf("encode columns: %w", err)
	}
	u.Tenant = ownerFor(ctx, u.Tenant)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback()
	if u.ConversationID != "" {
		if ok, err := conversationExists(ctx, tx, u.ConversationID); err != nil {
			return err
		} else if !ok {
			return errdefs.NotFound("conversation %q not found", u.ConversationID)
		}
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO uploads(`+uploadCols+`) VALUES (?,?,?,?,?,?,?,?,?)`,
		u.ID, u.Name, u.SizeBytes, u.SHA256, string(header), u.Rows, u.ConversationID, u.CreatedAt.UnixNano(), u.Tenant)
	if isUniqueViolation(err) {
		return errdefs.Conflict("upload %s already exists", u.ID)
	}
	if err != nil {
		return fmt.Errorf("insert upload: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// GetUpload implements ConversationStore.
func (s *SQLite) GetUpload(ctx context.Context, id string) (*Upload, error) {
	u, err := scanUpload(s.db.QueryRowContext(ctx, `SELECT `+uploadCols+` FROM uploads WHERE id = ?1 AND (?2 = '' OR tenant = ?2)`, id, tenant.Of(ctx)))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.NotFound("file %q not found", id)
	}
	if err != nil {
		return nil, fmt.Errorf("get upload %q: %w", id, err)
	}
	return u, nil
}

// ListUploads implements ConversationStore.
func (s *SQLite) ListUploads(ctx context.Context, conversationID string) ([]*Upload, error) {
	q := `SELECT ` + uploadCols + ` FROM uploads WHERE (?1 = '' OR tenant = ?1)`
	args := []any{tenant.Of(ctx)}
	if conversationID != "" {
		q += ` AND conversation_id = ?2`
		args = append(args, conversationID)
	}
	rows, err := s.db.QueryContext(ctx, q+` ORDER BY created_at, id`, args...)
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
	return out, rows.Err()
}

// SetUploadConversation implements ConversationStore.
func (s *SQLite) SetUploadConversation(ctx context.Context, id, conversationID string) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback()
	if conversationID != "" {
		if ok, err := conversationExists(ctx, tx, conversationID); err != nil {
			return err
		} else if !ok {
			return errdefs.NotFound("conversation %q not found", conversationID)
		}
	}
	res, err := tx.ExecContext(ctx, `UPDATE uploads SET conversation_id = ?1 WHERE id = ?2 AND (?3 = '' OR tenant = ?3)`, conversationID, id, tenant.Of(ctx))
	if err != nil {
		return fmt.Errorf("update upload %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errdefs.NotFound("file %q not found", id)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}
