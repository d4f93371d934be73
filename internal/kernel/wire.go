package kernel

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// The Jupyter messaging protocol (v5.x) on the wire: a ZeroMQ multipart
// message of routing identities, the delimiter, an HMAC-SHA256 signature over
// the next four frames, then header, parent_header, metadata, content (JSON)
// and any binary buffers.

const (
	protocolVersion = "5.3"
	delimiter       = "<IDS|MSG>"
)

var errBadSignature = errors.New("bad message signature")

// header is a message's header, and the parent_header of a reply.
type header struct {
	MsgID    string `json:"msg_id"`
	Session  string `json:"session"`
	Username string `json:"username"`
	Date     string `json:"date"`
	MsgType  string `json:"msg_type"`
	Version  string `json:"version"`
}

// message is one decoded message. Content stays raw until its type is known;
// the header and parent_header keep their frames' bytes too, for OnMessage.
type message struct {
	channel   string // "shell", "iopub", "control" or "stdin"; set by the reader
	Header    header
	Parent    header
	Metadata  json.RawMessage
	Content   json.RawMessage
	Buffers   [][]byte
	rawHeader json.RawMessage
	rawParent json.RawMessage
}

// newID returns a random UUID-shaped id, as Jupyter uses for msg_id and session.
func newID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// sign returns the hex HMAC-SHA256 of the frames with key; an empty key
// (authentication off) signs with the empty string.
func sign(key []byte, frames ...[]byte) []byte {
	if len(key) == 0 {
		return []byte{}
	}
	mac := hmac.New(sha256.New, key)
	for _, f := range frames {
		mac.Write(f)
	}
	sum := mac.Sum(nil)
	out := make([]byte, hex.EncodedLen(len(sum)))
	hex.Encode(out, sum)
	return out
}

// encode builds the frames of a new request of msgType with content. It
// returns them with the new msg_id. A request has no parent and no metadata.
func encode(key []byte, session, msgType string, content any) ([][]byte, string, error) {
	h := header{
		MsgID:    newID(),
		Session:  session,
		Username: "forkbox",
		Date:     time.Now().UTC().Format("2006-01-02T15:04:05.000000Z07:00"),
		MsgType:  msgType,
		Version:  protocolVersion,
	}
	hb, err := json.Marshal(h)
	if err != nil {
		return nil, "", err
	}
	cb, err := json.Marshal(content)
	if err != nil {
		return nil, "", err
	}
	parent, meta := []byte("{}"), []byte("{}")
	return [][]byte{[]byte(delimiter), sign(key, hb, parent, meta, cb), hb, parent, meta, cb}, h.MsgID, nil
}

// decode parses received frames: it skips the routing identities (or the
// PUB topic) up to the delimiter and checks the signature before it parses
// anything else.
func decode(key []byte, frames [][]byte) (*message, error) {
	i := 0
	for i < len(frames) && !bytes.Equal(frames[i], []byte(delimiter)) {
		i++
	}
	if len(frames)-i < 6 {
		return nil, fmt.Errorf("malformed message: %d frames, delimiter at %d", len(frames), i)
	}
	sig, f := frames[i+1], frames[i+2:]
	if len(key) > 0 && !hmac.Equal(sig, sign(key, f[0], f[1], f[2], f[3])) {
		return nil, errBadSignature
	}
	m := &message{Metadata: f[2], Content: f[3], Buffers: f[4:], rawHeader: f[0], rawParent: f[1]}
	if err := json.Unmarshal(f[0], &m.Header); err != nil {
		return nil, fmt.Errorf("bad header: %w", err)
	}
	if err := json.Unmarshal(f[1], &m.Parent); err != nil {
		return nil, fmt.Errorf("bad parent_header: %w", err)
	}
	return m, nil
}
