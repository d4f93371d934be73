package runtime

import "testing"

func TestParseListen(t *testing.T) {
	for _, tc := range []struct {
		line  string
		port  int
		inode string
		ok    bool
	}{
		{"   0: 0100007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 123456 1 0000000000000000 100 0 0 10 0", 8000, "123456", true},
		{"   1: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 42 1 0000000000000000 100 0 0 10 0", 22, "42", true},
		// An established connection is not a listener.
		{"   2: 0100007F:1F40 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000  1000        0 99 1 0000000000000000 20 4 30 10 -1", 0, "", false},
		{"   3: 00000000000000000000000000000000:22B8 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 777 1 0000000000000000 100 0 0 10 0", 8888, "777", true},
		{"garbage", 0, "", false},
		{"   4: 0100007F:ZZZZ 00000000:0000 0A 0 0 0 0 0 5", 0, "", false},
	} {
		port, inode, ok := parseListen(tc.line)
		if port != tc.port || inode != tc.inode || ok != tc.ok {
			t.Errorf("parseListen(%q) = %d %q %v; want %d %q %v", tc.line, port, inode, ok, tc.port, tc.inode, tc.ok)
		}
	}
}
