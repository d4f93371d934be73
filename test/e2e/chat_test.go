package e2e

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/chat/chattest"
	"github.com/forkbox/forkbox/internal/errdefs"
)

// salesCSV is a sales table (date, product, region, units_sold, revenue,
// cost) and, computed here in Go, the profit of each region.
func salesCSV() (string, map[string]float64) {
	var b strings.Builder
	b.WriteString("date,product,region,units_sold,revenue,cost\n")
	profit := map[string]float64{}
	regions := []string{"North", "South", "East", "West"}
	products := []string{"widget", "gadget", "gizmo"}
	for i := 0; i < 180; i++ {
		day := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, i)
		region, product := regions[i%4], products[i%3]
		units := 5 + (i*7)%23
		revenue := float64(units) * (19.5 + float64(i%5))
		cost := float64(units) * (11.25 + float64(i%3))
		profit[region] += revenue - cost
		fmt.Fprintf(&b, "%s,%s,%s,%d,%.2f,%.2f\n", day.Format("2006-01-02"), product, region, units, revenue, cost)
	}
	return b.String(), profit
}

// The scripted analyst's code: the numbers come from running it.
const (
	profitCode = "import pandas as pd\ndf = pd.read_csv('/workspace/sales.csv')\n" +
		"df['profit'] = df['revenue'] - df['cost']\nby_region = df.groupby('region')['profit'].sum().round(2)\n" +
		"for region, p in by_region.items():\n    print(f'{region} {p:.2f}')"
	plotCode = "import matplotlib.pyplot as plt\ndf['date'] = pd.to_datetime(df['date'])\n" +
		"monthly = df.set_index('date')['revenue'].resample('MS').sum()\nmonthly.index = monthly.index.strftime('%Y-%m')\n" +
		"fig, ax = plt.subplots()\nmonthly.plot(kind='bar', ax=ax, title='Monthly revenue')\nplt.tight_layout()\nplt.show()"
	bestCode  = "print('best', by_region.idxmax())"
	countCode = "print('rows', len(df))"
)

var numberAfter = func(word string) *regexp.Regexp { return regexp.MustCompile(word + ` (-?[0-9]+(?:\.[0-9]+)?)`) }

// lastToolText returns the content of the last tool message of an OpenAI
// chat-completions request.
func lastToolText(req map[string]any) string {
	msgs, _ := req["messages"].([]any)
	for i := len(msgs) - 1; i >= 0; i-- {
		m, _ := msgs[i].(map[string]any)
		if m["role"] == "tool" {
			if s, ok := m["content"].(string); ok {
				return s
			}
			parts, _ := m["content"].([]any)
			var b strings.Builder
			for _, p := range parts {
				pm, _ := p.(map[string]any)
				s, _ := pm["text"].(string)
				b.WriteString(s)
			}
			return b.String()
		}
	}
	return ""
}

// lastUserText is the text of the last user message.
func lastUserText(req map[string]any) string {
	msgs, _ := req["messages"].([]any)
	for i := len(msgs) - 1; i >= 0; i-- {
		m, _ := msgs[i].(map[string]any)
		if m["role"] == "user" {
			s, _ := m["content"].(string)
			return s
		}
	}
	return ""
}

// toolsSinceUser counts the tool messages after the last user message.
func toolsSinceUser(req map[string]any) int {
	msgs, _ := req["messages"].([]any)
	n := 0
	for i := len(msgs) - 1; i >= 0; i-- {
		m, _ := msgs[i].(map[string]any)
		if m["role"] == "user" {
			break
		}
		if m["role"] == "tool" {
			n++
		}
	}
	return n
}

func scriptCall(id, code string) []chattest.ToolCall {
	return []chattest.ToolCall{{ID: id, Name: "run_code", Args: chattest.RunCodeArgs(code)}}
}

// analystScript is a scripted model that answers the three questions of the
// tests by running code and quoting what the code printed.
func analystScript(n int, req map[string]any) chattest.Turn {
	q, done := lastUserText(req), toolsSinceUser(req)
	switch {
	case strings.Contains(q, "profit by region"):
		switch done {
		case 0:
			return chattest.Turn{Text: "Let me compute that.", Calls: scriptCall("c_profit", profitCode)}
		case 1:
			return chattest.Turn{Calls: scriptCall("c_plot", plotCode)}
		}
		// The first tool result holds the printed profits.
		msgs, _ := req["messages"].([]any)
		var first string
		for _, m := range msgs {
			if mm, _ := m.(map[string]any); mm["role"] == "tool" {
				first, _ = mm["content"].(string)
				break
			}
		}
		m := numberAfter("North").FindStringSubmatch(first)
		if m == nil {
			return chattest.Turn{Text: "I could not read the result: " + first}
		}
		return chattest.Turn{Text: "North made a profit of " + m[1] + ". The chart shows monthly revenue."}
	case strings.Contains(q, "best region"):
		if done == 0 {
			return chattest.Turn{Calls: scriptCall("c_best", bestCode)}
		}
		return chattest.Turn{Text: "The best region is " + strings.TrimSpace(strings.TrimPrefix(firstLine(lastToolText(req), "best"), "best")) + "."}
	case strings.Contains(q, "how many rows"):
		if done == 0 {
			return chattest.Turn{Calls: scriptCall("c_rows", countCode)}
		}
		return chattest.Turn{Text: "There are " + strings.TrimSpace(strings.TrimPrefix(firstLine(lastToolText(req), "rows"), "rows")) + " rows."}
	}
	return chattest.Turn{Text: "I do not know that question."}
}

