package runtime

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/forkbox/forkbox/internal/agent/wire"
	"github.com/forkbox/forkbox/internal/diskspace"
	"github.com/forkbox/forkbox/internal/errdefs"
	"golang.org/x/sys/unix"
)

// Freeze stops every process of a sandbox (cgroup freezer) and returns once
// they are all frozen; Thaw lets them run again. Between the two, the
// sandbox's files and memory do not change.
func (r *Runtime) Freeze(ctx context.Context, id string) error {
	return newCgroups(r.cfg.CgroupParent, id).setFrozen(ctx, true)
}

// Thaw undoes Freeze.
func (r *Runtime) Thaw(ctx context.Context, id string) error {
	return newCgroups(r.cfg.CgroupParent, id).setFrozen(context.WithoutCancel(ctx), false)
}

// FreezerDir is the v1 freezer cgroup of a sandbox ("" on v2 hosts), for
// CRIU's --freeze-cgroup.
func (r *Runtime) FreezerDir(id string) string {
	return newCgroups(r.cfg.CgroupParent, id).paths["freezer"]
}

func (cg *cgroups) setFrozen(ctx context.Context, frozen bool) error {
	var file, want, check string
	if d, ok := cg.paths["freezer"]; ok && !cg.v2 {
		file, check = filepath.Join(d, "freezer.state"), filepath.Join(d, "freezer.state")
		want = "THAWED"
		if frozen {
			want = "FROZEN"
		}
		if err := os.WriteFile(file, []byte(want), 0o644); err != nil {
			return fmt.Errorf("freezer: %w", err)
		}
	} else {
		d := cg.paths["unified"]
		file, check = filepath.Join(d, "cgroup.freeze"), filepath.Join(d, "cgroup.events")
		v := "0"
		if frozen {
			v = "1"
		}
		want = "frozen " + v
		if err := os.WriteFile(file, []byte(v), 0o644); err != nil {
			return fmt.Errorf("cgroup.freeze: %w", err)
		}
	}
	for {
		b, err := os.ReadFile(check)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), want) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the sandbox to be %s: %w", strings.ToLower(want), ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

// tarArgs keep what an overlay upper layer needs: owners as numbers, modes,
// whiteouts (character devices) and every xattr (trusted.overlay.* marks
// opaque directories).
var tarArgs = []string{"--xattrs", "--xattrs-include=*", "--numeric-owner", "--sparse"}

// diskUsed is what the files of sandbox id's writable layer take on its
// disk (the ext4 filesystem of disk_mb; 0 when it cannot be read).
func (r *Runtime) diskUsed(id string) int64 {
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Join(r.Dir(id), "disk"), &st); err != nil || st.Type != unix.EXT4_SUPER_MAGIC {
		return 0
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize
}

// SnapshotNeed estimates the bytes a snapshot of running sandbox id
// writes: the files of its writable layer (fs.tar) and, for a memory
// snapshot, the memory CRIU dumps (its processes' anonymous and shared
// memory). Callers check it against the free space before they pause the
// sandbox (diskspace.Check), and report it when a write fails anyway.
func (r *Runtime) SnapshotNeed(id string, memory bool) int64 {
	n := r.diskUsed(id)
	if memory {
		n += newCgroups(r.cfg.CgroupParent, id).dumpBytes()
	}
	return n
}

// ExportFS writes the sandbox's writable layer to dst as a tar archive. The
// caller freezes the sandbox first for a consistent copy. A host disk
// that fills up meanwhile is errdefs.ErrInsufficientStorage (diskspace),
// and the caller removes dst.
func (r *Runtime) ExportFS(ctx context.Context, id, dst string) error {
	upper := filepath.Join(r.Dir(id), "disk", "upper")
	args := append([]string{"-C", upper, "-cf", dst}, tarArgs...)
	out, err := exec.CommandContext(ctx, "tar", append(args, ".")...).CombinedOutput()
	if err != nil {
		text := strings.TrimSpace(string(out))
		if diskspace.InOutput(text) {
			r.log.Warn("tar of a writable layer ran out of disk space", "sandbox", id, "dst", dst, "tar", text)
			return diskspace.Full(filepath.Dir(dst), "a snapshot of the files of sandbox "+id, r.diskUsed(id), false,
				fmt.Errorf("tar the writable layer: %v: %s", err, text))
		}
		return fmt.Errorf("tar the writable layer: %v: %s", err, text)
	}
	return nil
}

// importFS unpacks a writable layer written by ExportFS into upper.
func importFS(ctx context.Context, src, upper string) error {
	args := append([]string{"-C", upper, "-xf", src}, tarArgs...)
	out, err := exec.CommandContext(ctx, "tar", args...).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "No space left") {
			return errdefs.InvalidArgument("disk_mb: the snapshot's files do not fit; ask for a larger disk")
		}
		return fmt.Errorf("unpack snapshot files: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// buildExcludes are the paths of a writable layer that are forkbox's, not
// the build's: the agent's mount point and the resolv.conf the runtime
// writes into sandboxes with network access.
var buildExcludes = []string{wire.Dir[1:], "etc/resolv.conf"}

// CaptureLayer copies a build sandbox's writable layer into dst, an empty
// directory, as an image layer: in overlayfs's own format (whiteouts and
// opaque directories kept, with owners, modes, times and xattrs), leaving out
// buildExcludes. The sandbox is frozen meanwhile, so nothing changes under
// the copy.
func (r *Runtime) CaptureLayer(ctx context.Context, id, dst string) error {
	// Up front, before the copy (and the freeze): a layer that cannot fit
	// in the images dir is refused with the numbers.
	need := r.diskUsed(id)
	if err := diskspace.Check(dst, "the layer of build sandbox "+id, need); err != nil {
		return err
	}
	if err := r.Freeze(ctx, id); err != nil {
		return err
	}
	defer func() {
		if err := r.Thaw(context.WithoutCancel(ctx), id); err != nil {
			r.log.Warn("thaw after capture", "sandbox", id, "err", err)
		}
	}()
	upper := filepath.Join(r.Dir(id), "disk", "upper")
	out, err := exec.CommandContext(ctx, "cp", "-a", "--", upper+"/.", dst+"/").CombinedOutput()
	if err != nil {
		text := strings.TrimSpace(string(out))
		if diskspace.InOutput(text) {
			r.log.Warn("copy of a build layer ran out of disk space", "sandbox", id, "dst", dst, "cp", text)
			return diskspace.Full(dst, "the layer of build sandbox "+id, need, false, fmt.Errorf("copy the writable layer: %v: %s", err, text))
		}
		return fmt.Errorf("copy the writable layer: %v: %s", err, text)
	}
	for _, p := range buildExcludes {
		if err := os.RemoveAll(filepath.Join(dst, p)); err != nil {
			return fmt.Errorf("capture layer: %w", err)
		}
	}
	// The writable layer holds the build sandbox's host ids; a layer holds
	// canonical ones (root 0, the user 1000), which every sandbox then maps
	// into its own range. The upper dir itself is owned by the sandbox's
	// root, which names the range.
	var st unix.Stat_t
	if err := unix.Stat(upper, &st); err != nil {
		return err
	}
	return shiftOwners(dst, st.Uid, 0)
}
