package chat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

// DefaultAnthropicBaseURL is Anthropic's own endpoint.
const DefaultAnthropicBaseURL = "https://api.anthropic.com"

// DefaultAnthropicModel is the model used when none is configured.
const DefaultAnthropicModel = "claude-sonnet-4-5"

// AnthropicConfig configures an Anthropic messages provider.
type AnthropicConfig struct {
	// BaseURL is the API root; empty means DefaultAnthropicBaseURL.
	BaseURL string
	// APIKey is sent as x-api-key; AuthToken, used when APIKey is empty,
	// as a bearer token.
	APIKey    string
	AuthToken string
	// Model is the default model; empty means DefaultAnthropicModel.
	Model string
	// MaxTokens bounds a model turn; 0 means DefaultMaxTokens.
	MaxTokens int64
	// Timeout bounds a model turn, stream included; 0 means DefaultTimeout.
	Timeout time.Duration
	// MaxRetries is how many times the SDK retries a failed call: 0 means
	// DefaultMaxRetries, a negative value none.
	MaxRetries int
	// HTTPClient replaces the default client (short connect timeout).
	HTTPClient *http.Client
}

type anthropicProvider struct {
	client    anthropic.Client
	baseURL   string
	model     string
	maxTokens int64
	timeout   time.Duration
}

// NewAnthropic returns a provider for Anthropic's messages API, using the
// official SDK with streaming. It reads nothing from the environment itself.
func NewAnthropic(cfg AnthropicConfig) (Provider, error) {
	base, err := baseURL(cfg.BaseURL, DefaultAnthropicBaseURL, "ANTHROPIC_BASE_URL", "https://api.anthropic.com")
	if err != nil {
		return nil, err
	}
	p := &anthropicProvider{baseURL: strings.TrimRight(base, "/"), model: cfg.Model, maxTokens: cfg.MaxTokens, timeout: cfg.Timeout}
	if p.model == "" {
		p.model = DefaultAnthropicModel
	}
	if p.maxTokens <= 0 {
		p.maxTokens = DefaultMaxTokens
	}
	if p.timeout <= 0 {
		p.timeout = DefaultTimeout
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = newHTTPClient()
	}
	opts := []option.RequestOption{
		option.WithoutEnvironmentDefaults(),
		option.WithBaseURL(base),
		option.WithHTTPClient(hc),
		option.WithMaxRetries(retries(cfg.MaxRetries)),
	}
	switch {
	case cfg.APIKey != "":
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	case cfg.AuthToken != "":
		opts = append(opts, option.WithAuthToken(cfg.AuthToken))
	default:
		opts = append(opts, option.WithAPIKey("not-needed")) // a local proxy
	}
	p.client = anthropic.NewClient(opts...)
	return p, nil
}

func (p *anthropicProvider) Name() string  { return "anthropic" }
func (p *anthropicProvider) Model() string { return p.model }

