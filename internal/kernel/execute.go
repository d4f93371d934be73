package kernel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/forkbox/forkbox/internal/textcut"
)

// Execute runs code as one cell and returns its execution (docs/API.md, "The
// execution result", describes it as the API answers it). Calls run one at a
// time in the order they arrived. onEvent, when not nil, is
// called from Execute's goroutine with each output as it arrives, in order,
// and never after Execute returned.
//
// Execute returns when the kernel sent both execute_reply and, on iopub, the
// idle status of the cell, so no output is lost. When ctx ends while the cell
// runs, the cell is interrupted and Execute waits (up to 5 s) for it to stop;
// if ctx's deadline passed, the execution's error is TimeoutError; the
// kernel's variables are kept. A deadline that passes while the call waits
// for its turn gives a TimeoutError without running anything; a cancellation
// then returns ctx's error. When the kernel process dies during the cell, the
// error is KernelDied with the reason; later calls return an error matching
// ErrDead.
func (k *Kernel) Execute(ctx context.Context, code string, onEvent func(Event)) (*Execution, error) {
	return k.ExecuteAround(ctx, "", code, "", onEvent)
}

// ExecuteAround is Execute with a setup and a teardown run silently in the
// same turn, right before and after the cell (no other cell can run in
// between, neither counts in execution_count, their output is discarded). The
// teardown runs even when the cell failed. forkbox uses it to give one cell
// extra environment variables.
func (k *Kernel) ExecuteAround(ctx context.Context, setup, code, teardown string, onEvent func(Event)) (*Execution, error) {
	began := time.Now()
	err := k.q.acquire(ctx)
	if err == nil {
		defer k.q.release()
		err = ctx.Err() // ended already: do not start the cell
	}
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			ex := newExecution()
			ex.Error = timeoutError(ctx, began, " before the code started; it did not run")
			return ex, nil
		}
		return nil, err
	}
	p, err := k.current()
	if err != nil {
		return nil, err
	}
	tearDown := func() {
		if teardown == "" {
			return
		}
		// A fresh context: the cell's may have ended (timeout).
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), interruptGrace)
		defer cancel()
		if tex, terr := k.run(tctx, p, teardown, nil, time.Now(), true); terr != nil || tex.Error != nil {
			p.log.Warn("cell teardown failed", "err", terr)
		}
	}
	if setup != "" {
		if ex, err := k.run(ctx, p, setup, nil, began, true); err != nil || ex.Error != nil {
			if err == nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
				// The deadline fell within the setup: the cell did not run.
				tearDown()
				out := newExecution()
				out.Error = timeoutError(ctx, began, " before the code started; it did not run")
				return out, nil
			}
			if err == nil {
				err = fmt.Errorf("cell setup failed: %s: %s", ex.Error.Name, ex.Error.Value)
			}
			return nil, err
		}
	}
	ex, err := k.run(ctx, p, code, onEvent, began, false)
	if err == nil {
		tearDown()
	}
	return ex, err
}

func timeoutError(ctx context.Context, began time.Time, what string) *ExecError {
	after := time.Since(began)
	if dl, ok := ctx.Deadline(); ok {
		after = max(dl.Sub(began), 0)
	}
	return &ExecError{
		Name:      "TimeoutError",
		Value:     fmt.Sprintf("execution timed out after %s%s", after.Round(time.Millisecond), what),
		Traceback: []string{},
	}
}

type executeRequest struct {
	Code            string         `json:"code"`
	Silent          bool           `json:"silent"`
	StoreHistory    bool           `json:"store_history"`
	UserExpressions map[string]any `json:"user_expressions"`
	AllowStdin      bool           `json:"allow_stdin"`
	StopOnError     bool           `json:"stop_on_error"`
}

