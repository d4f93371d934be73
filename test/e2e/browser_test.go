package e2e

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/forkbox/forkbox/internal/chat/chattest"
)

// TestBrowserUI drives the web UI in Debian's Chromium (Playwright, from
// test/browser) against a real daemon whose model is the scripted analyst:
// upload the sales CSV, ask, see the streamed answer and the chart; run a
// code cell; fork and see the snapshot graph grow; at laptop and phone
// widths. A second daemon without a model shows how the UI says so.
// Screenshots go to test/browser/artifacts (or $ARTIFACTS_DIR).
// make setup installs Chromium, Node's packages and everything else.
func TestBrowserUI(t *testing.T) {
	needRoot(t)
	browserDir, err := filepath.Abs("../browser")
	if err != nil {
		t.Fatal(err)
	}
	for _, need := range []string{"/usr/bin/chromium", filepath.Join(browserDir, "node_modules", "playwright-core")} {
		if _, err := os.Stat(need); err != nil {
			t.Fatalf("%s is missing: run `make setup` (scripts/setup.sh installs Chromium and the browser tests' npm packages)", need)
		}
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is missing: %v", err)
	}
	model := chattest.NewOpenAI(t)
	model.SetNext(analystScript)
	d := startChatDaemon(t, "OPENAI_BASE_URL="+model.URL+"/v1", "OPENAI_API_KEY=test-key", "FORKBOX_MODEL=scripted-analyst")
	// A second daemon has no model: the UI says so once, on load.
	noModel := startChatDaemon(t, "OPENAI_BASE_URL=", "OPENAI_API_KEY=", "ANTHROPIC_API_KEY=", "FORKBOX_MODEL=")

	csvText, profit := salesCSV()
	csvPath := filepath.Join(t.TempDir(), "sales.csv")
	if err := os.WriteFile(csvPath, []byte(csvText), 0o644); err != nil {
		t.Fatal(err)
	}
	artifacts := os.Getenv("ARTIFACTS_DIR")
	if artifacts == "" {
		artifacts = filepath.Join(browserDir, "artifacts")
	}
	args := []string{"--test", "--test-reporter=spec"}
	// BROWSER_TESTS runs only the scenarios whose names match (a regular
	// expression), e.g. BROWSER_TESTS=notebook.
	if p := os.Getenv("BROWSER_TESTS"); p != "" {
		args = append(args, "--test-name-pattern="+p)
	}
	cmd := exec.Command(node, append(args, browserDir)...)
	cmd.Dir = browserDir
	cmd.Env = append(os.Environ(),
		"FORKBOX_URL=http://"+d.addr,
		"NO_MODEL_URL=http://"+noModel.addr,
		"SALES_CSV="+csvPath,
		fmt.Sprintf("EXPECT_ANSWER_TEXT=North made a profit of %.2f", math.Round(profit["North"]*100)/100),
		"ARTIFACTS_DIR="+artifacts,
	)
	out, err := cmd.CombinedOutput()
	t.Logf("browser tests:\n%s", out)
	if err != nil {
		t.Fatalf("browser tests failed: %v\ndaemon log:\n%s", err, d.logTail())
	}
	t.Logf("screenshots in %s", artifacts)
}
