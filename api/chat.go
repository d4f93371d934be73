package api

import "time"

// ChatRequest is the body of POST /v1/chat: a question about data, answered
// by a model that runs code in the conversation's sandbox.
type ChatRequest struct {
	Question string `json:"question"`
	// CSV is CSV text to put in /workspace as CSVName (default data.csv)
	// before the question is asked.
	CSV     string `json:"csv,omitempty"`
	CSVName string `json:"csv_name,omitempty"`
	// FileIDs are uploads (POST /v1/files) to put in /workspace.
	FileIDs []string `json:"file_ids,omitempty"`
	// ConversationID continues a conversation; empty starts one.
	ConversationID string `json:"conversation_id,omitempty"`
	// Model overrides the configured model for this question.
	Model string `json:"model,omitempty"`
}

// ChatImage is a chart the code drew: chart-1.png, chart-2.png, … within an
// answer.
type ChatImage struct {
	FileName  string `json:"file_name"`
	PNGBase64 string `json:"png_base64"`
}

// ChatStep is one piece of code the model ran and its result.
type ChatStep struct {
	Code      string     `json:"code"`
	Execution *Execution `json:"execution"`
}

// ChatResponse answers POST /v1/chat (and is the data of the SSE "done"
// event).
type ChatResponse struct {
	Answer         string      `json:"answer"`
	Images         []ChatImage `json:"images"`
	Steps          []ChatStep  `json:"steps"`
	ConversationID string      `json:"conversation_id"`
	// Sandbox is the id of the conversation's sandbox.
	Sandbox string `json:"sandbox"`
	// Rounds is the number of tool rounds; Truncated says the bound was hit
	// and the answer was made from what had been computed.
	Rounds    int  `json:"rounds"`
	Truncated bool `json:"truncated,omitempty"`
}

// ChatOutput is a piece of output of running code, while it runs: Type
// "stdout" or "stderr" with Text, "result" with Result, "error" with Error.
type ChatOutput struct {
	Type   string          `json:"type"`
	Text   string          `json:"text,omitempty"`
	Result map[string]any  `json:"result,omitempty"`
	Error  *ExecutionError `json:"error,omitempty"`
}

// ChatEventType is the kind of a chat event (ChatEvent.Type), and the name of
// its SSE event.
type ChatEventType string

// Chat SSE event names. The stream of POST /v1/chat starts with
// "conversation" (ConversationID, Sandbox) and ends with "done" (a
// ChatResponse) or "error" (an ErrorBody); the events between carry a
// ChatEvent of their type.
const (
	ChatEventConversation ChatEventType = "conversation"
	ChatEventText         ChatEventType = "text"       // Text: a delta of the model's text
	ChatEventToolCall     ChatEventType = "tool_call"  // the model asked to run Code
	ChatEventToolError    ChatEventType = "tool_error" // a malformed tool call, fed back to the model
	ChatEventOutput       ChatEventType = "output"     // Output: live output of the running code
	ChatEventExecution    ChatEventType = "execution"  // Execution: the code's result, Images its charts
	ChatEventAnswer       ChatEventType = "answer"     // Text: the final answer, Images all charts
)

// The SSE events that end the chat stream: their data is no ChatEvent.
const (
	ChatEventDone  = "done"
	ChatEventError = "error"
)

// ChatEvent is one event of the chat stream.
type ChatEvent struct {
	Type           ChatEventType `json:"type"`
	Round          int           `json:"round,omitempty"`
	Text           string        `json:"text,omitempty"`
	CallID         string        `json:"call_id,omitempty"`
	Code           string        `json:"code,omitempty"`
	Output         *ChatOutput   `json:"output,omitempty"`
	Execution      *Execution    `json:"execution,omitempty"`
	Images         []ChatImage   `json:"images,omitempty"`
	Error          string        `json:"error,omitempty"`
	ConversationID string        `json:"conversation_id,omitempty"`
	Sandbox        string        `json:"sandbox,omitempty"`
}

// Conversation is a chat with its sandbox (named conv-<id>: it suspends when
// idle and resumes on the next question).
type Conversation struct {
	ID          string    `json:"id"`
	Title       string    `json:"title"`
	Sandbox     string    `json:"sandbox"`
	SandboxName string    `json:"sandbox_name"`
	Model       string    `json:"model,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
	// Turns and Files are filled by GET /v1/conversations/{id} only.
	Turns []ChatTurn     `json:"turns,omitempty"`
	Files []UploadedFile `json:"files,omitempty"`
	// Cells is the code the conversation's sandbox ran, the user's cells and
	// the model's steps, in order (GET /v1/conversations/{id} only).
	Cells []Cell `json:"cells,omitempty"`
}

// ChatTurn is one question and its answer, as stored.
type ChatTurn struct {
	Question  string      `json:"question"`
	Answer    string      `json:"answer"`
	Images    []ChatImage `json:"images"`
	Steps     []ChatStep  `json:"steps"`
	Error     string      `json:"error,omitempty"`
	CreatedAt time.Time   `json:"created_at"`
}

// ConversationList is the body of GET /v1/conversations: one page of
// conversations, the most recently updated first.
type ConversationList struct {
	Conversations []Conversation `json:"conversations"`
	// NextCursor, when set, is the cursor of the next page (pass it as
	// ?cursor=); absent on the last page.
	NextCursor string `json:"next_cursor,omitempty"`
}

// CreateConversationRequest is the body of POST /v1/conversations: a new
// conversation and its sandbox, before any question (the UI's code cells
// need the sandbox).
type CreateConversationRequest struct {
	Title string `json:"title,omitempty"`
}

// UploadedFile is a file uploaded with POST /v1/files (multipart part
// "file"): CSV only, up to the daemon's limit.
type UploadedFile struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	SizeBytes int64     `json:"size_bytes"`
	SHA256    string    `json:"sha256"`
	CreatedAt time.Time `json:"created_at"`
	// Columns are the CSV's header fields; Rows its data rows.
	Columns []string `json:"columns"`
	Rows    int64    `json:"rows"`
}
