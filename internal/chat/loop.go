package chat

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path"
	"strings"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/textcut"
	"github.com/forkbox/forkbox/internal/units"
)

// Defaults of Options.
const (
	DefaultMaxRounds      = 10
	DefaultMaxOutputBytes = 8 << 10
)

// ToolRunCode is the name of the tool that runs Python.
const ToolRunCode = "run_code"

// Workdir is where uploaded files are and where code runs.
const Workdir = "/workspace"

// RunCodeTool is the run_code tool offered to the model.
var RunCodeTool = Tool{
	Name: ToolRunCode,
	Description: "Run Python code in the user's sandbox: a stateful Jupyter kernel whose working directory is " +
		Workdir + ", where the uploaded files are. Variables, imports and loaded data persist between calls " +
		"and between questions. Returns stdout, stderr, the value of the last expression, the error with its " +
		"traceback if the code failed, and a note for each chart drawn (matplotlib; charts are shown to the user). " +
		"print() every number you need.",
	Parameters: map[string]any{
		"type": "object",
		"properties": map[string]any{
			"code": map[string]any{
				"type":        "string",
				"description": "The Python code to run.",
			},
		},
		"required": []string{"code"},
	},
}

// SystemPrompt is the system prompt of a Run with these options.
func SystemPrompt(opts Options) string {
	var b strings.Builder
	b.WriteString(`You are a data analyst working in a Python sandbox. You answer the user's questions about their data by computing, never by guessing.

- Before you answer anything that needs a number, a table or a chart, compute it with the run_code tool. It runs Python in a stateful Jupyter kernel: variables, imports and loaded data persist between calls and between questions in this conversation, so reuse them instead of reloading. pandas, numpy and matplotlib are available.
- print() every number you will use, so that it appears in the tool output, and quote numbers in your answer exactly as the code printed them.
- Draw charts with matplotlib and call plt.show() (or display the figure). Each chart comes back to you as a note like "[image 1: chart-1.png attached to the answer]" and is shown to the user with your answer: do not embed it, link it or describe it pixel by pixel.
- If the code fails, read the error and fix the code.
- When you have what you need, answer concisely in plain language (Markdown is fine), with the key numbers, without calling the tool again.
`)
	b.WriteString("\nFiles the user uploaded are in " + Workdir + " (the working directory):\n")
	if len(opts.Files) == 0 {
		b.WriteString("- none yet\n")
	}
	for _, f := range opts.Files {
		p := f.Path
		if !path.IsAbs(p) {
			p = path.Join(Workdir, p)
		}
		b.WriteString("- " + p)
		if f.Size > 0 {
			b.WriteString(" (" + units.Bytes(f.Size) + ")")
		}
		b.WriteString("\n")
		if pv := strings.TrimRight(f.Preview, "\n"); pv != "" {
			b.WriteString("  first lines:\n")
			for _, line := range strings.Split(clip(pv, 2048), "\n") {
				b.WriteString("    " + line + "\n")
			}
		}
	}
	if s := strings.TrimSpace(opts.Instructions); s != "" {
		b.WriteString("\n" + s + "\n")
	}
	return b.String()
}

// limitNote asks for the answer when the bound of tool rounds is reached. It
// is sent with the final call only, not stored in the conversation.
const limitNote = "You have used all %d tool rounds allowed, so you cannot run code any more. " +
	"Answer the question now from what has been computed so far."

