package chat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
)

// scriptedRunner answers each piece of code with a scripted execution; code
// it does not know fails with a NameError, as a kernel would.
type scriptedRunner struct {
	mu    sync.Mutex
	execs map[string]*api.Execution
	ran   []string
}

func (r *scriptedRunner) RunCode(ctx context.Context, code string, onOutput func(Output)) (*api.Execution, error) {
	r.mu.Lock()
	r.ran = append(r.ran, code)
	e, ok := r.execs[code]
	r.mu.Unlock()
	if !ok {
		e = &api.Execution{Error: &api.ExecutionError{Name: "NameError", Value: "name 'unknown' is not defined",
			Traceback: []string{"Traceback (most recent call last):", "NameError: name 'unknown' is not defined"}}}
	}
	cp := *e
	for _, s := range cp.Logs.Stdout {
		if onOutput != nil {
			onOutput(Output{Type: "stdout", Text: s})
		}
	}
	return &cp, nil
}

func (r *scriptedRunner) codes() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.ran...)
}

const (
	profitCode = "import pandas as pd\ndf = pd.read_csv('sales.csv')\ndf['profit'] = df.revenue - df.cost\nprint(df.groupby('region').profit.sum())"
	plotCode   = "import matplotlib.pyplot as plt\ndf['month'] = pd.to_datetime(df.date).dt.to_period('M')\ndf.groupby('month').revenue.sum().plot()\nplt.show()"
	tinyPNG    = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)

func salesRunner() *scriptedRunner {
	return &scriptedRunner{execs: map[string]*api.Execution{
		profitCode: {Logs: api.Logs{Stdout: []string{"region\nEast     31210.25\n", "North    40112.00\nWest     52340.50\n"}, Stderr: []string{}},
			Results: []map[string]any{}, ExecutionCount: 1},
		plotCode: {Logs: api.Logs{Stdout: []string{}, Stderr: []string{}}, ExecutionCount: 2,
			Results: []map[string]any{{"png": tinyPNG, "text": "<Figure size 640x480 with 1 Axes>"}}},
		"print(df.shape)": {Logs: api.Logs{Stdout: []string{"(120, 7)\n"}}, ExecutionCount: 3},
	}}
}

// wire is one provider's protocol, for tests that run against both.
type wire struct {
	name   string
	server func(t testing.TB, turns ...turn) *wireServer
	env    func(w *wireServer) map[string]string
	// toolNames are the tools declared in a request.
	toolNames func(req map[string]any) []string
	// toolResults maps call ids to the tool results a request carries.
	toolResults func(req map[string]any) map[string]string
	// callIDs are the ids of the tool calls in a request's history.
	callIDs func(req map[string]any) []string
	// toolChoiceNone tells whether the request forbids tool calls.
	toolChoiceNone func(req map[string]any) bool
	system         func(req map[string]any) string
}

func list(v any) []any { l, _ := v.([]any); return l }
func obj(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}
func str(v any) string { s, _ := v.(string); return s }