// firstLine returns the first line of s that starts with prefix.
func firstLine(s, prefix string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), prefix) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

// startChatDaemon starts a daemon whose model is the scripted server.
func startChatDaemon(t *testing.T, env ...string) *daemon {
	t.Helper()
	d, err := startDaemon(filepath.Join(t.TempDir(), "data"), env)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.deleteAll(); d.stop() })
	return d
}

// TestChatAnalyst: the sales CSV, a question answered with the number the
// code computed and the chart it drew; a second question reuses the
// sandbox's variables; after a suspend the next question resumes it.
func TestChatAnalyst(t *testing.T) {
	needRoot(t)
	model := chattest.NewOpenAI(t)
	model.SetNext(analystScript)
	d := startChatDaemon(t, "OPENAI_BASE_URL="+model.URL+"/v1", "OPENAI_API_KEY=test-key", "FORKBOX_MODEL=scripted-analyst")
	ctx := ctxT(t)
	csvText, profit := salesCSV()

	up, err := d.c.UploadFile(ctx, "sales.csv", strings.NewReader(csvText), "")
	if err != nil {
		t.Fatal(err)
	}
	if up.Rows != 180 || strings.Join(up.Columns, ",") != "date,product,region,units_sold,revenue,cost" {
		t.Fatalf("upload: %+v", up)
	}
	var kinds []api.ChatEventType
	var text strings.Builder
	res, err := d.c.ChatStream(ctx, api.ChatRequest{Question: "What is the profit by region? Plot monthly revenue.", FileIDs: []string{up.ID}},
		func(ev api.ChatEvent) {
			kinds = append(kinds, ev.Type)
			if ev.Type == api.ChatEventText {
				text.WriteString(ev.Text)
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	m := numberAfter("North made a profit of").FindStringSubmatch(res.Answer)
	if m == nil {
		t.Fatalf("answer without the number: %q", res.Answer)
	}
	got, _ := strconv.ParseFloat(m[1], 64)
	if math.Abs(got-profit["North"]) > 0.01 {
		t.Fatalf("answer says North %v, the data says %.2f", got, profit["North"])
	}
	if len(res.Images) != 1 || len(res.Steps) != 2 || res.Steps[0].Code != profitCode || res.Steps[1].Code != plotCode {
		t.Fatalf("images %d, steps %+v", len(res.Images), res.Steps)
	}
	png, err := base64.StdEncoding.DecodeString(res.Images[0].PNGBase64)
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) || res.Images[0].FileName != "chart-1.png" {
		t.Fatalf("image: %s %v", res.Images[0].FileName, err)
	}
	for _, st := range res.Steps {
		if st.Execution == nil || st.Execution.Error != nil {
			t.Fatalf("step failed: %+v", st.Execution)
		}
	}
	stdout := strings.Join(res.Steps[0].Execution.Logs.Stdout, "")
	regions := make([]string, 0, len(profit))
	for r := range profit {
		regions = append(regions, r)
	}
	sort.Strings(regions)
	for _, r := range regions {
		if !strings.Contains(stdout, fmt.Sprintf("%s %.2f", r, math.Round(profit[r]*100)/100)) {
			t.Fatalf("profit output %q lacks %s %.2f", stdout, r, profit[r])
		}
	}
	for _, want := range []api.ChatEventType{api.ChatEventConversation, api.ChatEventText, api.ChatEventToolCall, api.ChatEventExecution, api.ChatEventAnswer} {
		if !slices.Contains(kinds, want) {
			t.Fatalf("stream lacks %q events: %v", want, kinds)
		}
	}
	if !strings.Contains(text.String(), "North made a profit") {
		t.Fatalf("streamed text: %q", text.String())
	}

	// The second question uses by_region, defined by the first.
	best := regions[0]
	for _, r := range regions {
		if profit[r] > profit[best] {
			best = r
		}
	}
	res2, err := d.c.Chat(ctx, api.ChatRequest{Question: "Which is the best region?", ConversationID: res.ConversationID})
	if err != nil {
		t.Fatal(err)
	}
	if res2.Sandbox != res.Sandbox || !strings.Contains(res2.Answer, "best region is "+best) {
		t.Fatalf("second answer %q (sandbox %s vs %s)", res2.Answer, res2.Sandbox, res.Sandbox)
	}

	// Suspended, the sandbox resumes on the next question with df intact.
	if _, err := d.c.Suspend(ctx, res.Sandbox); err != nil {
		t.Fatal(err)
	}
	if sb, _ := d.c.GetSandbox(ctx, res.Sandbox); sb.State != api.StateSuspended {
		t.Fatalf("after suspend: %s", sb.State)
	}
	res3, err := d.c.Chat(ctx, api.ChatRequest{Question: "And how many rows are there?", ConversationID: res.ConversationID})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res3.Answer, "There are 180 rows") {
		t.Fatalf("after resume: %q", res3.Answer)
	}
	if sb, _ := d.c.GetSandbox(ctx, res.Sandbox); sb.State != api.StateRunning {
		t.Fatalf("after the question: %s", sb.State)
	}

	conv, err := d.c.GetConversation(ctx, res.ConversationID)
	if err != nil {
		t.Fatal(err)
	}
	if len(conv.Turns) != 3 || len(conv.Turns[0].Images) != 1 || len(conv.Files) != 1 || conv.Files[0].Name != "sales.csv" {
		t.Fatalf("stored conversation: %d turns, files %+v", len(conv.Turns), conv.Files)
	}
	list, err := d.c.ListConversations(ctx)
	if err != nil || len(list) != 1 || list[0].ID != res.ConversationID {
		t.Fatalf("conversations: %+v %v", list, err)
	}
}

// TestChatAnthropic: the same loop through Anthropic's messages protocol.
func TestChatAnthropic(t *testing.T) {
	needRoot(t)
	model := chattest.NewAnthropic(t,
		chattest.Turn{Text: "Computing.", Calls: scriptCall("toolu_1", "print('sum', sum(range(10)))")},
		chattest.Turn{Text: "The sum is 45."},
	)
	d := startChatDaemon(t, "ANTHROPIC_BASE_URL="+model.URL, "ANTHROPIC_API_KEY=test-key", "FORKBOX_MODEL=claude-scripted")
	res, err := d.c.Chat(ctxT(t), api.ChatRequest{Question: "What is the sum of 0..9?"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Answer != "The sum is 45." || len(res.Steps) != 1 || strings.Join(res.Steps[0].Execution.Logs.Stdout, "") != "sum 45\n" {
		t.Fatalf("answer %q steps %+v", res.Answer, res.Steps)
	}
	reqs := model.Requests()
	if len(reqs) != 2 || !strings.Contains(fmt.Sprint(reqs[1]["messages"]), "sum 45") {
		t.Fatalf("the execution was not fed back: %d requests", len(reqs))
	}
}

// TestChatBadInput: no provider → 503 saying how to configure one; a
// provider that is down → a clear error, fast; empty question 400; unknown
// conversation 404; non-CSV and oversized uploads refused.
func TestChatBadInput(t *testing.T) {
	needRoot(t)
	ctx := ctxT(t)
	_, err := shared.c.Chat(ctx, api.ChatRequest{Question: "hello?"})
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "OPENAI_API_KEY") {
		t.Fatalf("no provider: %v", err)
	}
	d := startChatDaemon(t, "OPENAI_BASE_URL=http://127.0.0.1:1/v1", "OPENAI_API_KEY=x", "FORKBOX_MAX_UPLOAD_MB=1")
	start := time.Now()
	_, err = d.c.Chat(ctx, api.ChatRequest{Question: "hello?"})
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("provider down: %v", err)
	}
	t.Logf("provider down answered in %s", time.Since(start))
	if _, err := d.c.Chat(ctx, api.ChatRequest{Question: "  "}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("empty question: %v", err)
	}
	if _, err := d.c.Chat(ctx, api.ChatRequest{Question: "hi", ConversationID: "conv_nope"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("unknown conversation: %v", err)
	}
	if _, err := d.c.UploadFile(ctx, "notes.txt", strings.NewReader("a,b\n1,2\n"), ""); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "CSV") {
		t.Fatalf("non-CSV name: %v", err)
	}
	if _, err := d.c.UploadFile(ctx, "bin.csv", bytes.NewReader([]byte{0x89, 'P', 'N', 'G', 0, 0, 1}), ""); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "not a CSV") {
		t.Fatalf("binary CSV: %v", err)
	}
	big := "a,b\n" + strings.Repeat("1234567,7654321\n", 90_000) // ~1.4 MiB
	if _, err := d.c.UploadFile(ctx, "big.csv", strings.NewReader(big), ""); !errors.Is(err, errdefs.ErrTooLarge) || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("oversized CSV: %v", err)
	}
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}
