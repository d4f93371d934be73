package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/chat/chattest"
)

// The analyst's code for the two questions of the sales example: the
// numbers in its answers come from running it.
const (
	cpqProfitCode = "import pandas as pd\ndf = pd.read_csv('/workspace/sales.csv')\n" +
		"df['profit'] = df['revenue'] - df['cost']\nby_region = df.groupby('region')['profit'].sum().round(2)\n" +
		"for region, p in by_region.items():\n    print(f'{region} {p:.2f}')"
	cpqPlotCode = "import matplotlib.pyplot as plt\ndf['date'] = pd.to_datetime(df['date'])\n" +
		"monthly = df.set_index('date')['revenue'].resample('MS').sum()\n" +
		"fig, ax = plt.subplots()\nmonthly.plot(kind='bar', ax=ax, title='Monthly revenue')\nplt.tight_layout()\nplt.show()"
	cpqBestCode = "print('best', by_region.idxmax())"
)

// cpqScript is the scripted model: "profit" questions run the profit and
// plot code, "best" questions the best-region code, then answer.
func cpqScript(_ int, req map[string]any) chattest.Turn {
	msgs, _ := req["messages"].([]any)
	question, tools := "", 0
	for i := len(msgs) - 1; i >= 0; i-- {
		m, _ := msgs[i].(map[string]any)
		if m["role"] == "tool" {
			tools++
		}
		if m["role"] == "user" {
			question, _ = m["content"].(string)
			break
		}
	}
	call := func(id, code string) chattest.Turn {
		return chattest.Turn{Calls: []chattest.ToolCall{{ID: id, Name: "run_code", Args: chattest.RunCodeArgs(code)}}}
	}
	switch {
	case strings.Contains(question, "profit") && tools == 0:
		return call("c_profit", cpqProfitCode)
	case strings.Contains(question, "profit") && tools == 1:
		return call("c_plot", cpqPlotCode)
	case strings.Contains(question, "best") && tools == 0:
		return call("c_best", cpqBestCode)
	}
	return chattest.Turn{Text: "Done: see the numbers above."}
}

// cpqSalesCSV is the seed's sales table (date, product, region, units_sold,
// revenue, cost): 180 days, as the analyst's end-to-end test uses.
func cpqSalesCSV() string {
	var b strings.Builder
	b.WriteString("date,product,region,units_sold,revenue,cost\n")
	regions := []string{"North", "South", "East", "West"}
	products := []string{"widget", "gadget", "gizmo"}
	for i := range 180 {
		day := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, i)
		units := 5 + (i*7)%23
		fmt.Fprintf(&b, "%s,%s,%s,%d,%.2f,%.2f\n", day.Format("2006-01-02"), products[i%3], regions[i%4], units,
			float64(units)*(19.5+float64(i%5)), float64(units)*(11.25+float64(i%3)))
	}
	return b.String()
}

// processCPUSeconds is a process's user + system CPU time.
func processCPUSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

// queryCost is what one analyst question cost.
type queryCost struct {
	wall       time.Duration
	sandboxCPU float64 // the sandbox's CPU seconds during the question
	lifeCPU    float64 // its CPU seconds since it started, at the answer
	daemonCPU  float64 // the daemon's CPU seconds during the question
	mibSeconds float64 // the sandbox's memory integrated over the question
	peakMiB    float64
}

