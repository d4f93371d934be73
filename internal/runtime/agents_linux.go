package runtime

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/forkbox/forkbox/internal/errdefs"
	"golang.org/x/sys/unix"
)

// The agent binary that sandboxes run is kept by content, because a memory
// snapshot's processes map the very file they were started from: CRIU
// checks it at restore, so a rebuilt or upgraded forkbox must not replace
// the file under them. Every version a daemon has used stays in
//
//	<data>/agents/<sha256>/forkbox-agent        (persistent, fsynced)
//
// and sandboxes bind it from a copy on a tmpfs that the daemon mounts at
//
//	<exec root>/agent/<sha256>/forkbox-agent
//
// (the exec root is under /run: see ensureExecRoot)
// so that what a sandbox can read of its own mounts (/proc/self/mountinfo)
// names the tmpfs and the hash, not the host's paths. A restore of a
// snapshot taken with an older version copies that version onto the tmpfs
// again when a reboot emptied it.

// agentStore keeps the versions of the agent binary.
type agentStore struct {
	persist, live string
}

// setupAgents stores bin (the agent binary this daemon runs sandboxes with)
// in dataDir/agents, mounts the tmpfs of live copies at live and returns the
// store and the live path of bin.
func setupAgents(dataDir, live, bin string) (*agentStore, string, error) {
	s := &agentStore{persist: filepath.Join(dataDir, "agents"), live: live}
	for _, d := range []string{s.persist, s.live} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return nil, "", err
		}
	}
	mounted, err := isMountPoint(s.live)
	if err != nil {
		return nil, "", err
	}
	if !mounted {
		// Searchable by sandboxes' inits (unprivileged host ids), which
		// bind the binary from here before they pivot.
		if err := unix.Mount("tmpfs", s.live, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0711"); err != nil {
			return nil, "", fmt.Errorf("agent tmpfs: %w", err)
		}
	}
	if err := unix.Mount("", s.live, "", unix.MS_PRIVATE, ""); err != nil {
		return nil, "", fmt.Errorf("agent tmpfs: %w", err)
	}
	sum, err := fileSHA256(bin)
	if err != nil {
		return nil, "", fmt.Errorf("agent binary: %w", err)
	}
	keep := filepath.Join(s.persist, sum, "forkbox-agent")
	if _, err := os.Stat(keep); errors.Is(err, os.ErrNotExist) {
		if err := copyDurably(bin, keep); err != nil {
			return nil, "", fmt.Errorf("keep agent binary: %w", err)
		}
	}
	path, err := s.livePath(sum)
	if err != nil {
		return nil, "", err
	}
	return s, path, nil
}

// livePath returns the tmpfs copy of version sum, copying it from the
// persistent store when missing.
func (s *agentStore) livePath(sum string) (string, error) {
	live := filepath.Join(s.live, sum, "forkbox-agent")
	if _, err := os.Stat(live); err == nil {
		return live, nil
	}
	keep := filepath.Join(s.persist, sum, "forkbox-agent")
	if _, err := os.Stat(keep); err != nil {
		return "", errdefs.FailedPrecondition("the snapshot's processes run agent version %.12s, which this daemon does not have (%v)", sum, err)
	}
	if err := os.MkdirAll(filepath.Dir(live), 0o711); err != nil {
		return "", err
	}
	if err := copyDurably(keep, live); err != nil {
		return "", fmt.Errorf("agent binary: %w", err)
	}
	return live, nil
}

// forLive returns the live copy of the version whose live path was path
// (as a snapshot recorded it), restoring it onto the tmpfs if needed.
func (s *agentStore) forLive(path string) (string, error) {
	return s.livePath(filepath.Base(filepath.Dir(path)))
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// copyDurably copies src to dst (mode 0555) through a temp file, fsynced
// and renamed into place.
func copyDurably(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o711); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := dst + ".tmp"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o555)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		os.Remove(tmp)
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		os.Remove(tmp)
		return err
	}
	if err := out.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, dst)
}
