// Package analyst is forkbox's chat product (docs/ARCHITECTURE.md, "Chat (the
// analyst)"): conversations that each own a named sandbox, CSV uploads that
// land in its /workspace, and questions
// answered by the agent loop (internal/chat) running code in that sandbox. A
// conversation's sandbox is named, so it suspends when idle and resumes on the
// next question with its variables; its turns and the model history persist
// in the metadata store.
package analyst

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/chat"
	"github.com/forkbox/forkbox/internal/diskspace"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/keylock"
	"github.com/forkbox/forkbox/internal/sandbox"
	"github.com/forkbox/forkbox/internal/store"
	"github.com/forkbox/forkbox/internal/textcut"
	"github.com/forkbox/forkbox/internal/units"
)

// Config tunes a Service.
type Config struct {
	// Provider answers questions; nil means chat is unavailable and
	// ProviderErr says why (how to configure one).
	Provider    chat.Provider
	ProviderErr error
	// UploadsDir keeps uploaded files.
	UploadsDir string
	// MaxUploadBytes bounds an upload (default 50 MiB).
	MaxUploadBytes int64
	// MaxRounds bounds the tool rounds per question (default 10).
	MaxRounds int
	// IdleTimeoutSecs is the conversation sandboxes' idle timeout, after
	// which they suspend (default 600).
	IdleTimeoutSecs int64
	// CellTimeout bounds each cell the model runs (default 2 minutes).
	CellTimeout time.Duration
	Logger      *slog.Logger
	// Blobs, when set, keeps every upload's bytes under uploads/<id>.csv
	// as well, so that any node of a cluster can copy any upload into the
	// sandbox of a conversation it runs; nil keeps uploads on this node's
	// disk only.
	Blobs Blobs
}

// Blobs is the object storage uploads are shared through; *blob.S3 is one.
type Blobs interface {
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	Stat(ctx context.Context, key string) (size int64, modTime time.Time, err error)
	Delete(ctx context.Context, key string) error
}

// Service runs conversations.
type Service struct {
	cfg   Config
	store store.ConversationStore
	mgr   *sandbox.Manager
	log   *slog.Logger

	locks *keylock.Map // one question at a time per conversation
}

// New returns a Service keeping conversations in st and sandboxes in mgr.
func New(st store.ConversationStore, mgr *sandbox.Manager, cfg Config) (*Service, error) {
	if cfg.MaxUploadBytes <= 0 {
		cfg.MaxUploadBytes = 50 << 20
	}
	if cfg.MaxRounds <= 0 {
		cfg.MaxRounds = 10
	}
	if cfg.IdleTimeoutSecs <= 0 {
		cfg.IdleTimeoutSecs = 600
	}
	if cfg.CellTimeout <= 0 {
		cfg.CellTimeout = 2 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Provider == nil && cfg.ProviderErr == nil {
		cfg.ProviderErr = errdefs.Unavailable("no model provider is configured")
	}
	if v := reflect.ValueOf(cfg.Blobs); cfg.Blobs != nil && v.Kind() == reflect.Pointer && v.IsNil() {
		cfg.Blobs = nil // a nil *blob.S3 in the interface: local only
	}
	if err := os.MkdirAll(cfg.UploadsDir, 0o700); err != nil {
		return nil, fmt.Errorf("uploads dir: %w", err)
	}
	return &Service{cfg: cfg, store: st, mgr: mgr, log: cfg.Logger, locks: keylock.New("conversation", conversationWait, nil)}, nil
}

// MaxUploadBytes is the upload limit.
func (s *Service) MaxUploadBytes() int64 { return s.cfg.MaxUploadBytes }

// Ready says whether a model provider is configured; if not, why (and how
// to configure one).
func (s *Service) Ready() (bool, string) {
	if s.cfg.Provider != nil {
		return true, ""
	}
	return false, s.cfg.ProviderErr.Error()
}

func newID(prefix string) string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return prefix + strings.ToLower(hex.EncodeToString(b[:]))
}

