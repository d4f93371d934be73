package storetest

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/forkbox/forkbox/internal/store"
)

// records are the store's record types the suite compares with
// RecordOptions.
var records = []any{
	store.Sandbox{}, store.Event{}, store.Snapshot{}, store.Pool{}, store.Node{}, store.Key{},
	store.AuditEntry{}, store.Conversation{}, store.Turn{}, store.Upload{}, store.Cell{},
}

var (
	timeType = reflect.TypeFor[time.Time]()
	rawType  = reflect.TypeFor[json.RawMessage]()
)

// fill gives every field of v (addressable) a value that is not zero:
// pointers allocated, maps and slices given one element.
func fill(v reflect.Value) {
	switch {
	case v.Type() == timeType:
		v.Set(reflect.ValueOf(base))
	case v.Type() == rawType:
		v.Set(reflect.ValueOf(json.RawMessage(`{"k":[1,"v"]}`)))
	case v.Kind() == reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case v.Kind() == reflect.Struct:
		for i := range v.NumField() {
			fill(v.Field(i))
		}
	case v.Kind() == reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k)
		fill(e)
		m.SetMapIndex(k, e)
		v.Set(m)
	case v.Kind() == reflect.Slice:
		e := reflect.New(v.Type().Elem()).Elem()
		fill(e)
		v.Set(reflect.Append(reflect.MakeSlice(v.Type(), 0, 1), e))
	case v.Kind() == reflect.String:
		v.SetString("s")
	case v.CanInt():
		v.SetInt(1)
	case v.CanUint():
		v.SetUint(1)
	case v.CanFloat():
		v.SetFloat(1.5)
	case v.Kind() == reflect.Bool:
		v.SetBool(true)
	default:
		panic("fill: unhandled kind " + v.Kind().String() + " of " + v.Type().String())
	}
}

// leaves calls visit with each leaf of a filled v: a field that is not a
// struct or a pointer to one (a time, a JSON document, a map and a slice
// are leaves).
func leaves(path string, v reflect.Value, visit func(path string, v reflect.Value)) {
	switch {
	case v.Type() == timeType || v.Type() == rawType:
		visit(path, v)
	case v.Kind() == reflect.Pointer:
		leaves(path, v.Elem(), visit)
	case v.Kind() == reflect.Struct:
		for i := range v.NumField() {
			leaves(path+"."+v.Type().Field(i).Name, v.Field(i), visit)
		}
	default:
		visit(path, v)
	}
}

// change makes a filled leaf different, keeping it not empty.
func change(v reflect.Value) {
	switch {
	case v.Type() == timeType:
		v.Set(reflect.ValueOf(v.Interface().(time.Time).Add(time.Nanosecond)))
	case v.Type() == rawType:
		v.Set(reflect.ValueOf(json.RawMessage(`{"k":[1,"w"]}`)))
	case v.Kind() == reflect.Map:
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(e)
		v.SetMapIndex(k, e) // the zero key: filled maps hold another one
	case v.Kind() == reflect.Slice:
		e := reflect.New(v.Type().Elem()).Elem()
		fill(e)
		v.Set(reflect.Append(v, e))
	case v.Kind() == reflect.String:
		v.SetString(v.String() + "x")
	case v.CanInt():
		v.SetInt(v.Int() + 1)
	case v.CanUint():
		v.SetUint(v.Uint() + 1)
	case v.CanFloat():
		v.SetFloat(v.Float() + 1)
	case v.Kind() == reflect.Bool:
		v.SetBool(!v.Bool())
	default:
		panic("change: unhandled kind " + v.Kind().String() + " of " + v.Type().String())
	}
}

// RecordOptions leave no field out: changing any one field of any record,
// at any depth, is a difference.
func TestRecordOptionsCompareEveryField(t *testing.T) {
	for _, r := range records {
		typ := reflect.TypeOf(r)
		filled := func() reflect.Value {
			p := reflect.New(typ)
			fill(p.Elem())
			return p
		}
		a := filled()
		if d := recordDiff(a.Interface(), filled().Interface()); d != "" {
			t.Fatalf("%s: two filled records differ:%s", typ, d)
		}
		var paths []string
		leaves(typ.Name(), a.Elem(), func(path string, _ reflect.Value) { paths = append(paths, path) })
		for i, path := range paths {
			b := filled()
			n := 0
			leaves(typ.Name(), b.Elem(), func(_ string, v reflect.Value) {
				if n == i {
					change(v)
				}
				n++
			})
			if d := recordDiff(a.Interface(), b.Interface()); d == "" {
				t.Errorf("a change of %s is not a difference", path)
			}
		}
		t.Logf("%s: %d fields compared", typ, len(paths))
	}
}

// The differences RecordOptions allow, and only those.
func TestRecordOptionsAllowances(t *testing.T) {
	sb := func(runtime string, env map[string]string) *store.Sandbox {
		return &store.Sandbox{ID: "sb", Runtime: json.RawMessage(runtime), Spec: store.Spec{Env: env}, CreatedAt: base}
	}
	turn := func(messages string) *store.Turn {
		return &store.Turn{ConversationID: "c", Seq: 1, Turn: json.RawMessage(`{}`), Messages: json.RawMessage(messages)}
	}
	for _, tc := range []struct {
		name      string
		want, got any
		same      bool
	}{
		{"runtime re-encoded", sb(`{"pid":1,"dir":"/x"}`, nil), sb(`{ "dir": "/x", "pid": 1 }`, nil), true},
		{"no runtime is {}", sb(``, nil), sb(`{}`, nil), true},
		{"runtime changed", sb(`{"pid":1}`, nil), sb(`{"pid":2}`, nil), false},
		{"runtime {} is not another document", sb(``, nil), sb(`{"pid":1}`, nil), false},
		{"empty map is nil", sb(`{}`, map[string]string{}), sb(`{}`, nil), true},
		{"map entry", sb(`{}`, map[string]string{"A": ""}), sb(`{}`, nil), false},
		{"an instant in another zone", sb(`{}`, nil), &store.Sandbox{ID: "sb", Runtime: json.RawMessage(`{}`),
			CreatedAt: base.In(time.FixedZone("UTC+1", 3600))}, true},
		{"a nanosecond later", sb(`{}`, nil), &store.Sandbox{ID: "sb", Runtime: json.RawMessage(`{}`), CreatedAt: base.Add(1)}, false},
		{"messages re-encoded", turn(`[{"role":"user"}]`), turn(`[ {"role": "user"} ]`), true},
		{"empty messages stay empty", turn(``), turn(`{}`), false},
		{"empty and nil columns differ", &store.Upload{ID: "u", Columns: []string{}}, &store.Upload{ID: "u"}, false},
	} {
		if d := recordDiff(tc.want, tc.got); (d == "") != tc.same {
			t.Errorf("%s: diff %q, want same = %v", tc.name, d, tc.same)
		}
	}
}

func TestUnsetFields(t *testing.T) {
	p := reflect.New(reflect.TypeFor[store.Sandbox]())
	fill(p.Elem())
	full := p.Interface().(*store.Sandbox)
	if unset := unsetFields(full); len(unset) != 0 {
		t.Errorf("unsetFields of a filled sandbox = %v, want none", unset)
	}
	full.SuspendImage, full.Spec.E2B.Contexts, full.Spec.Network = "", map[string]string{}, nil
	if got, want := unsetFields(full), []string{"Spec.Network", "Spec.E2B.Contexts", "SuspendImage"}; !reflect.DeepEqual(got, want) {
		t.Errorf("unsetFields = %v, want %v", got, want)
	}
}
