package runtime

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// cgroupRoot is where cgroup filesystems are mounted on the host.
const cgroupRoot = "/sys/fs/cgroup"

// cgroups drives one sandbox's cgroup on either a pure cgroup v2 host or a
// v1 (hybrid) host. On v1 the sandbox gets a directory in each controller
// hierarchy forkbox uses; on v2 one directory in the unified tree.
type cgroups struct {
	v2    bool
	paths map[string]string // controller ("memory", "pids", "cpu", "cpuacct", "freezer", "unified") -> dir
}

// cgroupVersion2 reports whether /sys/fs/cgroup is a pure cgroup2 mount.
func cgroupVersion2() bool {
	var st unix.Statfs_t
	if err := unix.Statfs(cgroupRoot, &st); err != nil {
		return false
	}
	return st.Type == unix.CGROUP2_SUPER_MAGIC
}

// v1Controllers are the hierarchies a sandbox joins on a v1 host. The
// unified (cgroup2) mount of a hybrid host is joined too when present, for
// cgroup.kill and pressure files.
var v1Controllers = []string{"memory", "pids", "cpu", "cpuacct", "freezer", "devices"}

func newCgroups(parent, id string) *cgroups {
	cg := &cgroups{v2: cgroupVersion2(), paths: map[string]string{}}
	if cg.v2 {
		cg.paths["unified"] = filepath.Join(cgroupRoot, parent, id)
		return cg
	}
	for _, c := range v1Controllers {
		if _, err := os.Stat(filepath.Join(cgroupRoot, c)); err == nil {
			cg.paths[c] = filepath.Join(cgroupRoot, c, parent, id)
		}
	}
	if st, err := os.Stat(filepath.Join(cgroupRoot, "unified", "cgroup.procs")); err == nil && !st.IsDir() {
		cg.paths["unified"] = filepath.Join(cgroupRoot, "unified", parent, id)
	}
	return cg
}

// ensureV2Controllers enables the controllers a sandbox needs in every
// ancestor's subtree_control, from the root down to dir's parent.
func ensureV2Controllers(dir string) error {
	rel, err := filepath.Rel(cgroupRoot, filepath.Dir(dir))
	if err != nil {
		return err
	}
	cur := cgroupRoot
	parts := []string{}
	if rel != "." {
		parts = strings.Split(rel, "/")
	}
	for i := 0; ; i++ {
		avail, _ := os.ReadFile(filepath.Join(cur, "cgroup.controllers"))
		var enable []string
		for _, c := range []string{"cpu", "memory", "pids"} {
			if strings.Contains(" "+strings.TrimSpace(string(avail))+" ", " "+c+" ") {
				enable = append(enable, "+"+c)
			}
		}
		if len(enable) > 0 {
			if err := os.WriteFile(filepath.Join(cur, "cgroup.subtree_control"), []byte(strings.Join(enable, " ")), 0o644); err != nil {
				return fmt.Errorf("enable controllers in %s: %w", cur, err)
			}
		}
		if i == len(parts) {
			return nil
		}
		cur = filepath.Join(cur, parts[i])
		if err := os.MkdirAll(cur, 0o755); err != nil {
			return err
		}
	}
}

// create makes the cgroup directories and writes the limits.
func (cg *cgroups) create(l Limits) error {
	if cg.v2 {
		dir := cg.paths["unified"]
		if err := ensureV2Controllers(dir); err != nil {
			return err
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create cgroup: %w", err)
		}
		quota := int64(l.CPUs * 100000)
		if err := writeAll(dir, map[string]string{
			"memory.max":      strconv.FormatInt(l.MemoryMB<<20, 10),
			"memory.swap.max": "0",
			"pids.max":        strconv.FormatInt(l.PIDs, 10),
			"cpu.max":         fmt.Sprintf("%d 100000", quota),
		}, "memory.swap.max"); err != nil {
			return err
		}
		return applyDeviceRules(cg.paths)
	}
	for c, dir := range cg.paths {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create %s cgroup: %w", c, err)
		}
	}
	if dir, ok := cg.paths["memory"]; ok {
		mem := strconv.FormatInt(l.MemoryMB<<20, 10)
		if err := writeAll(dir, map[string]string{
			"memory.limit_in_bytes": mem,
			"memory.swappiness":     "0",
		}, "memory.swappiness"); err != nil {
			return err
		}
		// memsw exists only with swap accounting; its limit must be set after
		// memory.limit_in_bytes.
		if _, err := os.Stat(filepath.Join(dir, "memory.memsw.limit_in_bytes")); err == nil {
			if err := os.WriteFile(filepath.Join(dir, "memory.memsw.limit_in_bytes"), []byte(mem), 0o644); err != nil {
				return fmt.Errorf("set memsw limit: %w", err)
			}
		}
	} else {
		return errors.New("no memory cgroup controller on this host")
	}
	if dir, ok := cg.paths["pids"]; ok {
		if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.FormatInt(l.PIDs, 10)), 0o644); err != nil {
			return fmt.Errorf("set pids.max: %w", err)
		}
	} else {
		return errors.New("no pids cgroup controller on this host")
	}
	if dir, ok := cg.paths["cpu"]; ok {
		if err := writeAll(dir, map[string]string{
			"cpu.cfs_period_us": "100000",
			"cpu.cfs_quota_us":  strconv.FormatInt(int64(l.CPUs*100000), 10),
		}); err != nil {
			return err
		}
	}
	// The device allow-list (devices_linux.go), before any process joins.
	return applyDeviceRules(cg.paths)
}