var wires = []wire{
	{
		name:   "openai",
		server: newOpenAIServer,
		env: func(w *wireServer) map[string]string {
			return map[string]string{"OPENAI_BASE_URL": w.URL + "/v1", "FORKBOX_MODEL": "gpt-4o-mini"}
		},
		toolNames: func(req map[string]any) (out []string) {
			for _, t := range list(req["tools"]) {
				if str(obj(t)["type"]) != "function" {
					continue
				}
				out = append(out, str(obj(obj(t)["function"])["name"]))
			}
			return out
		},
		toolResults: func(req map[string]any) map[string]string {
			out := map[string]string{}
			for _, m := range list(req["messages"]) {
				if str(obj(m)["role"]) == "tool" {
					out[str(obj(m)["tool_call_id"])] = str(obj(m)["content"])
				}
			}
			return out
		},
		callIDs: func(req map[string]any) (out []string) {
			for _, m := range list(req["messages"]) {
				for _, c := range list(obj(m)["tool_calls"]) {
					out = append(out, str(obj(c)["id"]))
				}
			}
			return out
		},
		toolChoiceNone: func(req map[string]any) bool { return req["tool_choice"] == "none" },
		system: func(req map[string]any) string {
			m := obj(list(req["messages"])[0])
			if str(m["role"]) != "system" {
				return ""
			}
			return str(m["content"])
		},
	},
	{
		name:   "anthropic",
		server: newAnthropicServer,
		env: func(w *wireServer) map[string]string {
			return map[string]string{"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": w.URL, "FORKBOX_MODEL": "claude-sonnet-4-5"}
		},
		toolNames: func(req map[string]any) (out []string) {
			for _, t := range list(req["tools"]) {
				out = append(out, str(obj(t)["name"]))
			}
			return out
		},
		toolResults: func(req map[string]any) map[string]string {
			out := map[string]string{}
			for _, m := range list(req["messages"]) {
				for _, b := range list(obj(m)["content"]) {
					if str(obj(b)["type"]) != "tool_result" {
						continue
					}
					var text strings.Builder
					for _, c := range list(obj(b)["content"]) {
						text.WriteString(str(obj(c)["text"]))
					}
					out[str(obj(b)["tool_use_id"])] = text.String()
				}
			}
			return out
		},
		callIDs: func(req map[string]any) (out []string) {
			for _, m := range list(req["messages"]) {
				for _, b := range list(obj(m)["content"]) {
					if str(obj(b)["type"]) == "tool_use" {
						out = append(out, str(obj(b)["id"]))
					}
				}
			}
			return out
		},
		toolChoiceNone: func(req map[string]any) bool { return str(obj(req["tool_choice"])["type"]) == "none" },
		system: func(req map[string]any) string {
			var s strings.Builder
			for _, b := range list(req["system"]) {
				s.WriteString(str(obj(b)["text"]))
			}
			return s.String()
		},
	},
}

func (wr wire) provider(t *testing.T, w *wireServer) Provider {
	t.Helper()
	env := wr.env(w)
	p, err := ProviderFromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("ProviderFromEnv: %v", err)
	}
	if p.Name() != wr.name {
		t.Fatalf("provider %q, want %q", p.Name(), wr.name)
	}
	return p
}

// events collects the events of a Run.
type events struct {
	mu  sync.Mutex
	all []Event
}

func (e *events) emit(ev Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, ev)
}

func (e *events) count(typ api.ChatEventType) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, ev := range e.all {
		if ev.Type == typ {
			n++
		}
	}
	return n
}

func (e *events) text() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var b strings.Builder
	for _, ev := range e.all {
		if ev.Type == EventText {
			b.WriteString(ev.Text)
		}
	}
	return b.String()
}