func (p *anthropicProvider) Step(ctx context.Context, req Request, onText func(string)) (*Reply, error) {
	model := req.Model
	if model == "" {
		model = p.model
	}
	sctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	params := anthropic.MessageNewParams{
		Model:     anthropic.Model(model),
		MaxTokens: p.maxTokens,
		Messages:  anthropicMessages(req.Messages),
	}
	if req.System != "" {
		params.System = []anthropic.TextBlockParam{{Text: req.System}}
	}
	for _, t := range req.Tools {
		schema := anthropic.ToolInputSchemaParam{Properties: t.Parameters["properties"]}
		if required, ok := t.Parameters["required"].([]string); ok {
			schema.Required = required
		}
		params.Tools = append(params.Tools, anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{
			Name:        t.Name,
			Description: anthropic.String(t.Description),
			InputSchema: schema,
		}})
	}
	if len(params.Tools) > 0 && req.NoTools {
		params.ToolChoice = anthropic.ToolChoiceUnionParam{OfNone: &anthropic.ToolChoiceNoneParam{}}
	}
	stream := p.client.Messages.NewStreaming(sctx, params)
	defer stream.Close()
	var msg anthropic.Message
	started, stopped := false, false
	for stream.Next() {
		ev := stream.Current()
		switch ev.Type {
		case "message_start":
			started = true
		case "message_stop":
			stopped = true
		}
		if !started {
			continue
		}
		if err := msg.Accumulate(ev); err != nil {
			return nil, p.wrap(ctx, model, fmt.Errorf("the stream is inconsistent: %w", err))
		}
		if ev.Type == "content_block_delta" && ev.Delta.Type == "text_delta" && onText != nil && ev.Delta.Text != "" {
			onText(ev.Delta.Text)
		}
	}
	if err := stream.Err(); err != nil {
		return nil, p.wrap(ctx, model, err)
	}
	if !stopped {
		return nil, p.wrap(ctx, model, errors.New("the stream ended before message_stop"))
	}
	reply := &Reply{StopReason: string(msg.StopReason)}
	var text strings.Builder
	for _, b := range msg.Content {
		switch b.Type {
		case "text":
			text.WriteString(b.Text)
		case "tool_use":
			args := string(b.Input)
			if strings.TrimSpace(args) == "" {
				args = "{}"
			}
			reply.ToolCalls = append(reply.ToolCalls, ToolCall{ID: b.ID, Name: b.Name, Arguments: args})
		}
	}
	reply.Text = text.String()
	return reply, nil
}

func (p *anthropicProvider) wrap(ctx context.Context, model string, err error) error {
	status := 0
	var apiErr *anthropic.Error
	if errors.As(err, &apiErr) {
		status = apiErr.StatusCode
		if apiErr.Message != "" {
			err = fmt.Errorf("%s: %w", apiErr.Message, err)
		}
	}
	return wrapProviderError(ctx, "Anthropic endpoint", p.baseURL, model, p.timeout, status, err)
}

// anthropicMessages converts a conversation to Anthropic messages: tool
// results travel in user messages, and consecutive messages of one role are
// merged.
func anthropicMessages(msgs []Message) []anthropic.MessageParam {
	var out []anthropic.MessageParam
	var role Role
	var blocks []anthropic.ContentBlockParamUnion
	flush := func() {
		if len(blocks) == 0 {
			return
		}
		if role == RoleAssistant {
			out = append(out, anthropic.NewAssistantMessage(blocks...))
		} else {
			out = append(out, anthropic.NewUserMessage(blocks...))
		}
		blocks = nil
	}
	add := func(r Role, b anthropic.ContentBlockParamUnion) {
		if r != role {
			flush()
			role = r
		}
		blocks = append(blocks, b)
	}
	for _, m := range msgs {
		switch m.Role {
		case RoleUser:
			if strings.TrimSpace(m.Text) != "" {
				add(RoleUser, anthropic.NewTextBlock(m.Text))
			}
		case RoleAssistant:
			if strings.TrimSpace(m.Text) != "" {
				add(RoleAssistant, anthropic.NewTextBlock(m.Text))
			}
			for _, c := range m.ToolCalls {
				input := json.RawMessage(`{}`)
				if validJSONObject(c.Arguments) {
					input = json.RawMessage(compactJSON(c.Arguments))
				}
				add(RoleAssistant, anthropic.NewToolUseBlock(anthropicID(c.ID), input, c.Name))
			}
		case RoleTool:
			for _, r := range m.ToolResults {
				content := r.Content
				if content == "" {
					content = "(no output)"
				}
				add(RoleUser, anthropic.NewToolResultBlock(anthropicID(r.CallID), content, r.IsError))
			}
		}
	}
	flush()
	return out
}

// anthropicID makes a tool call id acceptable to Anthropic (letters, digits,
// _ and -), for conversations that began with another provider.
func anthropicID(id string) string {
	if id == "" {
		return "call"
	}
	b := []byte(id)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	return string(b)
}
