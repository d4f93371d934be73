package analyst

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckCSV(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cols, rows, err := checkCSV(write("ok.csv", "date,region,revenue\n2024-01-01,North,10.5\n2024-01-02,\"South, East\",3\n"))
	if err != nil || strings.Join(cols, "|") != "date|region|revenue" || rows != 2 {
		t.Fatalf("ok.csv: %v %d %v", cols, rows, err)
	}
	// A character cut by the end of the 64 KiB head is whole in the file.
	straddle := "name\n" + strings.Repeat("a", 64<<10-len("name\n")-1) + "é\n"
	if _, rows, err := checkCSV(write("straddle.csv", straddle)); err != nil || rows != 1 {
		t.Fatalf("a character across the end of the head: %d rows, %v", rows, err)
	}
	for name, body := range map[string]string{
		"empty.csv":  "",
		"binary.csv": "a,b\n\x00\x01,2\n",
		"latin1.csv": "name\ncaf\xe9\n",
		// Not UTF-8 in its last byte: the whole file is in the head, so
		// nothing of it may pass as the start of a cut character.
		"latin1-end.csv": "name\ncaf\xe9",
		// Not UTF-8 past the reader's default 4 KiB buffer, within the
		// 64 KiB head.
		"latin1-far.csv": "name\n" + strings.Repeat("abc\n", 2000) + "caf\xe9\n",
		"ragged.csv":     "a,b\n1,2,3\n",
		"quote.csv":      "a,b\n\"unterminated,2\n",
		"nocols.csv":     "\n",
	} {
		if _, _, err := checkCSV(write(name, body)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestCleanName(t *testing.T) {
	for in, want := range map[string]string{
		"sales.csv":           "sales.csv",
		"../../etc/x.csv":     "x.csv",
		`C:\data\Q1 2024.csv`: "Q1_2024.csv",
		".hidden.csv":         "hidden.csv",
		"...":                 "data",
	} {
		if got := cleanName(in); got != want {
			t.Errorf("cleanName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestTitleOf(t *testing.T) {
	if got := titleOf("  What is\n the profit?  "); got != "What is the profit?" {
		t.Fatalf("%q", got)
	}
	long := strings.Repeat("é", 50)
	if got := titleOf(long); !strings.HasSuffix(got, "…") || len(got) > 64 {
		t.Fatalf("%q", got)
	}
}
