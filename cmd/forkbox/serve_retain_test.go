package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/forkbox/forkbox/internal/daemon"
)

func TestParseRetention(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"0": 0, "0d": 0, "7d": 7 * 24 * time.Hour, "72h": 72 * time.Hour, "90m": 90 * time.Minute, " 2d ": 48 * time.Hour, "1h30m": 90 * time.Minute,
	} {
		if got, err := parseRetention(in); err != nil || got != want {
			t.Errorf("parseRetention(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "forever", "-1h", "-2d", "1.5d", "7days", "d", "99999d"} {
		if got, err := parseRetention(in); err == nil {
			t.Errorf("parseRetention(%q) = %v, want an error", in, got)
		}
	}
}

// serve's --retain-terminated defaults to a week, takes FORKBOX_RETAIN_TERMINATED,
// and refuses a malformed one at start unless the flag overrides it.
func TestRetainTerminatedFlag(t *testing.T) {
	flagOf := func() (string, error) {
		cmd := serveCmd()
		f := cmd.Flags().Lookup("retain-terminated")
		if f == nil {
			t.Fatal("serve has no --retain-terminated")
		}
		return f.Value.String(), cmd.PreRunE(cmd, nil)
	}
	t.Setenv("FORKBOX_RETAIN_TERMINATED", "")
	if v, err := flagOf(); err == nil || !strings.Contains(err.Error(), "FORKBOX_RETAIN_TERMINATED") {
		t.Errorf("an empty FORKBOX_RETAIN_TERMINATED: %q, %v; want an error naming it", v, err)
	}
	t.Setenv("FORKBOX_RETAIN_TERMINATED", "36h")
	if v, err := flagOf(); v != "36h0m0s" || err != nil {
		t.Errorf("FORKBOX_RETAIN_TERMINATED=36h: %q, %v", v, err)
	}
	t.Setenv("FORKBOX_RETAIN_TERMINATED", "0")
	if v, err := flagOf(); v != "0s" || err != nil {
		t.Errorf("FORKBOX_RETAIN_TERMINATED=0: %q, %v", v, err)
	}
	t.Setenv("FORKBOX_RETAIN_TERMINATED", "soon")
	cmd := serveCmd()
	if err := cmd.PreRunE(cmd, nil); err == nil {
		t.Error("FORKBOX_RETAIN_TERMINATED=soon was accepted")
	}
	if err := cmd.Flags().Set("retain-terminated", "3d"); err != nil {
		t.Fatal(err)
	}
	if err := cmd.PreRunE(cmd, nil); err != nil {
		t.Errorf("--retain-terminated over a bad environment value: %v", err)
	}
	if err := cmd.Flags().Set("retain-terminated", "-1h"); err == nil {
		t.Error("--retain-terminated -1h was accepted")
	}
}

func TestRetainTerminatedDefault(t *testing.T) {
	t.Setenv("FORKBOX_RETAIN_TERMINATED", "") // restored after the test
	os.Unsetenv("FORKBOX_RETAIN_TERMINATED")
	cmd := serveCmd()
	if v := cmd.Flags().Lookup("retain-terminated").Value.String(); v != "7d" || daemon.DefaultRetainTerminated != 7*24*time.Hour {
		t.Errorf("default --retain-terminated = %q", v)
	}
}
