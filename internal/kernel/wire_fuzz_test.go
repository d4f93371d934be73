package kernel

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// Everything a kernel sends is hostile: the kernel runs sandbox code as the
// sandbox user, which can replace it with anything that speaks ZeroMQ. The
// agent decodes those frames and turns their content into an Execution, and
// neither step may panic or produce something the agent cannot encode.

// splitFrames turns fuzz bytes into ZeroMQ frames, split at NUL bytes.
func splitFrames(data []byte) [][]byte {
	return bytes.Split(data, []byte{0})
}

// FuzzDecode checks decode on any frames: no panic; with a key, only a
// correctly signed message is accepted, and a message that was signed stops
// being accepted when any byte of its signature or signed frames flips; a
// correctly signed message is refused only when its header or parent_header
// is not a JSON header.
func FuzzDecode(f *testing.F) {
	ok, _, _ := encode([]byte("k"), "s", "status", map[string]string{"execution_state": "idle"})
	f.Add([]byte("k"), bytes.Join(ok, []byte{0}), uint8(0), uint16(3))
	f.Add([]byte("k"), bytes.Join(append([][]byte{[]byte("ident")}, ok...), []byte{0}), uint8(0), uint16(70))
	f.Add([]byte(nil), []byte("<IDS|MSG>\x00\x00{}\x00{}\x00{}\x00{}"), uint8(0), uint16(0))
	f.Add([]byte("k"), []byte("{\"msg_id\":\"1\",\"msg_type\":\"stream\"}\x00{}\x00{}\x00{\"name\":\"stdout\",\"text\":\"hi\"}\x00buf"), uint8(1), uint16(9))
	f.Add([]byte("k"), []byte("[]\x00null\x00x\x00y"), uint8(1), uint16(1))
	f.Add([]byte("k"), []byte("{\"msg_id\":1}\x00{}"), uint8(1), uint16(1))
	f.Add([]byte("k"), []byte("<IDS|MSG>\x00<IDS|MSG>\x00<IDS|MSG>"), uint8(0), uint16(0))
	f.Fuzz(func(t *testing.T, key, data []byte, mode uint8, flip uint16) {
		frames := splitFrames(data)
		if mode&1 != 0 {
			// Sign the frames as a kernel that knows the key would, so
			// that the fuzzer gets past the signature check.
			for len(frames) < 4 {
				frames = append(frames, []byte("{}"))
			}
			signed := [][]byte{[]byte("ident"), []byte(delimiter), sign(key, frames[0], frames[1], frames[2], frames[3])}
			frames = append(signed, frames...)
		}
		m, err := decode(key, frames)

		// Where decode must find the message: after the first delimiter.
		at := -1
		for i, fr := range frames {
			if string(fr) == delimiter {
				at = i
				break
			}
		}
		if at < 0 || len(frames)-at < 6 {
			if err == nil {
				t.Fatalf("decode accepted %d frames with the delimiter at %d", len(frames), at)
			}
			return
		}
		sig, signedFrames := frames[at+1], frames[at+2:at+6]
		goodSig := len(key) == 0 || bytes.Equal(sig, sign(key, signedFrames...))
		var h, p header
		wantOK := goodSig && json.Unmarshal(signedFrames[0], &h) == nil && json.Unmarshal(signedFrames[1], &p) == nil
		if (err == nil) != wantOK {
			t.Fatalf("decode(%q) = %v; want success: %v (signature good: %v)", frames, err, wantOK, goodSig)
		}
		if !goodSig && !errors.Is(err, errBadSignature) {
			t.Fatalf("decode(%q) with a bad signature = %v, want errBadSignature", frames, err)
		}
		if err != nil {
			return
		}
		if m.Header != h || m.Parent != p || !bytes.Equal(m.Metadata, signedFrames[2]) || !bytes.Equal(m.Content, signedFrames[3]) ||
			len(m.Buffers) != len(frames)-at-6 {
			t.Fatalf("decode(%q) = %+v", frames, m)
		}
		if len(key) == 0 {
			return
		}
		// A flipped byte in the signature or in any signed frame is refused.
		which := at + 1 + int(flip)%5
		if len(frames[which]) == 0 {
			return
		}
		tampered := append([][]byte(nil), frames...)
		tampered[which] = append([]byte(nil), frames[which]...)
		tampered[which][int(flip/5)%len(tampered[which])] ^= 1
		if _, err := decode(key, tampered); !errors.Is(err, errBadSignature) {
			t.Fatalf("decode accepted a message whose frame %d was changed to %q: %v", which, tampered[which], err)
		}
	})
}

