package kernel

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestFIFOOrder(t *testing.T) {
	var q fifo
	ctx := context.Background()
	if err := q.acquire(ctx); err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := q.acquire(ctx); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			q.release()
		}()
		time.Sleep(5 * time.Millisecond) // let it queue
	}
	// One that gives up while queued does not hold the line.
	cctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if err := q.acquire(cctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("acquire = %v", err)
	}
	// A front entry goes before everyone waiting.
	front := q.enqueue(true)
	q.release()
	if err := q.wait(ctx, front); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(order) != 0 {
		t.Errorf("ran before the front entry: %v", order)
	}
	mu.Unlock()
	q.release()
	wg.Wait()
	for i, v := range order {
		if v != i {
			t.Fatalf("order %v", order)
		}
	}
	if err := q.acquire(ctx); err != nil { // free again
		t.Fatal(err)
	}
}