// CreateConversation starts a conversation and its named sandbox.
func (s *Service) CreateConversation(ctx context.Context, title string) (*api.Conversation, error) {
	title = strings.TrimSpace(title)
	if len(title) > 200 {
		return nil, errdefs.InvalidArgument("title: at most 200 bytes")
	}
	if title == "" {
		title = defaultTitle
	}
	title, err := s.uniqueTitle(ctx, title, "")
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	c := &store.Conversation{ID: newID("conv_"), Title: title, CreatedAt: now, UpdatedAt: now}
	if err := s.newSandbox(ctx, c); err != nil {
		return nil, err
	}
	if err := s.store.CreateConversation(ctx, c); err != nil {
		s.dropSandbox(c.SandboxID)
		return nil, err
	}
	return s.view(c), nil
}

// newSandbox gives c a fresh named sandbox.
func (s *Service) newSandbox(ctx context.Context, c *store.Conversation) error {
	timeout := s.cfg.IdleTimeoutSecs
	name := "conv-" + strings.TrimPrefix(c.ID, "conv_")
	if c.SandboxID != "" {
		// A replacement: the old name may still be held by a record.
		name = name + "-" + newID("")[:6]
	}
	sb, err := s.mgr.Create(ctx, &api.CreateSandboxRequest{
		Name: name, TimeoutSecs: &timeout, Labels: map[string]string{"forkbox.conversation": c.ID},
	})
	if err != nil {
		return fmt.Errorf("conversation sandbox: %w", err)
	}
	c.SandboxID, c.SandboxName = sb.ID, sb.Name
	return nil
}

func (s *Service) dropSandbox(id string) {
	if _, err := s.mgr.Delete(context.Background(), id); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		s.log.Warn("remove conversation sandbox", "sandbox", id, "err", err)
	}
}

// ensureSandbox returns the id of c's sandbox, making a new one (and saying
// so) when the old one is gone. A suspended sandbox is resumed by its next
// use.
func (s *Service) ensureSandbox(ctx context.Context, c *store.Conversation) (string, bool, error) {
	sb, err := s.mgr.Get(ctx, c.SandboxID)
	if err == nil && !sb.State.Ended() {
		return sb.ID, false, nil
	}
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return "", false, err
	}
	if err := s.newSandbox(ctx, c); err != nil {
		return "", false, err
	}
	c.UpdatedAt = time.Now().UTC()
	if err := s.store.UpdateConversation(ctx, c); err != nil {
		return "", false, err
	}
	return c.SandboxID, true, nil
}

func (s *Service) view(c *store.Conversation) *api.Conversation {
	return &api.Conversation{
		ID: c.ID, Title: c.Title, Sandbox: c.SandboxID, SandboxName: c.SandboxName, Model: c.Model,
		CreatedAt: c.CreatedAt, UpdatedAt: c.UpdatedAt,
	}
}

// ListConversations returns every conversation, most recent first.
func (s *Service) ListConversations(ctx context.Context) ([]api.Conversation, error) {
	cs, err := s.store.ListConversations(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]api.Conversation, 0, len(cs))
	for _, c := range cs {
		out = append(out, *s.view(c))
	}
	return out, nil
}

// ListConversationsPage returns one page of the conversations, the most
// recently updated first, with the cursor of the next page.
func (s *Service) ListConversationsPage(ctx context.Context, p store.Page) (*api.ConversationList, error) {
	cs, next, err := s.store.ListConversationsPage(ctx, p)
	if err != nil {
		return nil, err
	}
	out := &api.ConversationList{Conversations: make([]api.Conversation, 0, len(cs)), NextCursor: next}
	for _, c := range cs {
		out.Conversations = append(out.Conversations, *s.view(c))
	}
	return out, nil
}

