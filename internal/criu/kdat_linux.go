package criu

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// KdatDir is where CRIU keeps its kernel-feature cache (criu.kdat):
// scripts/build-criu.sh builds CRIU with it as its run dir. CRIU probes the
// kernel at the start of every run (tens of milliseconds: dozens of test
// mappings, sockets and namespaces) unless it finds the cache there, and it
// writes the cache only on a tmpfs (so that a reboot, and a new kernel,
// drop it). On most hosts /run is a tmpfs and so is this directory; where
// it is not, ensureKdatDir mounts a small tmpfs on it.
const KdatDir = "/run/forkbox/criu"

// kdatSize bounds the tmpfs: the cache is a few KiB.
const kdatSize = "size=1m,mode=0700"

// ensureKdatDir makes KdatDir a root-only directory on a tmpfs. It says
// why not when it cannot; CRIU then works as before, without a cache.
func ensureKdatDir() error {
	if err := os.MkdirAll(KdatDir, 0o700); err != nil {
		return err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(KdatDir, &st); err != nil {
		return err
	}
	if st.Type == unix.TMPFS_MAGIC {
		return nil
	}
	if err := unix.Mount("tmpfs", KdatDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, kdatSize); err != nil {
		return fmt.Errorf("mount a tmpfs on %s for CRIU's kernel-feature cache: %w", KdatDir, err)
	}
	return nil
}