func TestSalesAnalysis(t *testing.T) {
	for _, wr := range wires {
		t.Run(wr.name, func(t *testing.T) {
			answer := "Profit by region: West leads with 52340.50, then North (40112.00) and East (31210.25). The monthly revenue chart is attached."
			w := wr.server(t,
				turn{Text: "Let me load the data.", Calls: []toolCall{{ID: "call_profit", Name: ToolRunCode, Args: runCodeArgs(profitCode)}}},
				turn{Calls: []toolCall{{ID: "call_plot", Name: ToolRunCode, Args: runCodeArgs(plotCode)}}},
				turn{Text: answer},
				turn{Calls: []toolCall{{ID: "call_shape", Name: ToolRunCode, Args: runCodeArgs("print(df.shape)")}}},
				turn{Text: "There are 120 rows."},
			)
			p := wr.provider(t, w)
			runner := salesRunner()
			var ev events
			opts := Options{Files: []File{{Path: "sales.csv", Size: 4096, Preview: "date,product,region,units_sold,revenue,cost"}}}
			res, err := Run(context.Background(), p, runner, nil, "What is the profit by region? Plot monthly revenue.", opts, ev.emit)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if res.Answer != answer {
				t.Errorf("answer = %q", res.Answer)
			}
			if !strings.Contains(res.Answer, "52340.50") {
				t.Errorf("the answer lacks the computed number: %q", res.Answer)
			}
			if len(res.Images) != 1 || res.Images[0].FileName != "chart-1.png" || res.Images[0].PNGBase64 != tinyPNG {
				t.Errorf("images = %+v", res.Images)
			}
			if len(res.Steps) != 2 || res.Steps[0].Code != profitCode || res.Steps[1].Code != plotCode || res.Steps[0].Execution.ExecutionCount != 1 {
				t.Errorf("steps = %+v", res.Steps)
			}
			if res.Rounds != 2 || res.Truncated {
				t.Errorf("rounds = %d, truncated = %v", res.Rounds, res.Truncated)
			}
			roles := []Role{}
			for _, m := range res.Messages {
				roles = append(roles, m.Role)
			}
			if fmt.Sprint(roles) != "[user assistant tool assistant tool assistant]" {
				t.Errorf("message roles = %v", roles)
			}
			if got := runner.codes(); len(got) != 2 {
				t.Errorf("ran %q", got)
			}
			if ev.count(EventToolCall) != 2 || ev.count(EventExecution) != 2 || ev.count(EventAnswer) != 1 || ev.count(EventOutput) != 2 {
				t.Errorf("events: %d tool calls, %d executions, %d answers, %d outputs", ev.count(EventToolCall), ev.count(EventExecution), ev.count(EventAnswer), ev.count(EventOutput))
			}
			if got := ev.text(); got != "Let me load the data."+answer {
				t.Errorf("streamed text = %q", got)
			}

			reqs := w.Requests()
			if len(reqs) != 3 {
				t.Fatalf("%d requests, want 3", len(reqs))
			}
			for i, req := range reqs {
				if names := wr.toolNames(req); fmt.Sprint(names) != "[run_code]" {
					t.Errorf("request %d tools = %v", i, names)
				}
				if wr.toolChoiceNone(req) {
					t.Errorf("request %d forbids tools", i)
				}
			}
			sys := wr.system(reqs[0])
			for _, want := range []string{"run_code", "/workspace/sales.csv", "4.0 KiB", "date,product,region", "print", "matplotlib", "plt.show()"} {
				if !strings.Contains(sys, want) {
					t.Errorf("system prompt lacks %q:\n%s", want, sys)
				}
			}
			r1 := wr.toolResults(reqs[1])
			if len(r1) != 1 || !strings.Contains(r1["call_profit"], "West     52340.50") || !strings.Contains(r1["call_profit"], "[stdout]") {
				t.Errorf("request 2 tool results = %q", r1)
			}
			r2 := wr.toolResults(reqs[2])
			if len(r2) != 2 || !strings.Contains(r2["call_plot"], "[image 1: chart-1.png attached to the answer]") {
				t.Errorf("request 3 tool results = %q", r2)
			}
			if ids := wr.callIDs(reqs[2]); fmt.Sprint(ids) != "[call_profit call_plot]" {
				t.Errorf("request 3 call ids = %v", ids)
			}

			// The conversation survives JSON and continues: the history goes
			// back to the model with its calls and results.
			b, err := json.Marshal(res.Messages)
			if err != nil {
				t.Fatal(err)
			}
			var history []Message
			if err := json.Unmarshal(b, &history); err != nil {
				t.Fatal(err)
			}
			res2, err := Run(context.Background(), p, runner, history, "How many rows?", opts, nil)
			if err != nil {
				t.Fatalf("second Run: %v", err)
			}
			if res2.Answer != "There are 120 rows." || len(res2.Steps) != 1 || len(res2.Images) != 0 {
				t.Errorf("second answer %q, %d steps, %d images", res2.Answer, len(res2.Steps), len(res2.Images))
			}
			reqs = w.Requests()
			last := reqs[len(reqs)-1]
			if ids := wr.callIDs(last); fmt.Sprint(ids) != "[call_profit call_plot call_shape]" {
				t.Errorf("continued request call ids = %v", ids)
			}
			if r := wr.toolResults(last); len(r) != 3 || !strings.Contains(r["call_shape"], "(120, 7)") {
				t.Errorf("continued request tool results = %q", r)
			}
			if got := fmt.Sprint(last["messages"]); !strings.Contains(got, answer) || !strings.Contains(got, "How many rows?") {
				t.Errorf("continued request lacks the history: %s", got)
			}
		})
	}
}