// BenchmarkCostPerQuery: the sales example through the analyst (POST
// /v1/chat, a scripted model, so only forkbox's side is measured): a new
// conversation's first question (profit by region and a plot: pandas
// import, CSV read, groupby, a matplotlib chart) and a follow-up in the same
// conversation (best region), 5 conversations each on a daemon with the
// default pool and on one without, alternating. Per question: wall time,
// the sandbox's CPU seconds (cgroup) during the question and over its life
// so far, the daemon's CPU seconds, and memory-MiB-seconds (the sandbox's
// cgroup memory sampled every 50 ms, integrated over the question).
func BenchmarkCostPerQuery(b *testing.B) {
	hideNsPerOp(b)
	loadStart := loadAvg()
	model := chattest.NewOpenAI(b)
	model.SetNext(cpqScript)
	env := []string{"OPENAI_BASE_URL=" + model.URL + "/v1", "OPENAI_API_KEY=test-key", "FORKBOX_MODEL=scripted-analyst"}
	pooled := startDaemonWith(b, daemonOpts{args: []string{"--default-pool=2"}, env: env})
	cold := startDaemonWith(b, daemonOpts{env: env})
	ctx := context.Background()
	csv := cpqSalesCSV()

	// ask asks one question; known is the conversation's sandbox when it
	// has one already (a follow-up), read once before the question.
	ask := func(d *daemon, q api.ChatRequest, known string) (queryCost, *api.ChatResponse) {
		var (
			mu      sync.Mutex
			sandbox = known
			c       queryCost
			cpu0    = -1.0
			last    time.Time
			lastMiB float64
		)
		// sample reads the sandbox's usage and adds to the integral.
		sample := func(id string) {
			sb, err := d.client.GetSandbox(ctx, id)
			now := time.Now()
			if err != nil || sb.Usage == nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			mib := float64(sb.Usage.MemoryBytes) / (1 << 20)
			if cpu0 < 0 {
				cpu0 = sb.Usage.CPUSeconds
			} else {
				c.mibSeconds += (mib + lastMiB) / 2 * now.Sub(last).Seconds()
			}
			last, lastMiB = now, mib
			c.peakMiB = max(c.peakMiB, mib)
		}
		if known != "" {
			sample(known)
		}
		stop := make(chan struct{})
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			t := time.NewTicker(50 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
				}
				mu.Lock()
				id := sandbox
				mu.Unlock()
				if id != "" {
					sample(id)
				}
			}
		}()
		daemon0 := processCPUSeconds(d.pid)
		t0 := time.Now()
		res, err := d.client.ChatStream(ctx, q, func(ev api.ChatEvent) {
			if ev.Sandbox != "" {
				mu.Lock()
				sandbox = ev.Sandbox
				mu.Unlock()
			}
		})
		c.wall = time.Since(t0)
		close(stop)
		<-sampled
		if err != nil {
			b.Fatalf("chat: %v\n%s", err, d.logTail(20))
		}
		c.daemonCPU = processCPUSeconds(d.pid) - daemon0
		sample(res.Sandbox) // the answer's end closes the integral
		sb, err := d.client.GetSandbox(ctx, res.Sandbox)
		if err != nil || sb.Usage == nil {
			b.Fatalf("sandbox of the conversation: %v", err)
		}
		c.lifeCPU = sb.Usage.CPUSeconds
		switch {
		case known == "" && d == cold:
			// Made within the question: all of its CPU is the question's.
			c.sandboxCPU = sb.Usage.CPUSeconds
		case cpu0 >= 0:
			c.sandboxCPU = sb.Usage.CPUSeconds - cpu0
		}
		return c, res
	}
	type row struct{ first, followUp []queryCost }
	rows := map[*daemon]*row{pooled: {}, cold: {}}
	const n = 5
	for i := range n + 1 { // the first round warms up
		for _, d := range []*daemon{pooled, cold} {
			if d == pooled {
				waitDefaultPool(b, pooled, 2)
			}
			up, err := d.client.UploadFile(ctx, "sales.csv", strings.NewReader(csv), "")
			if err != nil {
				b.Fatal(err)
			}
			c1, res := ask(d, api.ChatRequest{Question: "What is the profit by region? Plot monthly revenue.", FileIDs: []string{up.ID}}, "")
			if len(res.Images) != 1 || len(res.Steps) != 2 {
				b.Fatalf("first answer: %d images, %d steps", len(res.Images), len(res.Steps))
			}
			c2, res2 := ask(d, api.ChatRequest{Question: "Which is the best region?", ConversationID: res.ConversationID}, res.Sandbox)
			if len(res2.Steps) != 1 || res2.Steps[0].Execution == nil || res2.Steps[0].Execution.Error != nil {
				b.Fatalf("follow-up: %+v", res2.Steps)
			}
			d.deleteSandbox(b, res.Sandbox)
			if i > 0 {
				rows[d].first = append(rows[d].first, c1)
				rows[d].followUp = append(rows[d].followUp, c2)
			}
		}
	}
	loadEnd := loadAvg()
	tableHeader("cost per analyst question (sales example, scripted model)", "question", "daemon", "n",
		"wall p50 ms", "sandbox CPU-s p50", "sandbox CPU-s since start p50", "daemon CPU-s p50", "memory MiB-s p50", "peak MiB p50")
	for _, q := range []string{"first (profit + plot, new conversation)", "follow-up (best region)"} {
		for _, d := range []*daemon{pooled, cold} {
			cs := rows[d].first
			if strings.HasPrefix(q, "follow") {
				cs = rows[d].followUp
			}
			var wall samples
			var scpu, life, dcpu, mibs, peak values
			for _, c := range cs {
				wall = append(wall, c.wall)
				scpu, life, dcpu = append(scpu, c.sandboxCPU), append(life, c.lifeCPU), append(dcpu, c.daemonCPU)
				mibs, peak = append(mibs, c.mibSeconds), append(peak, c.peakMiB)
			}
			name := "default pool of 2"
			if d == cold {
				name = "no pool"
			}
			tableRow(q, name, fmt.Sprint(len(cs)), f(wall.p50()), fmt.Sprintf("%.2f", scpu.p50()), fmt.Sprintf("%.2f", life.p50()),
				fmt.Sprintf("%.2f", dcpu.p50()), f(mibs.p50()), f(peak.p50()))
			tag := map[bool]string{true: "pool-", false: "cold-"}[d == pooled] + map[bool]string{true: "first-", false: "followup-"}[!strings.HasPrefix(q, "follow")]
			b.ReportMetric(wall.p50(), tag+"wall-p50-ms")
			b.ReportMetric(scpu.p50(), tag+"cpu-s")
			b.ReportMetric(mibs.p50(), tag+"MiB-s")
		}
	}
	fmt.Printf("load average before %s, after %s\n", loadStart, loadEnd)
}