// FuzzWireRoundTrip checks that what encode makes, decode gives back with
// the same key, and refuses with another key or with any byte flipped.
func FuzzWireRoundTrip(f *testing.F) {
	f.Add([]byte("secret"), "sess", "execute_request", "print(1)", uint16(0))
	f.Add([]byte(nil), "", "", "", uint16(7))
	f.Add([]byte("k"), "s\xff", "<IDS|MSG>", "\x00\u2028\"", uint16(500))
	f.Fuzz(func(t *testing.T, key []byte, session, msgType, text string, flip uint16) {
		content := map[string]string{"code": text}
		frames, id, err := encode(key, session, msgType, content)
		if err != nil {
			t.Fatal(err)
		}
		m, err := decode(key, frames)
		if err != nil {
			t.Fatalf("decode of encode(%q, %q, %q): %v", session, msgType, text, err)
		}
		// JSON carries text as valid UTF-8: what arrives is the string
		// after a JSON round trip.
		if m.Header.MsgID != id || m.Header.Session != viaJSON(session) || m.Header.MsgType != viaJSON(msgType) ||
			m.Header.Version != protocolVersion || m.Parent != (header{}) || len(m.Buffers) != 0 {
			t.Fatalf("decoded header %+v, parent %+v", m.Header, m.Parent)
		}
		var got map[string]string
		if err := json.Unmarshal(m.Content, &got); err != nil || !reflect.DeepEqual(got, map[string]string{"code": viaJSON(text)}) {
			t.Fatalf("decoded content %s: %v", m.Content, err)
		}
		if len(key) == 0 {
			return
		}
		if _, err := decode(append([]byte("x"), key...), frames); !errors.Is(err, errBadSignature) {
			t.Fatalf("another key: %v", err)
		}
		which := 1 + int(flip)%5
		tampered := append([][]byte(nil), frames...)
		tampered[which] = append([]byte(nil), frames[which]...)
		tampered[which][int(flip/5)%len(tampered[which])] ^= 1
		if _, err := decode(key, tampered); !errors.Is(err, errBadSignature) {
			t.Fatalf("decode accepted frame %d changed to %q: %v", which, tampered[which], err)
		}
	})
}

func viaJSON(s string) string {
	b, _ := json.Marshal(s)
	var out string
	json.Unmarshal(b, &out)
	return out
}

// cellMessages are the messages FuzzCellMessages feeds a cell, picked by
// the first byte of each chunk.
var cellMessages = []struct{ channel, msgType string }{
	{"iopub", "status"},
	{"iopub", "stream"},
	{"iopub", "display_data"},
	{"iopub", "execute_result"},
	{"iopub", "update_display_data"},
	{"iopub", "clear_output"},
	{"iopub", "error"},
	{"shell", "execute_reply"},
	{"iopub", "execute_input"},
	{"control", "status"},
}

