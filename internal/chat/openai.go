package chat

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/forkbox/forkbox/internal/errdefs"
)

// DefaultOpenAIBaseURL is OpenAI's own endpoint.
const DefaultOpenAIBaseURL = "https://api.openai.com/v1"

// DefaultOpenAIModel is the model used when none is configured.
const DefaultOpenAIModel = "gpt-4o-mini"

// OpenAIConfig configures an OpenAI-compatible chat-completions provider
// (OpenAI, OpenRouter, vLLM, Ollama, …).
type OpenAIConfig struct {
	// BaseURL is the API root, like https://api.openai.com/v1 or
	// http://localhost:11434/v1; empty means DefaultOpenAIBaseURL.
	BaseURL string
	// APIKey is sent as a bearer token; servers that need none (Ollama,
	// vLLM) get a placeholder when it is empty.
	APIKey string
	// Model is the default model; empty means DefaultOpenAIModel.
	Model string
	// Timeout bounds a model turn, stream included; 0 means DefaultTimeout.
	Timeout time.Duration
	// MaxRetries is how many times the SDK retries a failed call: 0 means
	// DefaultMaxRetries, a negative value none.
	MaxRetries int
	// HTTPClient replaces the default client (short connect timeout).
	HTTPClient *http.Client
}

type openAIProvider struct {
	client  openai.Client
	baseURL string
	model   string
	timeout time.Duration
}

// NewOpenAI returns a provider for an OpenAI-compatible chat-completions
// endpoint, using the official SDK with streaming.
func NewOpenAI(cfg OpenAIConfig) (Provider, error) {
	base, err := baseURL(cfg.BaseURL, DefaultOpenAIBaseURL, "OPENAI_BASE_URL", "https://api.openai.com/v1 or http://localhost:11434/v1")
	if err != nil {
		return nil, err
	}
	key := cfg.APIKey
	if key == "" {
		key = "not-needed" // Ollama, vLLM and friends accept anything
	}
	model := cfg.Model
	if model == "" {
		model = DefaultOpenAIModel
	}
	p := &openAIProvider{baseURL: strings.TrimRight(base, "/"), model: model, timeout: cfg.Timeout}
	if p.timeout <= 0 {
		p.timeout = DefaultTimeout
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = newHTTPClient()
	}
	// Explicit options override what the SDK reads from the environment.
	p.client = openai.NewClient(
		option.WithBaseURL(base),
		option.WithAPIKey(key),
		option.WithHTTPClient(hc),
		option.WithMaxRetries(retries(cfg.MaxRetries)),
	)
	return p, nil
}

// baseURL returns a provider's base URL (def when unset), refusing one that
// is not an absolute http(s) URL with a message naming its variable.
func baseURL(base, def, envName, example string) (string, error) {
	base = strings.TrimSpace(base)
	if base == "" {
		base = def
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", errdefs.Unavailable("chat: %s %q is not an http(s) URL, like %s", envName, base, example)
	}
	return base, nil
}

func retries(n int) int {
	switch {
	case n == 0:
		return DefaultMaxRetries
	case n < 0:
		return 0
	}
	return n
}

func (p *openAIProvider) Name() string  { return "openai" }
func (p *openAIProvider) Model() string { return p.model }

func (p *openAIProvider) Step(ctx context.Context, req Request, onText func(string)) (*Reply, error) {
	model := req.Model
	if model == "" {
		model = p.model
	}
	sctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	params := openai.ChatCompletionNewParams{
		Model:    shared.ChatModel(model),
		Messages: openAIMessages(req.System, req.Messages),
	}
	for _, t := range req.Tools {
		params.Tools = append(params.Tools, openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name:        t.Name,
			Description: openai.String(t.Description),
			Parameters:  shared.FunctionParameters(t.Parameters),
		}))
	}
	if len(params.Tools) > 0 && req.NoTools {
		params.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("none")}
	}
	stream := p.client.Chat.Completions.NewStreaming(sctx, params)
	defer stream.Close()
	var acc openai.ChatCompletionAccumulator
	chunks := 0
	for stream.Next() {
		chunk := stream.Current()
		chunks++
		if !acc.AddChunk(chunk) {
			return nil, p.wrap(ctx, model, errors.New("the stream sent a chunk that does not fit the completion so far"))
		}
		for _, c := range chunk.Choices {
			if c.Index == 0 && c.Delta.Content != "" && onText != nil {
				onText(c.Delta.Content)
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, p.wrap(ctx, model, err)
	}
	if chunks == 0 || len(acc.Choices) == 0 {
		return nil, p.wrap(ctx, model, errors.New("the stream ended without a completion"))
	}
	choice := acc.Choices[0]
	reply := &Reply{Text: choice.Message.Content, StopReason: choice.FinishReason}
	if reply.Text == "" && choice.Message.Refusal != "" {
		reply.Text = choice.Message.Refusal
	}
	for _, tc := range choice.Message.ToolCalls {
		if tc.Type != "" && tc.Type != "function" {
			continue
		}
		reply.ToolCalls = append(reply.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
	}
	return reply, nil
}

func (p *openAIProvider) wrap(ctx context.Context, model string, err error) error {
	status := 0
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		status = apiErr.StatusCode
		if apiErr.Message != "" {
			err = fmt.Errorf("%s: %w", apiErr.Message, err)
		}
	}
	return wrapProviderError(ctx, "OpenAI-compatible endpoint", p.baseURL, model, p.timeout, status, err)
}

// openAIMessages converts a conversation to chat-completions messages.
func openAIMessages(system string, msgs []Message) []openai.ChatCompletionMessageParamUnion {
	out := make([]openai.ChatCompletionMessageParamUnion, 0, len(msgs)+1)
	if system != "" {
		out = append(out, openai.SystemMessage(system))
	}
	for _, m := range msgs {
		switch m.Role {
		case RoleUser:
			out = append(out, openai.UserMessage(m.Text))
		case RoleAssistant:
			var a openai.ChatCompletionAssistantMessageParam
			if m.Text != "" || len(m.ToolCalls) == 0 {
				a.Content.OfString = openai.String(m.Text)
			}
			for _, c := range m.ToolCalls {
				args := c.Arguments
				if !validJSONObject(args) {
					args = "{}" // servers may parse the history's arguments
				}
				a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID: c.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{
							Name:      c.Name,
							Arguments: args,
						},
					},
				})
			}
			out = append(out, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		case RoleTool:
			for _, r := range m.ToolResults {
				out = append(out, openai.ToolMessage(r.Content, r.CallID))
			}
		}
	}
	return out
}