// TestRoundBound: a model that never stops calling tools is cut off at the
// bound, asked once without tools, and when that gives no answer the answer
// is built from the last good output.
func TestRoundBound(t *testing.T) {
	for _, wr := range wires {
		for _, final := range []string{"ignores tool_choice", "fails", "answers"} {
			t.Run(wr.name+"/final call "+final, func(t *testing.T) {
				w := wr.server(t)
				w.SetNext(func(n int, req map[string]any) turn {
					if wr.toolChoiceNone(req) {
						switch final {
						case "fails":
							return turn{Status: http.StatusBadRequest}
						case "answers":
							return turn{Text: "From what I computed, the total is 2."}
						}
					}
					code := fmt.Sprintf("total = %d\nprint('total', total)", n+1)
					if n == 2 {
						code = "boom()"
					}
					return turn{Calls: []toolCall{{ID: fmt.Sprintf("call_%d", n), Name: ToolRunCode, Args: runCodeArgs(code)}}}
				})
				p := wr.provider(t, w)
				runner := &scriptedRunner{execs: map[string]*api.Execution{
					"total = 1\nprint('total', total)": {Logs: api.Logs{Stdout: []string{"total 1\n"}}},
					"total = 2\nprint('total', total)": {Logs: api.Logs{Stdout: []string{"total 2\n"}}},
				}}
				start := time.Now()
				res, err := Run(context.Background(), p, runner, nil, "Loop forever", Options{MaxRounds: 3}, nil)
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
				if time.Since(start) > 10*time.Second {
					t.Errorf("took %s", time.Since(start))
				}
				reqs := w.Requests()
				if len(reqs) != 4 || !wr.toolChoiceNone(reqs[3]) || wr.toolChoiceNone(reqs[2]) {
					t.Errorf("%d requests; the last forbids tools: %v", len(reqs), len(reqs) > 0 && wr.toolChoiceNone(reqs[len(reqs)-1]))
				}
				if len(reqs) == 4 && !strings.Contains(fmt.Sprint(reqs[3]["messages"]), "all 3 tool rounds allowed") {
					t.Errorf("the final request does not say why: %v", reqs[3]["messages"])
				}
				if len(res.Steps) != 3 || res.Rounds != 3 || !res.Truncated {
					t.Errorf("%d steps, %d rounds, truncated %v", len(res.Steps), res.Rounds, res.Truncated)
				}
				switch final {
				case "answers":
					if res.Answer != "From what I computed, the total is 2." {
						t.Errorf("answer = %q", res.Answer)
					}
				default:
					if !strings.HasPrefix(res.Answer, "I stopped after 3 tool rounds") || !strings.Contains(res.Answer, "total 2") {
						t.Errorf("answer = %q", res.Answer)
					}
				}
				lastMsg := res.Messages[len(res.Messages)-1]
				if lastMsg.Role != RoleAssistant || lastMsg.Text != res.Answer || len(lastMsg.ToolCalls) != 0 {
					t.Errorf("last message = %+v", lastMsg)
				}
				if len(res.Messages) != 1+3*2+1 {
					t.Errorf("%d messages", len(res.Messages))
				}
			})
		}
	}
}