// GetConversation returns a conversation with its turns and files.
func (s *Service) GetConversation(ctx context.Context, id string) (*api.Conversation, error) {
	c, err := s.store.GetConversation(ctx, id)
	if err != nil {
		return nil, err
	}
	v := s.view(c)
	turns, err := s.store.ListTurns(ctx, id)
	if err != nil {
		return nil, err
	}
	v.Turns = []api.ChatTurn{}
	for _, t := range turns {
		var ct api.ChatTurn
		if err := json.Unmarshal(t.Turn, &ct); err != nil {
			return nil, fmt.Errorf("conversation %s turn %d: %w", id, t.Seq, err)
		}
		v.Turns = append(v.Turns, ct)
	}
	ups, err := s.store.ListUploads(ctx, id)
	if err != nil {
		return nil, err
	}
	v.Files = []api.UploadedFile{}
	for _, u := range ups {
		v.Files = append(v.Files, uploadView(u))
	}
	v.Cells = []api.Cell{}
	if c.SandboxID != "" {
		cells, err := s.mgr.Cells(ctx, c.SandboxID)
		if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return nil, err
		}
		if cells != nil {
			v.Cells = cells
		}
	}
	return v, nil
}

// DeleteConversation terminates the conversation's sandbox and forgets it.
func (s *Service) DeleteConversation(ctx context.Context, id string) error {
	c, err := s.store.GetConversation(ctx, id)
	if err != nil {
		return err
	}
	s.dropSandbox(c.SandboxID)
	return s.store.DeleteConversation(ctx, id)
}

func uploadView(u *store.Upload) api.UploadedFile {
	cols := u.Columns
	if cols == nil {
		cols = []string{}
	}
	return api.UploadedFile{ID: u.ID, Name: u.Name, SizeBytes: u.SizeBytes, SHA256: u.SHA256,
		CreatedAt: u.CreatedAt, Columns: cols, Rows: u.Rows}
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// cleanName makes an upload's name safe as a file name in /workspace.
func cleanName(name string) string {
	name = filepath.Base(strings.ReplaceAll(name, "\\", "/"))
	name = strings.Trim(unsafeName.ReplaceAllString(name, "_"), "._")
	if name == "" {
		name = "data"
	}
	if len(name) > 100 {
		name = name[:100]
	}
	return name
}

// CheckRoom refuses (errdefs.ErrInsufficientStorage, naming the
// filesystem and both sizes) an upload of about size bytes (a request's
// Content-Length, say) that the uploads dir's filesystem cannot hold now,
// before a byte of it is read. An unknown size (0 or less) passes: a full
// disk met while Upload writes is the same error.
func (s *Service) CheckRoom(size int64) error {
	return diskspace.Check(s.cfg.UploadsDir, "an upload", size)
}

// Upload stores a CSV file. Anything that is not CSV text is refused with a
// message saying why, and so is a file over the limit, or one that fills
// the disk (insufficient storage); nothing is kept then.
func (s *Service) Upload(ctx context.Context, name string, r io.Reader, conversationID string) (*api.UploadedFile, error) {
	if !strings.EqualFold(filepath.Ext(name), ".csv") {
		return nil, errdefs.InvalidArgument("only CSV files can be uploaded: %q does not end in .csv", name)
	}
	if conversationID != "" {
		if _, err := s.store.GetConversation(ctx, conversationID); err != nil {
			return nil, err
		}
	}
	id := newID("file_")
	path := filepath.Join(s.cfg.UploadsDir, id+".csv")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("store upload: %w", err)
	}
	keep := false
	defer func() {
		if !keep {
			os.Remove(path)
		}
	}()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(r, s.cfg.MaxUploadBytes+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if diskspace.IsFull(err) {
			return nil, diskspace.Full(s.cfg.UploadsDir, fmt.Sprintf("the upload %q", name), n, true, err)
		}
		return nil, fmt.Errorf("store upload: %w", err)
	}
	if n > s.cfg.MaxUploadBytes {
		return nil, errdefs.TooLarge("%s is larger than the upload limit of %s", name, units.Bytes(s.cfg.MaxUploadBytes))
	}
	cols, rows, err := checkCSV(path)
	if err != nil {
		return nil, errdefs.InvalidArgument("%s is not a CSV file: %v", name, err)
	}
	u := &store.Upload{ID: id, Name: cleanName(name), SizeBytes: n, SHA256: hex.EncodeToString(h.Sum(nil)),
		Columns: cols, Rows: rows, ConversationID: conversationID, CreatedAt: time.Now().UTC()}
	if s.cfg.Blobs != nil {
		// The bytes go to the bucket before the record names them, so that
		// every node that can see the record can fetch them.
		if err := s.putBlob(ctx, id, path, n); err != nil {
			return nil, err
		}
	}
	if err := s.store.CreateUpload(ctx, u); err != nil {
		s.dropBlob(ctx, id)
		return nil, err
	}
	keep = true
	v := uploadView(u)
	return &v, nil
}