// writeAll writes each file in dir; files named in optional may be missing.
func writeAll(dir string, files map[string]string, optional ...string) error {
	// Deterministic order matters for v1 memory (limit before memsw); callers
	// that care write those separately.
	for name, val := range files {
		err := os.WriteFile(filepath.Join(dir, name), []byte(val), 0o644)
		if err == nil {
			continue
		}
		isOpt := false
		for _, o := range optional {
			isOpt = isOpt || o == name
		}
		if isOpt && errors.Is(err, os.ErrNotExist) {
			continue
		}
		return fmt.Errorf("set %s=%s: %w", name, val, err)
	}
	return nil
}

// join moves pid into every hierarchy of the sandbox.
func (cg *cgroups) join(pid int) error {
	for c, dir := range cg.paths {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return fmt.Errorf("join %s cgroup: %w", c, err)
		}
	}
	return nil
}

// procsDir is the hierarchy used to list and kill the sandbox's processes.
func (cg *cgroups) procsDir() string {
	if d, ok := cg.paths["unified"]; ok {
		return d
	}
	return cg.paths["pids"]
}

// pids lists the processes in the sandbox's cgroup.
func (cg *cgroups) pids() ([]int, error) {
	b, err := os.ReadFile(filepath.Join(cg.procsDir(), "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if p, err := strconv.Atoi(f); err == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

// kill kills every process in the cgroup and waits until it is empty.
func (cg *cgroups) kill(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	killFile := filepath.Join(cg.procsDir(), "cgroup.kill")
	for {
		pids, err := cg.pids()
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		if err := os.WriteFile(killFile, []byte("1"), 0o644); err != nil {
			for _, p := range pids {
				_ = unix.Kill(p, unix.SIGKILL)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup still has processes %v after %s", pids, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// removeTimeout bounds how long remove retries a busy cgroup. A cgroup v1
// hierarchy can refuse rmdir (EBUSY) for a while after the unified
// hierarchy shows no process: the killed tasks are still exiting there
// (freeing a kernel's hundreds of MiB takes a while on a loaded host; a CI
// run under heavy load once needed more than the 0.5 s this used to allow).
const removeTimeout = 5 * time.Second

// remove deletes the cgroup directories (they must be empty of processes).
func (cg *cgroups) remove() error {
	var errs []error
	deadline := time.Now().Add(removeTimeout)
	for c, dir := range cg.paths {
		var err error
		for {
			err = unix.Rmdir(dir)
			if err == nil || errors.Is(err, unix.ENOENT) {
				err = nil
				break
			}
			if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("remove %s cgroup %s: %w", c, dir, err))
		}
	}
	return errors.Join(errs...)
}

func readInt(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return v
}

// keyed reads "key value" lines (memory.stat, memory.events, cpu.stat).
func keyed(path, key string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == key {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			return v
		}
	}
	return 0
}

// keyedSum adds the values of keys in a "key value" file, read once.
func keyedSum(path string, keys ...string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	var sum int64
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && slices.Contains(keys, f[0]) {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			sum += v
		}
	}
	return sum
}

// dumpBytes is what a memory dump of the group's processes writes, as the
// kernel counts it: their anonymous memory and shared memory (tmpfs
// included), swapped out or not. Page cache (files the processes read)
// is not dumped and not counted.
func (cg *cgroups) dumpBytes() int64 {
	if cg.v2 {
		d := cg.paths["unified"]
		return keyedSum(filepath.Join(d, "memory.stat"), "anon", "shmem") + readInt(filepath.Join(d, "memory.swap.current"))
	}
	if d, ok := cg.paths["memory"]; ok {
		return keyedSum(filepath.Join(d, "memory.stat"), "total_rss", "total_shmem", "total_swap")
	}
	return 0
}

// stats reads current usage.
// oomKills is how many of the group's processes the kernel killed for
// memory (the one figure an exec checks, before and after).
func (cg *cgroups) oomKills() int64 {
	if cg.v2 {
		return keyed(filepath.Join(cg.paths["unified"], "memory.events"), "oom_kill")
	}
	if d, ok := cg.paths["memory"]; ok {
		return keyed(filepath.Join(d, "memory.oom_control"), "oom_kill")
	}
	return 0
}

func (cg *cgroups) stats() Usage {
	var u Usage
	if cg.v2 {
		d := cg.paths["unified"]
		u.MemoryBytes = readInt(filepath.Join(d, "memory.current"))
		u.MemoryPeakBytes = readInt(filepath.Join(d, "memory.peak"))
		u.CPUSeconds = float64(keyed(filepath.Join(d, "cpu.stat"), "usage_usec")) / 1e6
		u.PIDs = readInt(filepath.Join(d, "pids.current"))
		u.OOMKills = cg.oomKills()
		return u
	}
	if d, ok := cg.paths["memory"]; ok {
		u.MemoryBytes = readInt(filepath.Join(d, "memory.usage_in_bytes"))
		u.MemoryPeakBytes = readInt(filepath.Join(d, "memory.max_usage_in_bytes"))
	}
	u.OOMKills = cg.oomKills()
	if d, ok := cg.paths["cpuacct"]; ok {
		u.CPUSeconds = float64(readInt(filepath.Join(d, "cpuacct.usage"))) / 1e9
	}
	if d, ok := cg.paths["pids"]; ok {
		u.PIDs = readInt(filepath.Join(d, "pids.current"))
	}
	return u
}
