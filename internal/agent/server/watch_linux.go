package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/forkbox/forkbox/internal/agent/wire"
	"golang.org/x/sys/unix"

	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/lazyre"
)

// Watching a directory (POST /watch): the agent adds inotify watches on the
// directory, and on its subdirectories when recursive, as the sandbox user
// (a directory the user may not read is not watched), through descriptors
// it opened itself beneath the sandbox's root — a symlink planted in the
// tree is never followed — and streams the changes as NDJSON until the
// daemon closes the request.

const (
	// maxWatchDirs bounds the directories one watch covers.
	maxWatchDirs = 4096
	// maxWatches bounds the watches that run at once.
	maxWatches = 64
	// watchKeepalive is how often an idle watch says it is alive.
	watchKeepalive = 30 * time.Second
)

var activeWatches atomic.Int32

func (s *server) handleWatch(w http.ResponseWriter, r *http.Request) {
	var req wire.WatchRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, errdefs.InvalidArgument("bad watch request: %v", err))
		return
	}
	p, err := s.cleanPath(req.Path)
	if err != nil {
		writeError(w, err)
		return
	}
	if activeWatches.Add(1) > maxWatches {
		activeWatches.Add(-1)
		writeError(w, errdefs.ResourceExhausted("%d directory watches run already", maxWatches))
		return
	}
	defer activeWatches.Add(-1)
	ifd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		writeError(w, fmt.Errorf("inotify: %w", err))
		return
	}
	in := os.NewFile(uintptr(ifd), "inotify")
	defer in.Close()
	wt := &watcher{s: s, ifd: ifd, dirs: map[int32]string{}, recursive: req.Recursive}
	// The root must be a directory the user may read.
	if err := s.asUser(func() error { return wt.add(p, true) }); err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	enc := json.NewEncoder(w)
	var mu sync.Mutex
	send := func(ev wire.WatchEvent) bool {
		mu.Lock()
		defer mu.Unlock()
		if err := enc.Encode(ev); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	if !send(wire.WatchEvent{Started: true}) {
		return
	}
	ctx := r.Context()
	go func() {
		<-ctx.Done()
		in.SetReadDeadline(time.Now()) // ends the read below
	}()
	buf := make([]byte, 64<<10)
	last := time.Now()
	for {
		in.SetReadDeadline(time.Now().Add(watchKeepalive))
		// The goroutine above may have set its deadline before the line
		// above replaced it: then the read would wait for an event or
		// the keepalive, with the client gone.
		if ctx.Err() != nil {
			return
		}
		n, err := in.Read(buf)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if time.Since(last) >= watchKeepalive && !send(wire.WatchEvent{Keepalive: true}) {
				return
			}
			last = time.Now()
			continue
		}
		if err != nil {
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			nameLen := int(ev.Len)
			end := off + unix.SizeofInotifyEvent + nameLen
			if end > n {
				break
			}
			name := ""
			if nameLen > 0 {
				raw := buf[off+unix.SizeofInotifyEvent : end]
				for i, c := range raw {
					if c == 0 {
						raw = raw[:i]
						break
					}
				}
				name = string(raw)
			}
			off = end
			out, ok := wt.event(ev, name)
			if !ok {
				continue
			}
			for _, o := range out {
				if !send(o) {
					return
				}
			}
			last = time.Now()
		}
	}
}

// watcher is one watch's directories, by inotify watch descriptor.
type watcher struct {
	s         *server
	ifd       int
	mu        sync.Mutex
	dirs      map[int32]string // wd → path relative to the watch's root ("" for the root)
	root      string
	recursive bool
	// fromTemp are the rename cookies of the agent's own temporary files
	// (a write lands by renaming one onto its name).
	fromTemp map[uint32]bool
}

// tempFileRE is the name of the agent's temporary file of a write
// (tempName in files_linux.go).
var tempFileRE = lazyre.New(`^\..+\.forkbox-[0-9a-f]+$`)

const watchMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_CLOSE_WRITE | unix.IN_DELETE | unix.IN_MOVED_FROM |
	unix.IN_MOVED_TO | unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_ONLYDIR