// GetUpload returns an upload's record.
func (s *Service) GetUpload(ctx context.Context, id string) (*api.UploadedFile, error) {
	u, err := s.store.GetUpload(ctx, id)
	if err != nil {
		return nil, err
	}
	v := uploadView(u)
	return &v, nil
}

// checkCSV reads a whole file as CSV: UTF-8 text, no NUL bytes, at least one
// column, every record as wide as the header. It returns the header and the
// number of data rows.
func checkCSV(path string) ([]string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	const headSize = 64 << 10
	br := bufio.NewReaderSize(f, headSize) // a smaller buffer would peek less
	head, err := br.Peek(headSize)
	if len(head) == 0 {
		return nil, 0, errors.New("it is empty")
	}
	if bytes.IndexByte(head, 0) >= 0 {
		return nil, 0, errors.New("it holds binary data")
	}
	if !errors.Is(err, io.EOF) {
		// The head stops at the peek's size, maybe inside a character
		// whose other bytes follow: not a fault of the file. A head that
		// holds the whole file (io.EOF) is checked whole.
		head = textcut.Complete(head)
	}
	if !utf8.Valid(head) {
		return nil, 0, errors.New("it is not UTF-8 text")
	}
	cr := csv.NewReader(br)
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		return nil, 0, err
	}
	header = append([]string(nil), header...)
	if len(header) < 1 || (len(header) == 1 && strings.TrimSpace(header[0]) == "") {
		return nil, 0, errors.New("it has no columns")
	}
	var rows int64
	for {
		_, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, 0, err
		}
		rows++
	}
	return header, rows, nil
}

// conversationWait bounds how long a question waits for the conversation's
// previous one to be answered before it is refused as busy.
const conversationWait = 30 * time.Second

