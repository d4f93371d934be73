package chat

import (
	"strings"

	"github.com/forkbox/forkbox/internal/errdefs"
)

// HowToConfigure tells how to configure a model provider; it ends the error
// ProviderFromEnv returns when none is configured.
const HowToConfigure = "set, in the daemon's environment, either " +
	"ANTHROPIC_API_KEY for Anthropic (e.g. ANTHROPIC_API_KEY=sk-ant-... FORKBOX_MODEL=claude-sonnet-4-5), " +
	"or OPENAI_API_KEY for OpenAI (e.g. OPENAI_API_KEY=sk-... FORKBOX_MODEL=gpt-4o-mini), " +
	"or OPENAI_BASE_URL for any OpenAI-compatible server such as Ollama, vLLM or OpenRouter " +
	"(e.g. OPENAI_BASE_URL=http://localhost:11434/v1 FORKBOX_MODEL=llama3.1; OPENAI_API_KEY too if the server needs one), " +
	"then restart the daemon (forkbox serve). FORKBOX_MODEL picks the model (prefix it with openai: or anthropic: to force the provider, " +
	"or set FORKBOX_PROVIDER=openai|anthropic)"

// ProviderFromEnv picks and configures a provider from environment
// variables, read through getenv (os.Getenv in the daemon):
//
//   - FORKBOX_MODEL: the model, like gpt-4o-mini or claude-sonnet-4-5;
//     "openai:<model>" or "anthropic:<model>" forces the provider, and so
//     does FORKBOX_PROVIDER=openai|anthropic.
//   - ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN), ANTHROPIC_BASE_URL:
//     Anthropic's messages API. Chosen when a key is set, unless the
//     provider is forced to openai, or OpenAI is configured too and
//     FORKBOX_MODEL is not a claude model.
//   - OPENAI_API_KEY, OPENAI_BASE_URL: any OpenAI-compatible endpoint;
//     a base URL alone is enough (Ollama, vLLM need no key).
//
// With none configured the error wraps errdefs.ErrUnavailable and says how
// to configure one.
func ProviderFromEnv(getenv func(string) string) (Provider, error) {
	env := func(k string) string { return strings.TrimSpace(getenv(k)) }
	model := env("FORKBOX_MODEL")
	forced := strings.ToLower(env("FORKBOX_PROVIDER"))
	if kind, rest, ok := strings.Cut(model, ":"); ok && (kind == "openai" || kind == "anthropic") {
		forced, model = kind, rest
	}
	anthropicKey, anthropicToken, anthropicBase := env("ANTHROPIC_API_KEY"), env("ANTHROPIC_AUTH_TOKEN"), env("ANTHROPIC_BASE_URL")
	openaiKey, openaiBase := env("OPENAI_API_KEY"), env("OPENAI_BASE_URL")
	hasAnthropic := anthropicKey != "" || anthropicToken != ""
	hasOpenAI := openaiKey != "" || openaiBase != ""
	switch forced {
	case "":
		switch {
		case hasAnthropic && hasOpenAI && model != "" && !strings.HasPrefix(strings.ToLower(model), "claude"):
			forced = "openai"
		case hasAnthropic:
			forced = "anthropic"
		case hasOpenAI:
			forced = "openai"
		default:
			return nil, errdefs.Unavailable("chat needs a language model and none is configured: %s", HowToConfigure)
		}
	case "openai":
		if !hasOpenAI {
			return nil, errdefs.Unavailable("the OpenAI provider is asked for (FORKBOX_MODEL or FORKBOX_PROVIDER) but neither OPENAI_API_KEY nor OPENAI_BASE_URL is set: %s", HowToConfigure)
		}
	case "anthropic":
		if !hasAnthropic && anthropicBase == "" {
			return nil, errdefs.Unavailable("the Anthropic provider is asked for (FORKBOX_MODEL or FORKBOX_PROVIDER) but ANTHROPIC_API_KEY is not set: %s", HowToConfigure)
		}
	default:
		return nil, errdefs.Unavailable("FORKBOX_PROVIDER=%q is not a provider (openai or anthropic): %s", forced, HowToConfigure)
	}
	if forced == "anthropic" {
		return NewAnthropic(AnthropicConfig{BaseURL: anthropicBase, APIKey: anthropicKey, AuthToken: anthropicToken, Model: model})
	}
	return NewOpenAI(OpenAIConfig{BaseURL: openaiBase, APIKey: openaiKey, Model: model})
}