// run sends one execute_request and collects its outputs.
func (k *Kernel) run(ctx context.Context, p *proc, code string, onEvent func(Event), began time.Time, silent bool) (*Execution, error) {
	c := &cell{ex: newExecution(), onEvent: onEvent}
	in := newInbox()
	// stop_on_error=false: calls are serialized here, so there is never a
	// queued cell of ours that an error should cancel.
	id, err := p.request(p.shell, "execute_request", executeRequest{
		Code: code, Silent: silent, StoreHistory: !silent, UserExpressions: map[string]any{},
	}, in)
	if err != nil {
		return c.sendFailed(p, err)
	}
	defer p.unregister(id)

	done := ctx.Done()
	var giveUp <-chan time.Time
	for !c.replied || !c.idle {
		select {
		case <-in.ready:
			for _, m := range in.take() {
				c.handle(m)
			}
		case <-done:
			done = nil
			c.deadline = errors.Is(ctx.Err(), context.DeadlineExceeded)
			if err := k.interrupt(p); err != nil {
				p.log.Warn("interrupt kernel", "err", err)
			}
			t := time.NewTimer(interruptGrace)
			defer t.Stop()
			giveUp = t.C
		case <-giveUp:
			p.log.Warn("kernel did not stop the cell after an interrupt", "waited", interruptGrace)
			what := fmt.Sprintf("; the kernel did not stop within %s of an interrupt and may still be busy", interruptGrace)
			if c.deadline {
				c.fail(timeoutError(ctx, began, what))
			} else {
				c.fail(&ExecError{Name: "KeyboardInterrupt", Value: "execution cancelled" + what, Traceback: []string{}})
			}
			return c.ex, nil
		case <-p.dead:
			// watch closes dead only after iopub delivered what the kernel
			// sent before dying.
			for _, m := range in.take() {
				c.handle(m)
			}
			c.fail(&ExecError{Name: "KernelDied", Value: "the kernel " + p.describe(), Traceback: []string{}})
			return c.ex, nil
		}
	}
	c.finish()
	if c.deadline {
		c.fail(timeoutError(ctx, began, "; the cell was interrupted and the context's variables are kept"))
	}
	return c.ex, nil
}

// sendFailed is the outcome of a cell whose execute_request could not be
// sent. The process was alive when the cell took its turn; its sockets
// close only once it exited (watch), just before dead closes, so a send that
// failed because the kernel died with the request in flight (a cell that
// kills the kernel can get there under load) is the cell's KernelDied, as a
// death later in the cell would be. A send that fails while the process
// lives is an error.
func (c *cell) sendFailed(p *proc, err error) (*Execution, error) {
	t := time.NewTimer(deadAfterSendGrace)
	defer t.Stop()
	select {
	case <-p.dead:
		c.fail(&ExecError{Name: "KernelDied", Value: "the kernel " + p.describe(), Traceback: []string{}})
		return c.ex, nil
	case <-t.C:
		return nil, err
	}
}

// cell is the state of one execution while its messages arrive.
type cell struct {
	ex       *Execution
	onEvent  func(Event)
	display  []string // display_id of each of ex.Results ("" for none)
	clear    bool     // clear_output(wait=True) pending
	replied  bool     // execute_reply arrived
	idle     bool     // status idle arrived on iopub
	reply    json.RawMessage
	deadline bool   // interrupted because ctx's deadline passed
	logged   [2]int // bytes of stdout and stderr kept in ex.Logs
}

// maxLogBytes bounds what a cell's logs keep of each stream: a cell that
// prints without end would otherwise hold it all in the agent and send it
// all to the daemon in its answer. Events still carry everything as it
// comes (an event stream shows all of it); the rest is noted once.
const maxLogBytes = 4 << 20

// maxEventText bounds the text of one stdout or stderr event.
const maxEventText = 1 << 20

// keepLog appends text to a stream's log within maxLogBytes.
func (c *cell) keepLog(log *[]string, i int, text string) {
	switch {
	case c.logged[i] > maxLogBytes:
		return
	case c.logged[i]+len(text) > maxLogBytes:
		*log = append(*log, "\n[forkbox: output beyond 4 MiB was dropped from this result; stream the cell to see all of it]\n")
		c.logged[i] = maxLogBytes + 1
		return
	}
	*log = append(*log, text)
	c.logged[i] += len(text)
}

