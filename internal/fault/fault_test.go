package fault

import "testing"

func TestPoint(t *testing.T) {
	t.Setenv("FORKBOX_FAULT", "a:b,c:d=panic")
	Point("other") // not named: nothing
	defer func() {
		if r := recover(); r == nil {
			t.Fatal("c:d=panic did not panic")
		}
	}()
	Point("c:d")
}
