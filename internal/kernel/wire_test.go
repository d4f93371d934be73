package kernel

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestWireRoundTrip(t *testing.T) {
	key := []byte("secret")
	frames, id, err := encode(key, "sess", "execute_request", map[string]any{"code": "1"})
	if err != nil {
		t.Fatal(err)
	}
	if string(frames[0]) != delimiter || len(frames) != 6 {
		t.Fatalf("frames %q", frames)
	}
	// What a ROUTER or PUB puts in front (identities, topic) is skipped.
	in := append([][]byte{[]byte("ident"), []byte("topic")}, frames...)
	m, err := decode(key, in)
	if err != nil {
		t.Fatal(err)
	}
	if m.Header.MsgID != id || m.Header.MsgType != "execute_request" || m.Header.Session != "sess" ||
		m.Header.Version != protocolVersion || m.Parent.MsgID != "" || string(m.Content) != `{"code":"1"}` {
		t.Errorf("decoded %+v", m)
	}
	// The signature is the hex HMAC-SHA256 of header, parent, metadata, content.
	if got := string(frames[1]); len(got) != 64 || got != string(sign(key, frames[2], frames[3], frames[4], frames[5])) {
		t.Errorf("signature %q", got)
	}
}

func TestWireRejects(t *testing.T) {
	key := []byte("secret")
	frames, _, _ := encode(key, "sess", "status", map[string]string{"execution_state": "idle"})
	tampered := append([][]byte(nil), frames...)
	tampered[5] = []byte(`{"execution_state":"busy"}`)
	if _, err := decode(key, tampered); !errors.Is(err, errBadSignature) {
		t.Errorf("tampered content: %v", err)
	}
	if _, err := decode([]byte("other"), frames); !errors.Is(err, errBadSignature) {
		t.Errorf("wrong key: %v", err)
	}
	if _, err := decode(key, frames[:4]); err == nil {
		t.Error("short message accepted")
	}
	if _, err := decode(key, frames[1:]); err == nil {
		t.Error("message without delimiter accepted")
	}
	// No key: no signature is checked, as Jupyter does.
	unsigned, _, _ := encode(nil, "sess", "status", map[string]string{})
	if len(unsigned[1]) != 0 {
		t.Errorf("unsigned signature %q", unsigned[1])
	}
	if _, err := decode(nil, unsigned); err != nil {
		t.Errorf("unsigned: %v", err)
	}
}

func TestNewResult(t *testing.T) {
	data := map[string]json.RawMessage{
		"text/plain":             json.RawMessage(`"<Figure>"`),
		"image/png":              json.RawMessage(`"iVBO\nRw0K\n"`),
		"application/json":       json.RawMessage(`{"n":12345678901234567890}`),
		"text/html":              json.RawMessage(`["<b>", "x</b>"]`),
		"application/vnd.x+json": json.RawMessage(`{"a":1}`),
		"text/x-custom":          json.RawMessage(`"c"`),
	}
	r := newResult(data, true)
	var buf strings.Builder
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.Encode(r)
	b := strings.TrimSpace(buf.String())
	want := `{"extra":{"application/vnd.x+json":{"a":1},"text/x-custom":"c"},"html":"<b>x</b>","is_main_result":true,"json":{"n":12345678901234567890},"png":"iVBORw0K","text":"<Figure>"}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
	if r := newResult(map[string]json.RawMessage{"text/plain": json.RawMessage(`"1"`)}, false); len(r) != 1 {
		t.Errorf("display result %v", r)
	}
}

func TestExecErrorStripsANSI(t *testing.T) {
	content := json.RawMessage(`{"ename":"ZeroDivisionError","evalue":"division by zero","traceback":[
		"\u001b[0;31m-----------\u001b[0m",
		"\u001b[0;31mZeroDivisionError\u001b[0m: division by zero",
		"\u001b]8;;file:///x\u0007link\u001b]8;;\u0007"]}`)
	e := newExecError(content)
	want := []string{"-----------", "ZeroDivisionError: division by zero", "link"}
	if e.Name != "ZeroDivisionError" || e.Value != "division by zero" || len(e.Traceback) != 3 {
		t.Fatalf("%+v", e)
	}
	for i := range want {
		if e.Traceback[i] != want[i] {
			t.Errorf("line %d = %q, want %q", i, e.Traceback[i], want[i])
		}
	}
	if e := newExecError(json.RawMessage(`{"ename":"E"}`)); e.Traceback == nil {
		t.Error("traceback must be [] not null")
	}
}

func TestNewExecutionJSON(t *testing.T) {
	b, _ := json.Marshal(newExecution())
	if string(b) != `{"logs":{"stdout":[],"stderr":[]},"results":[],"error":null,"execution_count":0}` {
		t.Errorf("%s", b)
	}
}