func (c *cell) emit(e Event) {
	if c.onEvent != nil {
		c.onEvent(e)
	}
}

// fail sets the execution's error, replacing the kernel's (an interrupt's
// KeyboardInterrupt, say), and reports it as an event.
func (c *cell) fail(e *ExecError) {
	c.ex.Error = e
	c.emit(Event{Type: "error", Error: e})
}

func (c *cell) handle(m *message) {
	if m.channel == "shell" {
		if m.Header.MsgType == "execute_reply" {
			c.replied = true
			c.reply = m.Content
		}
		return
	}
	if m.channel != "iopub" {
		return
	}
	switch m.Header.MsgType {
	case "status":
		var s struct {
			State string `json:"execution_state"`
		}
		if json.Unmarshal(m.Content, &s) == nil && s.State == "idle" {
			c.idle = true
		}
	case "stream":
		var s struct {
			Name string `json:"name"`
			Text string `json:"text"`
		}
		if json.Unmarshal(m.Content, &s) != nil {
			return
		}
		c.output()
		switch s.Name {
		case "stdout":
			c.keepLog(&c.ex.Logs.Stdout, 0, s.Text)
		case "stderr":
			c.keepLog(&c.ex.Logs.Stderr, 1, s.Text)
		default:
			return
		}
		// A kernel may send a stream's output as one message of any size;
		// events go out in pieces of at most maxEventText, cut between
		// characters, so that no line of the agent's answer grows with it.
		// maxEventText is far over a character's size, so no piece is empty
		// (textcut.Prefix), and the loop ends.
		for text := s.Text; text != ""; {
			piece := textcut.Prefix(text, maxEventText)
			c.emit(Event{Type: s.Name, Text: piece})
			text = text[len(piece):]
		}
	case "display_data", "execute_result", "update_display_data":
		var d struct {
			Data      map[string]json.RawMessage `json:"data"`
			Transient struct {
				DisplayID string `json:"display_id"`
			} `json:"transient"`
		}
		if json.Unmarshal(m.Content, &d) != nil {
			return
		}
		c.output()
		r := newResult(d.Data, m.Header.MsgType == "execute_result")
		updated := false
		if m.Header.MsgType == "update_display_data" && d.Transient.DisplayID != "" {
			for i, id := range c.display {
				if id == d.Transient.DisplayID {
					c.ex.Results[i] = r
					updated = true
				}
			}
		}
		if !updated {
			c.ex.Results = append(c.ex.Results, r)
			c.display = append(c.display, d.Transient.DisplayID)
		}
		c.emit(Event{Type: "result", Result: r})
	case "clear_output":
		var w struct {
			Wait bool `json:"wait"`
		}
		_ = json.Unmarshal(m.Content, &w)
		c.clear = true
		if !w.Wait {
			c.output()
		}
	case "error":
		if c.deadline {
			// The KeyboardInterrupt of our own interrupt: TimeoutError
			// replaces it at the end.
			c.ex.Error = newExecError(m.Content)
			return
		}
		c.output()
		c.fail(newExecError(m.Content))
	}
}

// output applies a pending clear_output before new output is recorded.
func (c *cell) output() {
	if c.clear {
		c.clear = false
		c.ex.Results = c.ex.Results[:0]
		c.display = c.display[:0]
	}
}

// finish reads execute_reply: the execution count, and the error when iopub
// did not carry one.
func (c *cell) finish() {
	var r struct {
		Status         string `json:"status"`
		ExecutionCount int    `json:"execution_count"`
	}
	_ = json.Unmarshal(c.reply, &r)
	c.ex.ExecutionCount = r.ExecutionCount
	if c.ex.Error != nil || c.deadline {
		return
	}
	switch r.Status {
	case "error":
		c.fail(newExecError(c.reply))
	case "aborted":
		c.fail(&ExecError{Name: "ExecutionAborted", Value: "the kernel aborted this execution", Traceback: []string{}})
	}
}
