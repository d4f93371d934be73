package runtime

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/forkbox/forkbox/internal/errdefs"
)

// Listener is a TCP port something in a sandbox listens on.
type Listener struct {
	Port int
	// Process is the listening process's name (its comm: what the sandbox
	// set, at most 15 bytes); "" when no process of the sandbox holds it.
	Process string
}

// kernelConnPrefix is how the agent names Jupyter kernels' connection
// files; a process whose command line holds it is a kernel, and its ports
// are the agent's plumbing, not a server of the user's.
const kernelConnPrefix = "/run/forkbox-kernels/kernel-"

// maxProcRead bounds what is read of one /proc file.
const maxProcRead = 8 << 20

// Listeners lists the TCP ports listening in running sandbox id's network
// namespace, by port, leaving out its Jupyter kernels' ports. Everything
// read comes from the host's /proc (the kernel's own tables, and the
// sandbox's processes' fd links and command lines), never from a file the
// sandbox could have planted.
func (r *Runtime) Listeners(id string, info *Info) ([]Listener, error) {
	if info == nil || info.PID <= 0 {
		return nil, errdefs.FailedPrecondition("sandbox %s is not running", id)
	}
	if start, err := pidStartTime(info.PID); err != nil || start != info.PIDStart {
		return nil, errdefs.FailedPrecondition("sandbox %s is not running", id)
	}
	inodes := map[string]int{} // socket inode → port
	for _, f := range []string{"tcp", "tcp6"} {
		if err := listening(fmt.Sprintf("/proc/%d/net/%s", info.PID, f), inodes); err != nil {
			return nil, fmt.Errorf("listening sockets of sandbox %s: %w", id, err)
		}
	}
	owner := map[int]int{} // port → pid
	if len(inodes) > 0 {
		pids, err := newCgroups(r.cfg.CgroupParent, id).pids()
		if err != nil {
			return nil, fmt.Errorf("processes of sandbox %s: %w", id, err)
		}
		for _, pid := range pids {
			fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
			if err != nil {
				continue // gone meanwhile
			}
			for _, fd := range fds {
				link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
				if err != nil {
					continue
				}
				if ino, ok := strings.CutPrefix(link, "socket:["); ok {
					if port, ok := inodes[strings.TrimSuffix(ino, "]")]; ok {
						if _, seen := owner[port]; !seen {
							owner[port] = pid
						}
					}
				}
			}
		}
	}
	ports := map[int]bool{}
	for _, p := range inodes {
		ports[p] = true
	}
	out := make([]Listener, 0, len(ports))
	for port := range ports {
		l := Listener{Port: port}
		if pid, ok := owner[port]; ok {
			if cmd, err := readProc(fmt.Sprintf("/proc/%d/cmdline", pid), 64<<10); err == nil && bytes.Contains(cmd, []byte(kernelConnPrefix)) {
				continue
			}
			if comm, err := readProc(fmt.Sprintf("/proc/%d/comm", pid), 64); err == nil {
				l.Process = strings.TrimSpace(string(comm))
			}
		}
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Port < out[j].Port })
	return out, nil
}

func readProc(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit))
}

// listening adds the listening sockets of a /proc/net/tcp{,6} table to
// inodes.
func listening(path string, inodes map[string]int) error {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil // no IPv6
	}
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, maxProcRead))
	first := true
	for sc.Scan() {
		if first {
			first = false // the header
			continue
		}
		port, ino, ok := parseListen(sc.Text())
		if ok {
			inodes[ino] = port
		}
	}
	return sc.Err()
}

// parseListen reads one line of /proc/net/tcp: the local port and socket
// inode of a socket in state LISTEN (0A).
func parseListen(line string) (port int, inode string, ok bool) {
	f := strings.Fields(line)
	if len(f) < 10 || f[3] != "0A" {
		return 0, "", false
	}
	_, hexPort, found := strings.Cut(f[1], ":")
	if !found {
		return 0, "", false
	}
	p, err := strconv.ParseUint(hexPort, 16, 16)
	if err != nil || p == 0 {
		return 0, "", false
	}
	return int(p), f[9], true
}