// TestMalformedToolCalls: bad arguments and unknown tools are fed back as
// errors, and the loop goes on.
func TestMalformedToolCalls(t *testing.T) {
	for _, wr := range wires {
		t.Run(wr.name, func(t *testing.T) {
			badArgs := `{"code": "print(1)`
			wantBad := "not a valid JSON object"
			if wr.name == "anthropic" {
				// The SDK empties a tool_use input that is not JSON; a
				// wrong key is what reaches the loop.
				badArgs = `{"script": "print(1)"}`
				wantBad = "code argument is missing"
			}
			w := wr.server(t,
				turn{Calls: []toolCall{{ID: "call_bad", Name: ToolRunCode, Args: badArgs}, {ID: "call_tool", Name: "run_shell", Args: `{"cmd": "ls"}`}}},
				turn{Text: "Sorry, retrying.", Calls: []toolCall{{ID: "call_good", Name: ToolRunCode, Args: runCodeArgs("print(df.shape)")}}},
				turn{Text: "120 rows."},
			)
			p := wr.provider(t, w)
			runner := salesRunner()
			var ev events
			res, err := Run(context.Background(), p, runner, nil, "How many rows?", Options{}, ev.emit)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if res.Answer != "120 rows." || len(res.Steps) != 1 || res.Rounds != 2 {
				t.Errorf("answer %q, %d steps, %d rounds", res.Answer, len(res.Steps), res.Rounds)
			}
			if ev.count(EventToolError) != 2 {
				t.Errorf("%d tool errors", ev.count(EventToolError))
			}
			reqs := w.Requests()
			if len(reqs) != 3 {
				t.Fatalf("%d requests", len(reqs))
			}
			r := wr.toolResults(reqs[1])
			if !strings.Contains(r["call_bad"], "error:") || !strings.Contains(r["call_bad"], wantBad) {
				t.Errorf("bad arguments result = %q", r["call_bad"])
			}
			if !strings.Contains(r["call_tool"], `unknown tool "run_shell"`) {
				t.Errorf("unknown tool result = %q", r["call_tool"])
			}
			if got := runner.codes(); fmt.Sprint(got) != "[print(df.shape)]" {
				t.Errorf("ran %q", got)
			}
			if r := wr.toolResults(reqs[2]); !strings.Contains(r["call_good"], "(120, 7)") {
				t.Errorf("good result = %q", r["call_good"])
			}
		})
	}
}

// closedPort is a local port nothing listens on.
func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestProviderDown(t *testing.T) {
	addr := closedPort(t)
	cases := map[string]map[string]string{
		"openai":    {"OPENAI_BASE_URL": "http://" + addr + "/v1"},
		"anthropic": {"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": "http://" + addr},
	}
	for name, env := range cases {
		t.Run(name, func(t *testing.T) {
			p, err := ProviderFromEnv(func(k string) string { return env[k] })
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			_, err = Run(context.Background(), p, salesRunner(), nil, "hello?", Options{}, nil)
			if err == nil {
				t.Fatal("Run succeeded against a closed port")
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %s", d)
			}
			if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "http://"+addr) || !strings.Contains(err.Error(), "unreachable") {
				t.Errorf("err = %v", err)
			}
			t.Logf("%v", err)
		})
	}
}

// TestProviderHangs: a server that accepts and never answers is cut off by
// the turn's timeout.
func TestProviderHangs(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	for _, name := range []string{"openai", "anthropic"} {
		t.Run(name, func(t *testing.T) {
			var p Provider
			var err error
			if name == "openai" {
				p, err = NewOpenAI(OpenAIConfig{BaseURL: srv.URL + "/v1", Timeout: 300 * time.Millisecond, MaxRetries: -1})
			} else {
				p, err = NewAnthropic(AnthropicConfig{BaseURL: srv.URL, APIKey: "k", Timeout: 300 * time.Millisecond, MaxRetries: -1})
			}
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			_, err = p.Step(context.Background(), Request{Messages: []Message{{Role: RoleUser, Text: "hi"}}}, nil)
			if !errors.Is(err, errdefs.ErrTimeout) || !strings.Contains(err.Error(), "did not answer within") {
				t.Errorf("err = %v", err)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("took %s", d)
			}
		})
	}
}

func TestProviderHTTPError(t *testing.T) {
	for _, wr := range wires {
		t.Run(wr.name, func(t *testing.T) {
			w := wr.server(t, turn{Status: http.StatusUnauthorized})
			p := wr.provider(t, w)
			_, err := Run(context.Background(), p, salesRunner(), nil, "hi", Options{}, nil)
			if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "HTTP 401") || !strings.Contains(err.Error(), "scripted failure 401") {
				t.Errorf("err = %v", err)
			}
		})
	}
}