// Ask answers a question in a conversation (a new one when none is named),
// after putting the given CSV and uploads into its sandbox's /workspace.
// emit receives the stream: the conversation first, then the loop's events.
func (s *Service) Ask(ctx context.Context, req *api.ChatRequest, emit func(api.ChatEvent)) (*api.ChatResponse, error) {
	if emit == nil {
		emit = func(api.ChatEvent) {}
	}
	question := strings.TrimSpace(req.Question)
	if question == "" {
		return nil, errdefs.InvalidArgument("question is empty")
	}
	if req.CSV != "" && req.CSVName != "" && !strings.EqualFold(filepath.Ext(req.CSVName), ".csv") {
		return nil, errdefs.InvalidArgument("csv_name %q must end in .csv", req.CSVName)
	}
	var c *store.Conversation
	var err error
	if req.ConversationID != "" {
		if c, err = s.store.GetConversation(ctx, req.ConversationID); err != nil {
			return nil, err
		}
	}
	ups := make([]*store.Upload, 0, len(req.FileIDs))
	for _, id := range req.FileIDs {
		u, err := s.store.GetUpload(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("file_ids: %w", err)
		}
		ups = append(ups, u)
	}
	if s.cfg.Provider == nil {
		return nil, s.cfg.ProviderErr
	}
	if req.CSV != "" {
		name := req.CSVName
		if name == "" {
			name = "data.csv"
		}
		if err := s.CheckRoom(int64(len(req.CSV))); err != nil {
			return nil, fmt.Errorf("csv: %w", err)
		}
		u, err := s.Upload(ctx, name, strings.NewReader(req.CSV), "")
		if err != nil {
			return nil, fmt.Errorf("csv: %w", err)
		}
		up, _ := s.store.GetUpload(ctx, u.ID)
		ups = append(ups, up)
	}
	if c == nil {
		v, err := s.CreateConversation(ctx, titleOf(question))
		if err != nil {
			return nil, err
		}
		if c, err = s.store.GetConversation(ctx, v.ID); err != nil {
			return nil, err
		}
	}
	// A question waits (boundedly) for the conversation's previous one; the
	// turn itself keeps the request's context, so a client that goes away
	// stops it.
	_, unlock, err := s.locks.Lock(ctx, c.ID, "question", keylock.Options{})
	if err != nil {
		return nil, err
	}
	defer unlock()
	if c.Title == defaultTitle || strings.HasPrefix(c.Title, defaultTitle+" (") {
		// Made before its first question (the UI's Code tab): this one names it.
		if t, err := s.uniqueTitle(ctx, titleOf(question), c.ID); err == nil && t != "" {
			c.Title = t
			if err := s.store.UpdateConversation(ctx, c); err != nil {
				s.log.Warn("title conversation", "conversation", c.ID, "err", err)
			}
		}
	}
	sandboxID, replaced, err := s.ensureSandbox(ctx, c)
	if err != nil {
		return nil, err
	}
	emit(api.ChatEvent{Type: api.ChatEventConversation, ConversationID: c.ID, Sandbox: sandboxID})
	if replaced {
		// A new sandbox: the conversation's earlier files go in again.
		earlier, err := s.store.ListUploads(ctx, c.ID)
		if err != nil {
			return nil, err
		}
		ups = append(earlier, ups...)
	}
	for _, u := range ups {
		if err := s.place(ctx, sandboxID, u); err != nil {
			return nil, err
		}
		if err := s.store.SetUploadConversation(ctx, u.ID, c.ID); err != nil {
			return nil, err
		}
	}
	history, files, err := s.context(ctx, c.ID, replaced)
	if err != nil {
		return nil, err
	}
	runner := chat.RunnerFunc(func(ctx context.Context, code string, on func(chat.Output)) (*api.Execution, error) {
		to := s.cfg.CellTimeout.Milliseconds()
		return s.mgr.RunCode(ctx, sandboxID, &api.RunCodeRequest{Code: code, TimeoutMS: &to}, sandbox.CodeOptions{
			Source: api.CellModel,
			OnEvent: func(ev sandbox.CodeEvent) {
				if on != nil && ev.Type != "done" {
					on(chat.Output{Type: ev.Type, Text: ev.Text, Result: ev.Result, Error: ev.Error})
				}
			},
		})
	})
	opts := chat.Options{MaxRounds: s.cfg.MaxRounds, Files: files, Model: req.Model}
	res, err := chat.Run(ctx, s.cfg.Provider, runner, history, question, opts, emit)
	now := time.Now().UTC()
	if err != nil {
		// The question is kept with its error (the UI shows it); its model
		// history is not, so the next question starts from a clean state.
		turn, _ := json.Marshal(api.ChatTurn{Question: question, Images: []api.ChatImage{}, Steps: []api.ChatStep{}, Error: err.Error(), CreatedAt: now})
		if aerr := s.store.AppendTurn(context.WithoutCancel(ctx), &store.Turn{ConversationID: c.ID, Turn: turn, Messages: json.RawMessage("[]"), CreatedAt: now}); aerr != nil {
			s.log.Warn("record failed chat turn", "conversation", c.ID, "err", aerr)
		}
		return nil, err
	}
	images, steps := res.Images, res.Steps
	if images == nil {
		images = []api.ChatImage{}
	}
	if steps == nil {
		steps = []api.ChatStep{}
	}
	turn, err := json.Marshal(api.ChatTurn{Question: question, Answer: res.Answer, Images: images, Steps: steps, CreatedAt: now})
	if err != nil {
		return nil, err
	}
	msgs, err := json.Marshal(res.Messages)
	if err != nil {
		return nil, err
	}
	if err := s.store.AppendTurn(context.WithoutCancel(ctx), &store.Turn{ConversationID: c.ID, Turn: turn, Messages: msgs, CreatedAt: now}); err != nil {
		return nil, err
	}
	return &api.ChatResponse{Answer: res.Answer, Images: images, Steps: steps, ConversationID: c.ID,
		Sandbox: sandboxID, Rounds: res.Rounds, Truncated: res.Truncated}, nil
}

