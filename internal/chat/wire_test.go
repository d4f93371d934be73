package chat

import "github.com/forkbox/forkbox/internal/chat/chattest"

// The scripted endpoints live in chattest (the e2e and browser tests use
// them too); these names keep the tests short.
type (
	toolCall   = chattest.ToolCall
	turn       = chattest.Turn
	wireServer = chattest.Server
)

var (
	newOpenAIServer    = chattest.NewOpenAI
	newAnthropicServer = chattest.NewAnthropic
	runCodeArgs        = chattest.RunCodeArgs
)