// Run answers question, the next one of the conversation history, with the
// model p and the code runner, streaming what happens through emit (which may
// be nil). The Result's Messages are to be appended to history.
//
// The model may call run_code for up to opts.MaxRounds rounds; then it is
// asked once more, without tools, for its answer, and if that fails the
// answer is built from the last good execution's output. Malformed tool
// calls are fed back to the model as errors. Errors of the provider wrap
// errdefs kinds (ErrUnavailable, ErrTimeout); an empty question is
// ErrInvalidArgument; a runner error ends the loop and is returned wrapped.
//
// emit is called from Run's goroutine and from the runner's onOutput
// callbacks, one call at a time if the runner calls onOutput in order; it
// should not block for long.
func Run(ctx context.Context, p Provider, runner CodeRunner, history []Message, question string, opts Options, emit func(Event)) (*Result, error) {
	if emit == nil {
		emit = func(Event) {}
	}
	question = strings.TrimSpace(question)
	if question == "" {
		return nil, errdefs.InvalidArgument("question: must not be empty")
	}
	if p == nil {
		return nil, errdefs.Unavailable("chat: no model provider is configured")
	}
	if runner == nil {
		return nil, errdefs.InvalidArgument("chat: no code runner")
	}
	maxRounds := opts.MaxRounds
	if maxRounds <= 0 {
		maxRounds = DefaultMaxRounds
	}
	maxOut := opts.MaxOutputBytes
	if maxOut <= 0 {
		maxOut = DefaultMaxOutputBytes
	}
	past := RepairHistory(history)
	msgs := []Message{{Role: RoleUser, Text: question}}
	res := &Result{Images: []Image{}, Steps: []Step{}}
	system := SystemPrompt(opts)
	tools := []Tool{RunCodeTool}
	var lastGood, lastAny *api.Execution
	var answer string
	seen := map[string]bool{}
	for _, m := range past {
		for _, c := range m.ToolCalls {
			seen[c.ID] = true
		}
	}
	for turn := 1; ; turn++ {
		final := res.Rounds >= maxRounds
		req := Request{Model: opts.Model, System: system, Tools: tools, NoTools: final,
			Messages: append(append(make([]Message, 0, len(past)+len(msgs)+1), past...), msgs...)}
		if final {
			res.Truncated = true
			req.Messages = append(req.Messages, Message{Role: RoleUser, Text: fmt.Sprintf(limitNote, maxRounds)})
		}
		onText := func(d string) { emit(Event{Type: EventText, Round: turn, Text: d}) }
		reply, err := p.Step(ctx, req, onText)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("chat: %w", ctx.Err())
			}
			if !final {
				return nil, err
			}
			// The answer after the bound failed: answer from what ran.
			answer = fallbackAnswer(fmt.Sprintf("I stopped after %d tool rounds (the model could not give a final answer: %v).", res.Rounds, err), lastGood, lastAny, len(res.Images), maxOut)
			msgs = append(msgs, Message{Role: RoleAssistant, Text: answer})
			break
		}
		if final || len(reply.ToolCalls) == 0 {
			answer = strings.TrimSpace(reply.Text)
			if answer == "" {
				lead := "The model gave no answer."
				if final {
					lead = fmt.Sprintf("I stopped after %d tool rounds.", res.Rounds)
				}
				answer = fallbackAnswer(lead, lastGood, lastAny, len(res.Images), maxOut)
			}
			msgs = append(msgs, Message{Role: RoleAssistant, Text: answer})
			break
		}
		res.Rounds++
		calls := make([]ToolCall, len(reply.ToolCalls))
		for i, c := range reply.ToolCalls {
			if c.ID == "" || seen[c.ID] {
				c.ID = fmt.Sprintf("call_%d_%d", turn, i+1)
			}
			seen[c.ID] = true
			calls[i] = c
		}
		msgs = append(msgs, Message{Role: RoleAssistant, Text: reply.Text, ToolCalls: calls})
		results := make([]ToolResult, 0, len(calls))
		for _, c := range calls {
			code, perr := parseRunCode(c)
			if perr != nil {
				emit(Event{Type: EventToolError, Round: turn, CallID: c.ID, Error: perr.Error()})
				results = append(results, ToolResult{CallID: c.ID, IsError: true,
					Content: "error: " + perr.Error() + "\nCall " + ToolRunCode + ` with arguments {"code": "<Python code>"}.`})
				continue
			}
			emit(Event{Type: EventToolCall, Round: turn, CallID: c.ID, Code: code})
			onOutput := func(o Output) { emit(Event{Type: EventOutput, Round: turn, CallID: c.ID, Output: &o}) }
			exec, err := runner.RunCode(ctx, code, onOutput)
			if err != nil {
				if ctx.Err() != nil {
					return nil, fmt.Errorf("chat: %w", ctx.Err())
				}
				return nil, fmt.Errorf("chat: running the model's code: %w", err)
			}
			if exec == nil {
				exec = &api.Execution{}
			}
			images := collectImages(exec, len(res.Images))
			res.Images = append(res.Images, images...)
			res.Steps = append(res.Steps, Step{Code: code, Execution: exec})
			lastAny = exec
			if exec.Error == nil {
				lastGood = exec
			}
			emit(Event{Type: EventExecution, Round: turn, CallID: c.ID, Code: code, Execution: exec, Images: images})
			results = append(results, ToolResult{CallID: c.ID, Content: FormatExecution(exec, images, maxOut), IsError: exec.Error != nil})
		}
		msgs = append(msgs, Message{Role: RoleTool, ToolResults: results})
	}
	res.Answer = answer
	res.Messages = msgs
	emit(Event{Type: EventAnswer, Text: answer, Images: res.Images})
	return res, nil
}