// defaultTitle names a conversation made before its first question; that
// question names it then.
const defaultTitle = "New conversation"

// uniqueTitle is title, or title with the first free " (n)" after it, so
// that no two of a tenant's conversations (but self's) share one.
func (s *Service) uniqueTitle(ctx context.Context, title, self string) (string, error) {
	all, err := s.store.ListConversations(ctx)
	if err != nil {
		return "", err
	}
	taken := map[string]bool{}
	for _, c := range all {
		if c.ID != self {
			taken[c.Title] = true
		}
	}
	out := title
	for n := 2; taken[out]; n++ {
		out = fmt.Sprintf("%s (%d)", title, n)
	}
	return out, nil
}

// titleOf makes a conversation title from its first question.
func titleOf(q string) string {
	q = strings.Join(strings.Fields(q), " ")
	if len(q) <= 60 {
		return q
	}
	return textcut.Prefix(q, 60) + "…"
}

// place copies an upload into the sandbox's /workspace.
func (s *Service) place(ctx context.Context, sandboxID string, u *store.Upload) error {
	path, err := s.uploadFile(ctx, u)
	if err != nil {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("upload %s: %w", u.ID, err)
	}
	defer f.Close()
	if _, err := s.mgr.WriteFile(ctx, sandboxID, "/workspace/"+u.Name, 0o644, f); err != nil {
		return fmt.Errorf("copy %s into the sandbox: %w", u.Name, err)
	}
	return nil
}

// context returns the conversation's model history and its files for the
// prompt. With a replaced sandbox the history is dropped (the variables it
// refers to are gone) and the files are copied in again.
func (s *Service) context(ctx context.Context, convID string, replaced bool) ([]chat.Message, []chat.File, error) {
	var history []chat.Message
	if !replaced {
		turns, err := s.store.ListTurns(ctx, convID)
		if err != nil {
			return nil, nil, err
		}
		for _, t := range turns {
			var msgs []chat.Message
			if err := json.Unmarshal(t.Messages, &msgs); err != nil {
				return nil, nil, fmt.Errorf("conversation %s turn %d: %w", convID, t.Seq, err)
			}
			history = append(history, msgs...)
		}
	}
	ups, err := s.store.ListUploads(ctx, convID)
	if err != nil {
		return nil, nil, err
	}
	var files []chat.File
	for _, u := range ups {
		files = append(files, chat.File{Path: "/workspace/" + u.Name, Size: u.SizeBytes,
			Preview: fmt.Sprintf("columns: %s; %d rows", strings.Join(u.Columns, ", "), u.Rows)})
	}
	return history, files, nil
}

