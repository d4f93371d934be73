package runtime

import (
	"strings"
	"testing"
)

func TestCRIULogHelpers(t *testing.T) {
	log := []byte("Warn  (criu/sk-unix.c:1): Unix socket 7 is external\n" +
		"Error (criu/util.c:1534): rlimit: Can't setup RLIMIT_NOFILE for self: Operation not permitted\n" +
		"Error (criu/bfd.c:131): bfd: Error flushing image: No space left on device\n" +
		"Error (criu/cr-dump.c:2008): Dumping FAILED.\n")
	// Only an error names the agent's connection: a warning does not.
	if errorLineWith(log, "Unix socket") {
		t.Error("a warning taken for an error")
	}
	if !errorLineWith([]byte("Error (criu/sk-unix.c:418): Unix socket 1 without peer 2\n"), "Unix socket") {
		t.Error("the error about a Unix socket is not found")
	}
	if got := noSpaceLine(log); got != "Error (criu/bfd.c:131): bfd: Error flushing image: No space left on device" {
		t.Errorf("noSpaceLine: %q", got)
	}
	if noSpaceLine([]byte("Error (x): other\n")) != "" {
		t.Error("a full disk where there is none")
	}
	long := strings.Repeat("Error (criu/x.c:1): filler\n", maxLogText/10)
	if got := logText([]byte(long + "Error (criu/cr-dump.c:2008): Dumping FAILED.\n")); len(got) > maxLogText || !strings.HasSuffix(got, "Dumping FAILED.") {
		t.Errorf("logText keeps %d bytes, ending %q", len(got), got[max(0, len(got)-40):])
	}
}