// parseRunCode checks a tool call and returns its code.
func parseRunCode(c ToolCall) (string, error) {
	if c.Name != ToolRunCode {
		return "", fmt.Errorf("unknown tool %q: the only tool is %s", c.Name, ToolRunCode)
	}
	raw := strings.TrimSpace(c.Arguments)
	if raw == "" {
		return "", fmt.Errorf("the arguments are empty: the code argument is missing")
	}
	var args map[string]json.RawMessage
	if err := json.Unmarshal([]byte(raw), &args); err != nil {
		return "", fmt.Errorf("the arguments are not a valid JSON object (%v): %s", err, clip(raw, 200))
	}
	v, ok := args["code"]
	if !ok {
		return "", fmt.Errorf("the code argument is missing")
	}
	var code string
	if err := json.Unmarshal(v, &code); err != nil {
		return "", fmt.Errorf("the code argument must be a string")
	}
	if strings.TrimSpace(code) == "" {
		return "", fmt.Errorf("the code argument is empty")
	}
	return code, nil
}

// collectImages returns the PNG results of exec, numbered after the n
// images the answer already has.
func collectImages(exec *api.Execution, n int) []Image {
	var out []Image
	for _, r := range exec.Results {
		if png, ok := r["png"].(string); ok && png != "" {
			out = append(out, Image{FileName: fmt.Sprintf("chart-%d.png", n+len(out)+1), PNGBase64: png})
		}
	}
	return out
}

// FormatExecution is the tool result fed back to the model for an execution:
// stdout, stderr, result text, a note per image and the error, each clipped
// to max bytes.
func FormatExecution(exec *api.Execution, images []Image, max int) string {
	if max <= 0 {
		max = DefaultMaxOutputBytes
	}
	var b strings.Builder
	section := func(name, body string) {
		if body == "" {
			return
		}
		b.WriteString("[" + name + "]\n" + clip(body, max))
		if !strings.HasSuffix(body, "\n") {
			b.WriteString("\n")
		}
	}
	section("stdout", strings.Join(exec.Logs.Stdout, ""))
	section("stderr", strings.Join(exec.Logs.Stderr, ""))
	img := 0
	var display []string
	for _, r := range exec.Results {
		if png, ok := r["png"].(string); ok && png != "" {
			if img < len(images) {
				fmt.Fprintf(&b, "[image %d: %s attached to the answer]\n", img+1, images[img].FileName)
			}
			img++
			continue
		}
		text, _ := r["text"].(string)
		if main, _ := r["is_main_result"].(bool); main {
			section("result", text)
			continue
		}
		if text != "" {
			display = append(display, text)
		}
	}
	section("display", strings.Join(display, "\n"))
	if e := exec.Error; e != nil {
		b.WriteString("[error]\n" + clip(e.Name+": "+e.Value, max) + "\n")
		if tb := strings.TrimRight(strings.Join(e.Traceback, "\n"), "\n"); tb != "" {
			b.WriteString("[traceback]\n" + clipTail(tb, max) + "\n")
		}
	}
	if b.Len() == 0 {
		return "(the code ran and printed nothing; print() the values you need)"
	}
	return b.String()
}