// add watches directory p (root: the watch's own) and, when recursive, the
// directories below it. It runs as the user.
func (wt *watcher) add(p string, root bool) error {
	d, _, err := wt.s.openNode(p, true)
	if err != nil {
		if root {
			return err
		}
		return nil // gone, or not the user's to read: not watched
	}
	defer d.Close()
	if root {
		wt.root = p
	}
	// The descriptor's /proc link names the very directory opened, not a
	// path to resolve again (the magic link is followed on purpose: no
	// IN_DONT_FOLLOW).
	wd, err := unix.InotifyAddWatch(wt.ifd, fmt.Sprintf("/proc/self/fd/%d", d.Fd()), watchMask)
	if err != nil {
		if root {
			return pathErr(p, err)
		}
		return nil
	}
	rel := ""
	if !root {
		rel = p[len(wt.root)+1:]
		if wt.root == "/" {
			rel = p[1:]
		}
	}
	wt.mu.Lock()
	if len(wt.dirs) >= maxWatchDirs {
		wt.mu.Unlock()
		unix.InotifyRmWatch(wt.ifd, uint32(wd))
		if root {
			return errdefs.ResourceExhausted("watch: more than %d directories", maxWatchDirs)
		}
		return nil
	}
	wt.dirs[int32(wd)] = rel
	wt.mu.Unlock()
	if !wt.recursive {
		return nil
	}
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil
	}
	fd := int(d.Fd())
	for _, n := range names {
		var st unix.Stat_t
		if unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			wt.add(path.Join(p, n), false)
		}
	}
	return nil
}

// event turns an inotify event into what the daemon is told; a directory
// made under a recursive watch is watched too.
func (wt *watcher) event(ev *unix.InotifyEvent, name string) ([]wire.WatchEvent, bool) {
	wt.mu.Lock()
	rel, ok := wt.dirs[ev.Wd]
	if ev.Mask&unix.IN_IGNORED != 0 {
		delete(wt.dirs, ev.Wd)
	}
	wt.mu.Unlock()
	if !ok || name == "" && ev.Mask&unix.IN_DELETE_SELF == 0 {
		return nil, false
	}
	full := path.Join(rel, name)
	if tempFileRE.MatchString(name) {
		// The agent's own temporary file: not the user's business, but
		// its rename onto the target is a write of the target.
		if ev.Mask&unix.IN_MOVED_FROM != 0 {
			wt.mu.Lock()
			if wt.fromTemp == nil {
				wt.fromTemp = map[uint32]bool{}
			}
			if len(wt.fromTemp) > 1024 {
				clear(wt.fromTemp)
			}
			wt.fromTemp[ev.Cookie] = true
			wt.mu.Unlock()
		}
		return nil, false
	}
	var op string
	switch {
	case ev.Mask&unix.IN_CREATE != 0:
		op = "create"
		if wt.recursive && ev.Mask&unix.IN_ISDIR != 0 {
			p := path.Join(wt.root, full)
			wt.s.asUser(func() error { return wt.add(p, false) })
		}
	case ev.Mask&(unix.IN_MODIFY|unix.IN_CLOSE_WRITE) != 0:
		op = "write"
	case ev.Mask&(unix.IN_DELETE|unix.IN_DELETE_SELF) != 0:
		op = "remove"
	case ev.Mask&unix.IN_MOVED_TO != 0:
		// As fsnotify (E2B's envd) reports it: the name appears. A write
		// of the agent's lands this way: the name was written.
		wt.mu.Lock()
		written := wt.fromTemp[ev.Cookie]
		delete(wt.fromTemp, ev.Cookie)
		wt.mu.Unlock()
		if written {
			return []wire.WatchEvent{{Name: full, Op: "create"}, {Name: full, Op: "write"}}, true
		}
		op = "create"
	case ev.Mask&unix.IN_MOVED_FROM != 0:
		op = "rename"
	case ev.Mask&unix.IN_ATTRIB != 0:
		op = "chmod"
	default:
		return nil, false
	}
	return []wire.WatchEvent{{Name: full, Op: op}}, true
}