func TestProviderFromEnv(t *testing.T) {
	t.Run("nothing configured", func(t *testing.T) {
		_, err := ProviderFromEnv(func(string) string { return "" })
		if !errors.Is(err, errdefs.ErrUnavailable) {
			t.Fatalf("err = %v", err)
		}
		for _, want := range []string{"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL", "FORKBOX_MODEL", "http://localhost:11434/v1"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the error does not mention %s: %v", want, err)
			}
		}
	})
	cases := []struct {
		env          map[string]string
		name, model  string
		unavailable  bool
		errSubstring string
	}{
		{env: map[string]string{"ANTHROPIC_API_KEY": "k"}, name: "anthropic", model: DefaultAnthropicModel},
		{env: map[string]string{"OPENAI_API_KEY": "k"}, name: "openai", model: DefaultOpenAIModel},
		{env: map[string]string{"OPENAI_BASE_URL": "http://localhost:11434/v1", "FORKBOX_MODEL": "llama3.1"}, name: "openai", model: "llama3.1"},
		{env: map[string]string{"ANTHROPIC_API_KEY": "k", "OPENAI_API_KEY": "k"}, name: "anthropic", model: DefaultAnthropicModel},
		{env: map[string]string{"ANTHROPIC_API_KEY": "k", "OPENAI_API_KEY": "k", "FORKBOX_PROVIDER": "openai"}, name: "openai", model: DefaultOpenAIModel},
		{env: map[string]string{"ANTHROPIC_API_KEY": "k", "OPENAI_API_KEY": "k", "FORKBOX_MODEL": "gpt-4o"}, name: "openai", model: "gpt-4o"},
		{env: map[string]string{"ANTHROPIC_API_KEY": "k", "OPENAI_API_KEY": "k", "FORKBOX_MODEL": "claude-haiku-4-5"}, name: "anthropic", model: "claude-haiku-4-5"},
		{env: map[string]string{"ANTHROPIC_API_KEY": "k", "OPENAI_BASE_URL": "http://h/v1", "FORKBOX_MODEL": "openai:qwen2.5:7b"}, name: "openai", model: "qwen2.5:7b"},
		{env: map[string]string{"ANTHROPIC_API_KEY": "k", "FORKBOX_MODEL": "anthropic:my-model"}, name: "anthropic", model: "my-model"},
		{env: map[string]string{"ANTHROPIC_API_KEY": "k", "FORKBOX_MODEL": "openai:gpt-4o"}, unavailable: true, errSubstring: "OPENAI_BASE_URL"},
		{env: map[string]string{"OPENAI_API_KEY": "k", "FORKBOX_PROVIDER": "anthropic"}, unavailable: true, errSubstring: "ANTHROPIC_API_KEY"},
		{env: map[string]string{"OPENAI_API_KEY": "k", "FORKBOX_PROVIDER": "gemini"}, unavailable: true, errSubstring: "gemini"},
		{env: map[string]string{"OPENAI_BASE_URL": "localhost:11434"}, unavailable: true, errSubstring: "not an http(s) URL"},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.env), func(t *testing.T) {
			p, err := ProviderFromEnv(func(k string) string { return c.env[k] })
			if c.unavailable {
				if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), c.errSubstring) {
					t.Errorf("err = %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Name() != c.name || p.Model() != c.model {
				t.Errorf("got %s %s, want %s %s", p.Name(), p.Model(), c.name, c.model)
			}
		})
	}
}

func TestRequestModelOverride(t *testing.T) {
	for _, wr := range wires {
		t.Run(wr.name, func(t *testing.T) {
			w := wr.server(t, turn{Text: "hi"})
			p := wr.provider(t, w)
			if _, err := Run(context.Background(), p, salesRunner(), nil, "hi", Options{Model: "other-model"}, nil); err != nil {
				t.Fatal(err)
			}
			if got := w.Requests()[0]["model"]; got != "other-model" {
				t.Errorf("model = %v", got)
			}
		})
	}
}

func TestEmptyQuestion(t *testing.T) {
	_, err := Run(context.Background(), nil, salesRunner(), nil, "  ", Options{}, nil)
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("err = %v", err)
	}
}

func TestRunnerError(t *testing.T) {
	w := newOpenAIServer(t, turn{Calls: []toolCall{{ID: "c1", Name: ToolRunCode, Args: runCodeArgs("1")}}})
	p, err := NewOpenAI(OpenAIConfig{BaseURL: w.URL + "/v1"})
	if err != nil {
		t.Fatal(err)
	}
	gone := errdefs.NotFound("sandbox %q not found", "sb")
	runner := RunnerFunc(func(context.Context, string, func(Output)) (*api.Execution, error) { return nil, gone })
	_, err = Run(context.Background(), p, runner, nil, "hi", Options{}, nil)
	if !errors.Is(err, gone) || !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("err = %v", err)
	}
}