// fallbackAnswer builds an answer from the last good execution (or the last
// one) when the model gives none.
func fallbackAnswer(lead string, good, last *api.Execution, images, max int) string {
	e := good
	if e == nil {
		e = last
	}
	if e == nil {
		return lead + " No code ran successfully, so I have no result to report."
	}
	var out strings.Builder
	out.WriteString(strings.Join(e.Logs.Stdout, ""))
	for _, r := range e.Results {
		if main, _ := r["is_main_result"].(bool); main {
			if text, _ := r["text"].(string); text != "" {
				if out.Len() > 0 && !strings.HasSuffix(out.String(), "\n") {
					out.WriteString("\n")
				}
				out.WriteString(text)
			}
		}
	}
	if e.Error != nil {
		if out.Len() > 0 && !strings.HasSuffix(out.String(), "\n") {
			out.WriteString("\n")
		}
		out.WriteString(e.Error.Name + ": " + e.Error.Value)
	}
	body := strings.TrimRight(clipTail(out.String(), max/2), "\n")
	var b strings.Builder
	b.WriteString(lead)
	if body == "" {
		b.WriteString(" The last result printed nothing.")
	} else {
		b.WriteString(" The last result was:\n\n```\n" + strings.ReplaceAll(body, "```", "'''") + "\n```")
	}
	switch images {
	case 0:
	case 1:
		b.WriteString("\n\n1 chart is attached.")
	default:
		fmt.Fprintf(&b, "\n\n%d charts are attached.", images)
	}
	return b.String()
}

// clip keeps the head and the tail of s within max bytes, saying what was
// cut.
func clip(s string, max int) string {
	if len(s) <= max {
		return s
	}
	tail := max / 4
	head := max - tail
	h := textcut.Prefix(s, head)
	t := textcut.Suffix(s, tail)
	return fmt.Sprintf("%s\n[… %d bytes cut: the output was %d bytes …]\n%s", h, len(s)-len(h)-len(t), len(s), t)
}

// clipTail keeps the end of s within max bytes, which is where tracebacks
// say what went wrong.
func clipTail(s string, max int) string {
	if len(s) <= max {
		return s
	}
	t := textcut.Suffix(s, max)
	return fmt.Sprintf("[… the first %d bytes cut …]\n%s", len(s)-len(t), t)
}

// RepairHistory returns a copy of history in which every tool call has a
// result and every result a call: a call left unanswered (a turn that was
// cut off) gets an error result, and stray results are dropped. Providers
// refuse histories that break these rules.
func RepairHistory(history []Message) []Message {
	out := make([]Message, 0, len(history))
	for i := 0; i < len(history); i++ {
		m := history[i]
		switch m.Role {
		case RoleTool:
			continue // consumed with its assistant message below, or stray
		case RoleAssistant:
			out = append(out, m)
			if len(m.ToolCalls) == 0 {
				continue
			}
			got := map[string]ToolResult{}
			if i+1 < len(history) && history[i+1].Role == RoleTool {
				for _, r := range history[i+1].ToolResults {
					got[r.CallID] = r
				}
			}
			results := make([]ToolResult, 0, len(m.ToolCalls))
			for _, c := range m.ToolCalls {
				r, ok := got[c.ID]
				if !ok {
					r = ToolResult{CallID: c.ID, Content: "error: this call was not run", IsError: true}
				}
				results = append(results, r)
			}
			out = append(out, Message{Role: RoleTool, ToolResults: results})
		default:
			out = append(out, m)
		}
	}
	return out
}

// validJSONObject reports whether s is a JSON object, as tool arguments must
// be when they are sent back to a provider.
func validJSONObject(s string) bool {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, "{") || !json.Valid([]byte(s)) {
		return false
	}
	return true
}

// compactJSON returns s compacted when it is valid JSON.
func compactJSON(s string) string {
	var b bytes.Buffer
	if json.Compact(&b, []byte(s)) != nil {
		return s
	}
	return b.String()
}
