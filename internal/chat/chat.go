// Package chat is forkbox's analyst: an agent loop that answers a question by
// letting a language model run Python in a sandbox through a run_code tool,
// feeding each execution back to it, and collecting the charts it draws
// (docs/ARCHITECTURE.md, "Chat (the analyst)").
//
// The loop (Run) is provider-neutral. A Provider is one model turn over the
// conversation so far; two implementations use the official SDKs: any
// OpenAI-compatible chat-completions endpoint (NewOpenAI) and Anthropic's
// messages API (NewAnthropic). ProviderFromEnv picks one from the
// environment. The code runs through a CodeRunner, which the caller adapts
// from the sandbox manager. Conversations are plain JSON-serializable
// Messages, so they can be stored and continued with either provider.
package chat

import (
	"context"

	"github.com/forkbox/forkbox/api"
)

// Role is who wrote a Message.
type Role string

// Message roles.
const (
	// RoleUser is a question from the person.
	RoleUser Role = "user"
	// RoleAssistant is a model turn: text and/or tool calls.
	RoleAssistant Role = "assistant"
	// RoleTool holds the results of the tool calls of the assistant
	// message right before it, one ToolResult per call.
	RoleTool Role = "tool"
)

// Message is one provider-neutral entry of a conversation. It serializes as
// JSON, so a conversation can be stored and continued later, with either
// provider.
type Message struct {
	Role        Role         `json:"role"`
	Text        string       `json:"text,omitempty"`
	ToolCalls   []ToolCall   `json:"tool_calls,omitempty"`   // RoleAssistant
	ToolResults []ToolResult `json:"tool_results,omitempty"` // RoleTool
}

// ToolCall is a model's request to run a tool.
type ToolCall struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Arguments is the raw JSON the model wrote; it may be invalid.
	Arguments string `json:"arguments"`
}

// ToolResult is what a tool call gave back to the model.
type ToolResult struct {
	CallID  string `json:"call_id"`
	Content string `json:"content"`
	IsError bool   `json:"is_error,omitempty"`
}

// Tool describes a tool offered to the model.
type Tool struct {
	Name        string
	Description string
	// Parameters is the JSON schema of the arguments (an object schema).
	Parameters map[string]any
}

// Request is one model turn to take.
type Request struct {
	// Model overrides the provider's default model when set.
	Model    string
	System   string
	Messages []Message
	Tools    []Tool
	// NoTools asks for a text answer: the tools stay declared (the history
	// may refer to them) but the model may not call them (tool_choice none).
	NoTools bool
}

// Reply is the model's turn.
type Reply struct {
	Text      string
	ToolCalls []ToolCall
	// StopReason is the provider's reason for ending the turn (stop,
	// tool_calls, end_turn, tool_use, max_tokens, …), for diagnostics.
	StopReason string
}

// Provider is a language model behind an API.
type Provider interface {
	// Name is the provider kind: "openai" (any OpenAI-compatible endpoint)
	// or "anthropic".
	Name() string
	// Model is the model used when a Request names none.
	Model() string
	// Step takes one model turn, streaming text deltas through onText (which
	// may be nil) as they arrive. Errors wrap errdefs kinds:
	// ErrUnavailable for a provider that is down or refuses the call,
	// ErrTimeout when it does not answer in time.
	Step(ctx context.Context, req Request, onText func(delta string)) (*Reply, error)
}

// Output is a piece of output of running code, delivered while it runs:
// Type "stdout" or "stderr" with Text, "result" with Result, or "error" with
// Error — the shape of the sandbox agent's code events. It is the API's type.
type Output = api.ChatOutput

// CodeRunner runs Python in the conversation's sandbox, in a stateful kernel
// (variables persist between calls). onOutput, when not nil, receives output
// as it is produced. A failing cell is a successful call whose Execution
// carries the Error; an error return means the code could not be run at all,
// and ends the loop.
type CodeRunner interface {
	RunCode(ctx context.Context, code string, onOutput func(Output)) (*api.Execution, error)
}

// RunnerFunc adapts a function to a CodeRunner.
type RunnerFunc func(ctx context.Context, code string, onOutput func(Output)) (*api.Execution, error)

// RunCode calls f.
func (f RunnerFunc) RunCode(ctx context.Context, code string, onOutput func(Output)) (*api.Execution, error) {
	return f(ctx, code, onOutput)
}

// File is a file the user uploaded, listed in the system prompt.
type File struct {
	// Path is absolute, or relative to /workspace.
	Path string `json:"path"`
	Size int64  `json:"size,omitempty"`
	// Preview is optional: the first lines of a CSV, say.
	Preview string `json:"preview,omitempty"`
}

// Options tune a Run.
type Options struct {
	// MaxRounds bounds the tool rounds (model turns that call tools); 0
	// means 10. At the bound the model is asked once more, without tools,
	// for its answer.
	MaxRounds int
	// Files are the uploaded files, which are in /workspace.
	Files []File
	// Model overrides the provider's default model.
	Model string
	// Instructions are appended to the system prompt.
	Instructions string
	// MaxOutputBytes bounds each of stdout, stderr and result text fed back
	// to the model; 0 means 8 KiB.
	MaxOutputBytes int
}

// Event types, streamed while Run works: the API's chat event types.
const (
	// EventText: Text is a delta of the model's text.
	EventText = api.ChatEventText
	// EventToolCall: the model asked to run Code (CallID).
	EventToolCall = api.ChatEventToolCall
	// EventToolError: a tool call could not be run (malformed arguments,
	// unknown tool); Error says why, and it is fed back to the model.
	EventToolError = api.ChatEventToolError
	// EventOutput: Output is a piece of the running code's output.
	EventOutput = api.ChatEventOutput
	// EventExecution: the code of CallID ran; Execution is its result,
	// Images the charts it drew.
	EventExecution = api.ChatEventExecution
	// EventAnswer: Text is the final answer, Images all the charts.
	EventAnswer = api.ChatEventAnswer
)

// Event is something that happened during Run, for streaming (SSE): the
// API's chat event.
type Event = api.ChatEvent

// Image is a chart the code drew: chart-1.png, chart-2.png, … across an
// answer.
type Image = api.ChatImage

// Step is one piece of code the model ran and its result.
type Step = api.ChatStep

// Result is the outcome of Run.
type Result struct {
	Answer string  `json:"answer"`
	Images []Image `json:"images"`
	Steps  []Step  `json:"steps"`
	// Messages are the new messages of this question (the question, the
	// model's turns, the tool results, the answer), to append to the
	// conversation's history.
	Messages []Message `json:"messages"`
	// Rounds is the number of tool rounds taken; Truncated tells that the
	// bound was hit.
	Rounds    int  `json:"rounds"`
	Truncated bool `json:"truncated,omitempty"`
}
