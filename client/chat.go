package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/sse"
)

// Chat asks a question about data and waits for the answer. A model answers
// it by running code in the conversation's sandbox: req.CSV (as
// req.CSVName) and the uploads named by req.FileIDs are put in /workspace
// first, and the answer carries the charts the code drew and every step it
// ran. An empty req.ConversationID starts a conversation; the answer's
// ConversationID continues it, with the variables of earlier questions still
// defined.
//
// Errors are *APIError: ErrInvalidArgument for an empty question,
// ErrNotFound for an unknown conversation or upload, ErrUnavailable when the
// daemon has no model provider configured (the message says how to
// configure one).
//
//	res, err := c.Chat(ctx, api.ChatRequest{Question: "Profit by region?", FileIDs: []string{f.ID}})
//	if err != nil {
//		return err
//	}
//	fmt.Println(res.Answer)
//	for _, img := range res.Images {
//		png, _ := base64.StdEncoding.DecodeString(img.PNGBase64)
//		os.WriteFile(img.FileName, png, 0o644)
//	}
func (c *Client) Chat(ctx context.Context, req api.ChatRequest) (*api.ChatResponse, error) {
	var res api.ChatResponse
	if err := c.doJSON(ctx, http.MethodPost, "/v1/chat", nil, req, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// ChatStream asks a question like Chat and follows the answer as it is made.
// onEvent (may be nil) receives the events on the calling goroutine, in
// order: "conversation" first (ConversationID, Sandbox), then "text" (a
// delta of the model's text), "tool_call" (Code the model asked to run),
// "tool_error" (a malformed tool call, fed back to the model), "output"
// (live output of the running code), "execution" (its result and charts) and
// "answer" (the final answer and every chart); event types a newer daemon
// adds are passed on too. The stream's "done" event is returned as the
// response; an "error" event is returned as an *APIError. Cancelling ctx
// abandons the question.
//
//	res, err := c.ChatStream(ctx, api.ChatRequest{Question: "Plot monthly revenue"}, func(ev api.ChatEvent) {
//		switch ev.Type {
//		case api.ChatEventText:
//			fmt.Print(ev.Text)
//		case api.ChatEventToolCall:
//			fmt.Printf("\n>>> running:\n%s\n", ev.Code)
//		}
//	})
func (c *Client) ChatStream(ctx context.Context, req api.ChatRequest, onEvent func(api.ChatEvent)) (*api.ChatResponse, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	hreq, err := c.newRequest(ctx, http.MethodPost, "/v1/chat", nil, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	var res api.ChatResponse
	err = c.followStream(ctx, hreq, "chat", func(body io.Reader) error { return decodeJSON(body, &res) },
		func(ev sse.Event) error {
			switch ev.Name {
			case api.ChatEventError:
				return failureError(ev.Data)
			case api.ChatEventDone:
				if err := decodeEvent(ev, &res); err != nil {
					return err
				}
				return errStreamDone
			}
			var ce api.ChatEvent
			if err := decodeEvent(ev, &ce); err != nil {
				return err
			}
			if ce.Type == "" {
				ce.Type = api.ChatEventType(ev.Name)
			}
			if onEvent != nil {
				onEvent(ce)
			}
			return nil
		})
	if err != nil {
		return nil, err
	}
	return &res, nil
}

// CreateConversation starts a conversation and its sandbox before any
// question, so that code can run in the sandbox (RunCode on the answer's
// Sandbox) with or without a model configured. A zero req is fine: the title
// is then made from the first question.
func (c *Client) CreateConversation(ctx context.Context, req api.CreateConversationRequest) (*api.Conversation, error) {
	var conv api.Conversation
	if err := c.doJSON(ctx, http.MethodPost, "/v1/conversations", nil, req, &conv); err != nil {
		return nil, err
	}
	return &conv, nil
}

// ListConversations returns every conversation, the most recently updated
// first, without their turns and files: it follows the list's pages to the
// last (ListConversationsPage returns one).
func (c *Client) ListConversations(ctx context.Context) ([]api.Conversation, error) {
	out := []api.Conversation{}
	err := c.walk(ctx, func(ctx context.Context, p Page) (string, error) {
		list, err := c.ListConversationsPage(ctx, p)
		if err != nil {
			return "", err
		}
		out = append(out, list.Conversations...)
		return list.NextCursor, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// GetConversation returns a conversation with its turns (each question and
// its answer, oldest first) and the files uploaded to it.
func (c *Client) GetConversation(ctx context.Context, id string) (*api.Conversation, error) {
	var conv api.Conversation
	if err := c.doJSON(ctx, http.MethodGet, conversationPath(id), nil, nil, &conv); err != nil {
		return nil, err
	}
	return &conv, nil
}

// DeleteConversation deletes a conversation and its turns and terminates its
// sandbox. Files uploaded to it stay, detached.
func (c *Client) DeleteConversation(ctx context.Context, id string) error {
	return c.doJSON(ctx, http.MethodDelete, conversationPath(id), nil, nil, nil)
}

// conversationPath returns /v1/conversations/{id} with the id escaped.
func conversationPath(id string) string { return "/v1/conversations/" + url.PathEscape(id) }

// UploadFile uploads a CSV for questions (api.ChatRequest.FileIDs) under the
// file name name, which it will have in /workspace. r is streamed as a
// multipart/form-data part, never held whole, and not closed. A non-empty
// conversationID gives the file to that conversation. The daemon checks that
// the file is CSV and counts its columns and rows. When the call fails
// early (the daemon refused the file, or ctx was cancelled) a Read of r
// under way may end after UploadFile returns; r is not read any further.
//
// Errors are *APIError: ErrInvalidArgument for a file that is not CSV,
// ErrTooLarge for one over the daemon's upload limit, ErrNotFound for an
// unknown conversation.
//
//	f, err := os.Open("sales.csv")
//	if err != nil {
//		return err
//	}
//	defer f.Close()
//	up, err := c.UploadFile(ctx, "sales.csv", f, "")
func (c *Client) UploadFile(ctx context.Context, name string, r io.Reader, conversationID string) (*api.UploadedFile, error) {
	pr, pw := io.Pipe()
	req, err := c.newRequest(ctx, http.MethodPost, "/v1/files", nil, pr)
	if err != nil {
		return nil, err
	}
	mw := multipart.NewWriter(pw)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("Accept", "application/json")
	werr := make(chan error, 1)
	go func() {
		err := writeUploadParts(mw, name, r, conversationID)
		// Report before closing: whoever sees the pipe fail finds the
		// cause already here.
		werr <- err
		pw.CloseWithError(err)
	}()
	// The transport waits for its read of the body to end before it gives
	// up on a cancelled request, and that read may wait on a Read of r that
	// blocks: end it with ctx.
	stop := context.AfterFunc(ctx, func() { pr.CloseWithError(ctx.Err()) })
	defer stop()
	f, err := c.uploadAnswer(req)
	// The daemon has answered, or the call failed. The writer is done, or
	// it was cut short: the daemon refused the file before reading all of
	// it (too large, not CSV), or ctx was cancelled. Stop it; a Read of r
	// under way may still finish, but nothing more is read. Its error, when
	// r itself failed, says better than the transport what went wrong.
	pr.CloseWithError(errAnswered)
	if err != nil && ctx.Err() != nil {
		// Cancelled: the transport may report the closed pipe instead.
		return nil, ctx.Err()
	}
	if err != nil {
		select {
		case wErr := <-werr:
			if wErr != nil && !errors.Is(wErr, errAnswered) && !errors.Is(wErr, io.ErrClosedPipe) {
				return nil, wErr
			}
		default:
		}
	}
	return f, err
}

func (c *Client) uploadAnswer(req *http.Request) (*api.UploadedFile, error) {
	resp, err := c.send(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var f api.UploadedFile
	if err := decodeJSON(resp.Body, &f); err != nil {
		return nil, fmt.Errorf("decoding upload answer: %w", err)
	}
	return &f, nil
}

// writeUploadParts writes the conversation_id field (first, so that the
// daemon knows it before the file arrives) and the file part.
func writeUploadParts(mw *multipart.Writer, name string, r io.Reader, conversationID string) error {
	if conversationID != "" {
		if err := mw.WriteField("conversation_id", conversationID); err != nil {
			return err
		}
	}
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", multipart.FileContentDisposition("file", name))
	h.Set("Content-Type", "text/csv")
	pw, err := mw.CreatePart(h)
	if err != nil {
		return err
	}
	src := &readErrReader{r: r}
	if _, err := io.Copy(pw, src); err != nil {
		if src.err != nil {
			return fmt.Errorf("reading %s: %w", name, src.err)
		}
		return err // the pipe was closed: the daemon answered
	}
	return mw.Close()
}

// readErrReader remembers an error of its reader, to tell it from an error
// of writing what was read.
type readErrReader struct {
	r   io.Reader
	err error
}

func (r *readErrReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		r.err = err
	}
	return n, err
}

// GetUpload returns an uploaded file's metadata: its name, size, SHA-256,
// CSV columns and row count.
func (c *Client) GetUpload(ctx context.Context, id string) (*api.UploadedFile, error) {
	var f api.UploadedFile
	if err := c.doJSON(ctx, http.MethodGet, "/v1/files/"+url.PathEscape(id), nil, nil, &f); err != nil {
		return nil, err
	}
	return &f, nil
}