// FuzzCellMessages feeds a cell any sequence of messages with any content,
// as a hostile kernel may send, and checks that the execution it builds
// stays consistent: no panic, no nil slice, one display id per result (what
// update_display_data indexes), stdout and stderr events matching the logs,
// the error event carrying the execution's error, and the whole execution
// encodable as JSON.
func FuzzCellMessages(f *testing.F) {
	f.Add([]byte("\x01{\"name\":\"stdout\",\"text\":\"hi\\n\"}\x00\x03{\"data\":{\"text/plain\":\"1\"}}\x00\x00{\"execution_state\":\"idle\"}\x00\x07{\"status\":\"ok\",\"execution_count\":3}"))
	f.Add([]byte("\x02{\"data\":{\"image/png\":\"iVBO\\nRw0K\"},\"transient\":{\"display_id\":\"d\"}}\x00\x04{\"data\":{\"text/plain\":[\"a\",\"b\"]},\"transient\":{\"display_id\":\"d\"}}\x00\x05{\"wait\":true}\x00\x02{\"data\":{}}"))
	f.Add([]byte("\x06{\"ename\":\"\\u001b[31mNameError\",\"evalue\":\"x\",\"traceback\":[\"\\u001b[0;31mTrace\"]}\x00\x07{\"status\":\"error\",\"ename\":\"E\"}"))
	f.Add([]byte("\xff\x06{}\x00\x07{\"status\":\"aborted\"}"))
	f.Add([]byte("\x05{}\x00\x04{\"data\":null,\"transient\":{\"display_id\":\"\"}}\x00\x01{\"name\":\"other\",\"text\":\"x\"}\x00\x07null"))
	f.Add([]byte("\x03{\"data\":{\"application/json\":{\"a\":[1,2]},\"x/y\":7,\"application/pdf\":[\"JVBE\", \"Rg==\"]}}"))
	f.Fuzz(func(t *testing.T, script []byte) {
		var events []Event
		c := &cell{ex: newExecution(), onEvent: func(e Event) { events = append(events, e) }}
		if len(script) > 0 && script[0] == 0xff {
			c.deadline = true // the cell was interrupted by its deadline
			script = script[1:]
		}
		for _, chunk := range bytes.Split(script, []byte{0}) {
			if len(chunk) == 0 {
				continue
			}
			kind := cellMessages[int(chunk[0])%len(cellMessages)]
			m := &message{channel: kind.channel, Header: header{MsgType: kind.msgType}, Content: json.RawMessage(chunk[1:])}
			before := len(events)
			c.handle(m)
			checkCell(t, c)
			for _, e := range events[before:] {
				if e.Type == "error" && e.Error != c.ex.Error {
					t.Fatalf("error event %+v is not the execution's error %+v", e.Error, c.ex.Error)
				}
			}
		}
		c.finish()
		checkCell(t, c)
		var stdout, stderr []string
		for _, e := range events {
			switch e.Type {
			case "stdout":
				stdout = append(stdout, e.Text)
			case "stderr":
				stderr = append(stderr, e.Text)
			case "result", "error":
			default:
				t.Fatalf("event of unknown type %q", e.Type)
			}
		}
		if !reflect.DeepEqual(stdout, nilIfEmpty(c.ex.Logs.Stdout)) || !reflect.DeepEqual(stderr, nilIfEmpty(c.ex.Logs.Stderr)) {
			t.Fatalf("stream events %q / %q, logs %q / %q", stdout, stderr, c.ex.Logs.Stdout, c.ex.Logs.Stderr)
		}
		if _, err := json.Marshal(c.ex); err != nil {
			t.Fatalf("the execution does not encode: %v", err)
		}
		if _, err := json.Marshal(events); err != nil {
			t.Fatalf("the events do not encode: %v", err)
		}
	})
}

func checkCell(t *testing.T, c *cell) {
	t.Helper()
	ex := c.ex
	if ex.Logs.Stdout == nil || ex.Logs.Stderr == nil || ex.Results == nil {
		t.Fatalf("nil slice in %+v", ex)
	}
	if len(c.display) != len(ex.Results) {
		t.Fatalf("%d display ids for %d results", len(c.display), len(ex.Results))
	}
	for i, r := range ex.Results {
		if r == nil {
			t.Fatalf("result %d is nil", i)
		}
	}
	if ex.Error != nil && ex.Error.Traceback == nil {
		t.Fatalf("error %+v has a nil traceback (it would encode as null)", ex.Error)
	}
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

// FuzzFindSpecs checks that a kernelspec of any content, as an image may
// carry, is either read as a usable spec or skipped with an error, and never
// hides the valid spec beside it.
func FuzzFindSpecs(f *testing.F) {
	f.Add([]byte(`{"argv":["python3","-m","ipykernel_launcher","-f","{connection_file}"],"display_name":"Python 3","language":"python","interrupt_mode":"message"}`))
	f.Add([]byte(`{"argv":[]}`))
	f.Add([]byte(`{"argv":["x"],"interrupt_mode":"never"}`))
	f.Add([]byte(`{"argv":"x"}`))
	f.Add([]byte(`{"argv":["x"],"env":{"A":1}}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		write := func(name string, b []byte) {
			p := filepath.Join(dir, "kernels", name)
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(p, "kernel.json"), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		write("fuzzed", data)
		write("good", []byte(`{"argv":["good"],"language":"good"}`))
		specs, err := FindSpecs([]string{dir})
		if g := specs["good"]; g == nil || !reflect.DeepEqual(g.Argv, []string{"good"}) {
			t.Fatalf("the valid spec beside %q is gone: %v (%v)", data, specs, err)
		}
		sp, found := specs["fuzzed"]
		if found == (err != nil) {
			t.Fatalf("FindSpecs with %q: spec %+v and error %v", data, sp, err)
		}
		if found && (len(sp.Argv) == 0 || (sp.InterruptMode != "signal" && sp.InterruptMode != "message") || sp.Dir != filepath.Join(dir, "kernels", "fuzzed")) {
			t.Fatalf("FindSpecs accepted %q as %+v", data, sp)
		}
	})
}