// blobKey is where an upload's bytes are kept in object storage.
func blobKey(id string) string { return "uploads/" + id + ".csv" }

// putBlob copies the upload at path (size bytes) to object storage.
func (s *Service) putBlob(ctx context.Context, id, path string, size int64) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("store upload %s in object storage: %w", id, err)
	}
	defer f.Close()
	if err := s.cfg.Blobs.Put(ctx, blobKey(id), f, size); err != nil {
		// A partial object may remain if the client gave up midway.
		s.dropBlob(ctx, id)
		return fmt.Errorf("store upload %s in object storage (the upload is not kept): %w", id, err)
	}
	return nil
}

// dropBlob removes an upload's object, logging a failure (the object is
// then an orphan nothing names).
func (s *Service) dropBlob(ctx context.Context, id string) {
	if s.cfg.Blobs == nil {
		return
	}
	if err := s.cfg.Blobs.Delete(context.WithoutCancel(ctx), blobKey(id)); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		s.log.Warn("remove upload from object storage", "file", id, "key", blobKey(id), "err", err)
	}
}

// uploadFile is the path of u's bytes on this node. Without Blobs that is
// the file Upload wrote, as it always was. With Blobs it is the local copy
// when it is there and its SHA-256 is the record's; otherwise the bytes are
// downloaded from object storage (verified against the record before they
// take the file's name), so any node can use an upload received by another.
func (s *Service) uploadFile(ctx context.Context, u *store.Upload) (string, error) {
	path := filepath.Join(s.cfg.UploadsDir, u.ID+".csv")
	if s.cfg.Blobs == nil {
		return path, nil
	}
	sum, err := fileSHA256(path)
	switch {
	case err == nil && sum == u.SHA256:
		return path, nil
	case err == nil:
		s.log.Warn("local copy of an upload does not match its record; downloading it again",
			"file", u.ID, "sha256", sum, "want", u.SHA256)
	case !errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("upload %s: %w", u.ID, err)
	}
	if err := s.fetchBlob(ctx, u, path); err != nil {
		return "", err
	}
	return path, nil
}

// fetchBlob downloads u's object to path: to a temporary name first, hashed
// while written, renamed only when its SHA-256 (and size) are the record's;
// anything else leaves no file behind.
func (s *Service) fetchBlob(ctx context.Context, u *store.Upload, path string) (err error) {
	key := blobKey(u.ID)
	rc, err := s.cfg.Blobs.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("upload %s: not on this node, and fetching it from object storage failed: %w", u.ID, err)
	}
	defer rc.Close()
	tmp, err := os.CreateTemp(s.cfg.UploadsDir, u.ID+".*.part")
	if err != nil {
		return fmt.Errorf("upload %s: fetch from object storage: %w", u.ID, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	h := sha256.New()
	// One byte past the recorded size is enough to know it is wrong.
	n, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(rc, u.SizeBytes+1))
	if diskspace.IsFull(err) {
		return diskspace.Full(s.cfg.UploadsDir, fmt.Sprintf("upload %s (fetched from object storage)", u.ID), u.SizeBytes, false, err)
	}
	if err != nil {
		return fmt.Errorf("upload %s: fetch %s from object storage: %w", u.ID, key, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); n != u.SizeBytes || got != u.SHA256 {
		return fmt.Errorf("upload %s: object %s does not match the upload's record (%d bytes, SHA-256 %s; want %d bytes, SHA-256 %s): refusing it: %w",
			u.ID, key, n, got, u.SizeBytes, u.SHA256, errIntegrity)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("upload %s: fetch from object storage: %w", u.ID, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("upload %s: fetch from object storage: %w", u.ID, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("upload %s: fetch from object storage: %w", u.ID, err)
	}
	return nil
}

// errIntegrity marks bytes that are not the ones an upload's record names.
var errIntegrity = errors.New("SHA-256 mismatch")

// fileSHA256 is the hex SHA-256 of the file at path.
func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
