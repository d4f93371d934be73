package apigen

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// object is a JSON object that keeps its keys in order, so that the
// generated document reads in the order its parts are written (the
// overlay's, the Go fields', the routes').
type object struct {
	keys []string
	vals map[string]any
}

func newObject(kv ...any) *object {
	o := &object{vals: map[string]any{}}
	for i := 0; i+1 < len(kv); i += 2 {
		o.set(kv[i].(string), kv[i+1])
	}
	return o
}

func (o *object) has(k string) bool {
	if o == nil {
		return false
	}
	_, ok := o.vals[k]
	return ok
}

func (o *object) get(k string) any {
	if o == nil {
		return nil
	}
	return o.vals[k]
}

// obj returns the object at k, or nil when there is none.
func (o *object) obj(k string) *object {
	v, _ := o.get(k).(*object)
	return v
}

func (o *object) str(k string) string {
	v, _ := o.get(k).(string)
	return v
}

func (o *object) set(k string, v any) {
	if _, ok := o.vals[k]; !ok {
		o.keys = append(o.keys, k)
	}
	o.vals[k] = v
}

func (o *object) len() int {
	if o == nil {
		return 0
	}
	return len(o.keys)
}

// each calls f for every key in order.
func (o *object) each(f func(k string, v any) error) error {
	if o == nil {
		return nil
	}
	for _, k := range o.keys {
		if err := f(k, o.vals[k]); err != nil {
			return err
		}
	}
	return nil
}

// decodeOrdered parses JSON into *object, []any, string, json.Number, bool
// and nil, keeping the order of object keys; a key given twice is an error.
func decodeOrdered(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("unexpected data after the top-level value (offset %d)", dec.InputOffset())
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok := tok.(type) {
	case json.Delim:
		switch tok {
		case '{':
			o := newObject()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k := kt.(string)
				if o.has(k) {
					return nil, fmt.Errorf("key %q is given twice (offset %d)", k, dec.InputOffset())
				}
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				o.set(k, v)
			}
			_, err := dec.Token() // '}'
			return o, err
		case '[':
			list := []any{}
			for dec.More() {
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				list = append(list, v)
			}
			_, err := dec.Token() // ']'
			return list, err
		}
		return nil, fmt.Errorf("unexpected %v", tok)
	default:
		return tok, nil
	}
}

// encodeJSON writes v indented by two spaces, without escaping HTML
// characters (the document is served as application/json, not embedded in
// HTML), ending in a newline.
func encodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	if err := encodeValue(&buf, v, ""); err != nil {
		return nil, err
	}
	buf.WriteByte('\n')
	return buf.Bytes(), nil
}

func encodeValue(buf *bytes.Buffer, v any, indent string) error {
	switch v := v.(type) {
	case *object:
		if v.len() == 0 {
			buf.WriteString("{}")
			return nil
		}
		buf.WriteString("{\n")
		for i, k := range v.keys {
			buf.WriteString(indent + "  ")
			writeString(buf, k)
			buf.WriteString(": ")
			if err := encodeValue(buf, v.vals[k], indent+"  "); err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
			if i < len(v.keys)-1 {
				buf.WriteByte(',')
			}
			buf.WriteByte('\n')
		}
		buf.WriteString(indent + "}")
	case []any:
		if len(v) == 0 {
			buf.WriteString("[]")
			return nil
		}
		buf.WriteString("[\n")
		for i, e := range v {
			buf.WriteString(indent + "  ")
			if err := encodeValue(buf, e, indent+"  "); err != nil {
				return err
			}
			if i < len(v)-1 {
				buf.WriteByte(',')
			}
			buf.WriteByte('\n')
		}
		buf.WriteString(indent + "]")
	case []string:
		list := make([]any, len(v))
		for i, s := range v {
			list[i] = s
		}
		return encodeValue(buf, list, indent)
	case string:
		writeString(buf, v)
	case json.Number:
		buf.WriteString(v.String())
	case bool:
		if v {
			buf.WriteString("true")
		} else {
			buf.WriteString("false")
		}
	case nil:
		buf.WriteString("null")
	default:
		return fmt.Errorf("cannot encode %T", v)
	}
	return nil
}

func writeString(buf *bytes.Buffer, s string) {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(s) // a string always encodes
	buf.WriteString(strings.TrimSuffix(b.String(), "\n"))
}