func TestFormatExecution(t *testing.T) {
	long := strings.Repeat("é", 10000) // 20000 bytes
	exec := &api.Execution{
		Logs: api.Logs{Stdout: []string{long}, Stderr: []string{"warning\n"}},
		Results: []map[string]any{
			{"png": tinyPNG},
			{"text": "   a  b\n0  1  2", "html": "<table/>"},
			{"text": "42", "is_main_result": true},
		},
		Error: &api.ExecutionError{Name: "ValueError", Value: "bad", Traceback: []string{"Traceback (most recent call last):", "ValueError: bad"}},
	}
	got := FormatExecution(exec, []Image{{FileName: "chart-3.png"}}, 1000)
	for _, want := range []string{"[stdout]\n", "bytes cut: the output was 20000 bytes", "[stderr]\nwarning\n", "[image 1: chart-3.png attached to the answer]",
		"[display]\n   a  b\n0  1  2\n", "[result]\n42\n", "[error]\nValueError: bad\n", "[traceback]\nTraceback (most recent call last):\nValueError: bad\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("lacks %q:\n%s", want, got)
		}
	}
	if len(got) > 2000 {
		t.Errorf("%d bytes", len(got))
	}
	if b, err := json.Marshal(got); err != nil || !json.Valid(b) || strings.ContainsRune(got, '\uFFFD') {
		t.Errorf("the cut split a character")
	}
	if got := FormatExecution(&api.Execution{}, nil, 0); !strings.Contains(got, "printed nothing") {
		t.Errorf("empty = %q", got)
	}
}

func TestRepairHistory(t *testing.T) {
	h := []Message{
		{Role: RoleTool, ToolResults: []ToolResult{{CallID: "stray"}}},
		{Role: RoleUser, Text: "q"},
		{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "a", Name: ToolRunCode}, {ID: "b", Name: ToolRunCode}}},
		{Role: RoleTool, ToolResults: []ToolResult{{CallID: "b", Content: "B"}, {CallID: "zzz"}}},
		{Role: RoleAssistant, Text: "answer"},
		{Role: RoleUser, Text: "q2"},
		{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "c", Name: ToolRunCode}}},
	}
	got := RepairHistory(h)
	b, _ := json.Marshal(got)
	want := `[{"role":"user","text":"q"},` +
		`{"role":"assistant","tool_calls":[{"id":"a","name":"run_code","arguments":""},{"id":"b","name":"run_code","arguments":""}]},` +
		`{"role":"tool","tool_results":[{"call_id":"a","content":"error: this call was not run","is_error":true},{"call_id":"b","content":"B"}]},` +
		`{"role":"assistant","text":"answer"},{"role":"user","text":"q2"},` +
		`{"role":"assistant","tool_calls":[{"id":"c","name":"run_code","arguments":""}]},` +
		`{"role":"tool","tool_results":[{"call_id":"c","content":"error: this call was not run","is_error":true}]}]`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
}

func TestDuplicateAndMissingCallIDs(t *testing.T) {
	w := newOpenAIServer(t,
		turn{Calls: []toolCall{{ID: "", Name: ToolRunCode, Args: runCodeArgs("print(df.shape)")}, {ID: "", Name: ToolRunCode, Args: runCodeArgs("print(df.shape)")}}},
		turn{Text: "done"},
	)
	p, err := NewOpenAI(OpenAIConfig{BaseURL: w.URL + "/v1"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), p, salesRunner(), nil, "q", Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	calls := res.Messages[1].ToolCalls
	if len(calls) != 2 || calls[0].ID == "" || calls[0].ID == calls[1].ID {
		t.Errorf("calls = %+v", calls)
	}
	if r := wires[0].toolResults(w.Requests()[1]); len(r) != 2 {
		t.Errorf("results = %q", r)
	}
}
