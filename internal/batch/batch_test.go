package batch

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestWriter(t *testing.T) {
	var (
		mu   sync.Mutex
		got  []int
		fail = true
	)
	var failures int
	w := New(Config[int]{
		Write: func(_ context.Context, b []int) error {
			mu.Lock()
			defer mu.Unlock()
			if fail {
				fail = false
				return errors.New("disk full")
			}
			got = append(got, b...)
			return nil
		},
		OnError:  func(n int, err error) { failures++ },
		Interval: time.Hour, // only Flush and Close write
	})
	for i := range 5 {
		w.Add(i)
	}
	w.Flush() // fails: kept
	w.Add(5)
	w.Flush()
	mu.Lock()
	if len(got) != 6 || got[0] != 0 || got[5] != 5 || failures != 1 {
		t.Fatalf("after a failed and a good flush: %v (%d failures), want 0..5 in order and 1 failure", got, failures)
	}
	mu.Unlock()
	w.Add(6)
	w.Close()
	w.Close() // twice is fine
	if len(got) != 7 || got[6] != 6 {
		t.Fatalf("Close did not write what was buffered: %v", got)
	}
}

func TestWriterSize(t *testing.T) {
	wrote := make(chan int, 10)
	w := New(Config[int]{Write: func(_ context.Context, b []int) error { wrote <- len(b); return nil }, Size: 3, Interval: time.Hour})
	defer w.Close()
	for i := range 3 {
		w.Add(i)
	}
	select {
	case n := <-wrote:
		if n != 3 {
			t.Fatalf("a full batch wrote %d records, want 3", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a full batch was not written before the interval")
	}
}
