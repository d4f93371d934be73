package sandboxinit

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// SpawnRole is the role (first argument) of the process that starts sandbox
// inits on the daemon's behalf.
const SpawnRole = "__sandbox-spawn"

// Spawn is the __sandbox-spawn role: `<binary> __sandbox-spawn <binary>`,
// serving the daemon on fd 3 (a SOCK_SEQPACKET socket) until the daemon
// closes it. A request is "init <base> <size>" with two descriptors
// attached, an init's config pipe and its status pipe: Spawn starts
// `<binary> __sandbox-init` with them as fd 3 and 4, in new namespaces whose
// user namespace maps ids 0..size-1 to host ids base..base+size-1. Or it is
// "userns <base> <size>": a sleeping process in a new user namespace of that
// mapping alone (what a restore idmaps its layers with). Either is started
// as a child of the spawner's own parent (CLONE_PARENT: the daemon); the
// answer is "pid <n>" or "error <text>".
//
// Why a middleman: whoever starts a child in a new user namespace must
// write the child's id maps while the child waits, so Go forks it with a
// copy of the parent's address space rather than vfork. From the daemon (a
// large heap, many threads) that copy and the copy-on-write faults it
// leaves on every page the daemon writes afterwards cost tens of
// milliseconds of CPU per sandbox; from this small, mostly idle process they
// cost little. It lives as long as the daemon, so its own start (the Go
// runtime's and this binary's package init) is paid once.
func Spawn(args []string) {
	if len(args) != 1 {
		fmt.Fprintf(os.Stderr, "sandbox spawn: want <binary>, got %q\n", args)
		os.Exit(2)
	}
	binary := args[0]
	// The socket came without close-on-exec: keep it out of what this
	// starts (a holder would keep the daemon's end from seeing our exit).
	unix.CloseOnExec(3)
	buf := make([]byte, 64)
	oob := make([]byte, unix.CmsgSpace(2*4))
	for {
		n, oobn, _, _, err := unix.Recvmsg(3, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			os.Exit(0) // the daemon is gone or done with us
		}
		answer := spawnOne(binary, string(buf[:n]), oob[:oobn])
		if _, err := unix.Write(3, []byte(answer)); err != nil {
			os.Exit(0)
		}
	}
}

// spawnOne serves one request and returns its answer.
func spawnOne(binary, req string, oob []byte) string {
	var files []*os.File
	if msgs, err := unix.ParseSocketControlMessage(oob); err == nil {
		for _, m := range msgs {
			fds, _ := unix.ParseUnixRights(&m)
			for _, fd := range fds {
				files = append(files, os.NewFile(uintptr(fd), "passed"))
			}
		}
	}
	// The child has its own copies once started: these go either way.
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	pid, err := startInit(binary, req, files)
	if err != nil {
		return "error " + strings.ReplaceAll(err.Error(), "\n", " ")
	}
	return "pid " + strconv.Itoa(pid)
}

func startInit(binary, req string, files []*os.File) (int, error) {
	f := strings.Fields(req)
	if len(f) != 3 || (f[0] != "init" && f[0] != "userns") {
		return 0, fmt.Errorf("want init|userns <base> <size>, got %q", req)
	}
	base, err1 := strconv.ParseUint(f[1], 10, 32)
	size, err2 := strconv.ParseUint(f[2], 10, 32)
	if err := errors.Join(err1, err2); err != nil || size == 0 || base+size > 1<<32 {
		return 0, fmt.Errorf("id range %q is not a range of host ids", req)
	}
	ids := []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(base), Size: int(size)}}
	var cmd *exec.Cmd
	if f[0] == "userns" {
		if len(files) != 0 {
			return 0, fmt.Errorf("a user namespace holder takes no descriptors, got %d", len(files))
		}
		// Killed by the daemon as soon as the layers are idmapped; an
		// hour's sleep bounds it should the daemon die first.
		cmd = exec.Command("/bin/sleep", "3600")
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_PARENT | syscall.CLONE_NEWUSER,
			UidMappings: ids, GidMappings: ids,
			Setsid: true,
		}
	} else {
		if len(files) != 2 {
			return 0, fmt.Errorf("want 2 descriptors (config and status pipes), got %d", len(files))
		}
		cmd = exec.Command(binary, "__sandbox-init")
		cmd.ExtraFiles = files // config on fd 3, status on fd 4
		// The user namespace comes with the others, so that it owns them:
		// its root (host id base) may mount proc, sysfs and devpts for its
		// own sandbox and nothing else. Credential makes the init uid 0
		// inside (host id base) before it execs, so it never runs as host
		// root in there.
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Cloneflags: syscall.CLONE_PARENT | syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID |
				syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS,
			UidMappings: ids, GidMappings: ids, GidMappingsEnableSetgroups: true,
			Credential: &syscall.Credential{Uid: 0, Gid: 0},
			Setsid:     true,
		}
	}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	// Not ours to wait for: the child is the daemon's.
	return cmd.Process.Pid, nil
}
