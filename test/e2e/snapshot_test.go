package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forkbox/forkbox/api"
)

func checkpoint(t *testing.T, d *daemon, sb string, req api.CheckpointRequest) (int, *api.Snapshot, []byte) {
	t.Helper()
	status, raw := postJSON(t, d, "/v1/sandboxes/"+sb+"/checkpoint", req)
	var sn api.Snapshot
	json.Unmarshal(raw, &sn)
	return status, &sn, raw
}

func listSnapshots(t *testing.T, d *daemon) []api.Snapshot {
	t.Helper()
	resp, err := http.Get("http://" + d.addr + "/v1/snapshots")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var l api.SnapshotList
	json.NewDecoder(resp.Body).Decode(&l)
	return l.Snapshots
}

// TestFilesystemRollback is the seed's rollback: checkpoint cleaned data,
// run a destructive filter, restore the checkpoint into a new sandbox.
func TestFilesystemRollback(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, shared, api.CreateSandboxRequest{CPUs: f64(1), MemoryMB: i64(512)})
	sh(t, shared, sb.ID, `python3 -c "
import csv
with open('/workspace/cleaned_data.csv', 'w', newline='') as f:
    w = csv.writer(f); w.writerow(['id', 'value'])
    for i in range(1000): w.writerow([i, i * 3])
"`)
	status, sn, raw := checkpoint(t, shared, sb.ID, api.CheckpointRequest{Type: "filesystem", Name: "before-filter"})
	if status != 201 || sn.Type != "filesystem" || sn.SandboxID != sb.ID || sn.SizeBytes <= 0 {
		t.Fatalf("checkpoint: %d %s", status, raw)
	}
	// The risky step: a filter that leaves 3 rows.
	sh(t, shared, sb.ID, `python3 -c "
import pandas as pd
df = pd.read_csv('/workspace/cleaned_data.csv')
df[df.value < 9].to_csv('/workspace/cleaned_data.csv', index=False)
"`)
	if res := sh(t, shared, sb.ID, "tail -n +2 /workspace/cleaned_data.csv | wc -l"); strings.TrimSpace(res.Stdout) != "3" {
		t.Fatalf("filter left %q rows", res.Stdout)
	}
	// Roll back: a new sandbox from the checkpoint, with other limits.
	restored := newSandbox(t, shared, api.CreateSandboxRequest{SnapshotID: sn.ID, CPUs: f64(0.5), MemoryMB: i64(256)})
	if restored.SnapshotID != sn.ID || restored.ID == sb.ID || restored.CPUs != 0.5 || restored.MemoryMB != 256 {
		t.Fatalf("restored sandbox: %+v", restored)
	}
	if res := sh(t, shared, restored.ID, "tail -n +2 /workspace/cleaned_data.csv | wc -l; stat -c %U /workspace/cleaned_data.csv"); res.Stdout != "1000\nuser\n" {
		t.Fatalf("restored file: %q", res.Stdout)
	}
	// The source keeps its own (filtered) state; the snapshot is listed.
	found := false
	for _, s := range listSnapshots(t, shared) {
		found = found || s.ID == sn.ID
	}
	if !found {
		t.Fatal("snapshot not listed")
	}
	// One snapshot restores any number of times.
	again := newSandbox(t, shared, api.CreateSandboxRequest{SnapshotID: sn.ID})
	if res := sh(t, shared, again.ID, "tail -n +2 /workspace/cleaned_data.csv | wc -l"); res.Stdout != "1000\n" {
		t.Fatalf("second restore: %q", res.Stdout)
	}
}

func TestSnapshotBadInput(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, shared, api.CreateSandboxRequest{DiskMB: i64(256)})
	sh(t, shared, sb.ID, "head -c 60000000 /dev/urandom > /workspace/big.bin")
	status, sn, raw := checkpoint(t, shared, sb.ID, api.CheckpointRequest{})
	if status != 201 || sn.Type != "filesystem" {
		t.Fatalf("default checkpoint: %d %s", status, raw)
	}
	// Restoring into a disk smaller than the data.
	status, raw = postJSON(t, shared, "/v1/sandboxes", api.CreateSandboxRequest{SnapshotID: sn.ID, DiskMB: i64(64)})
	if status != 400 || !strings.Contains(string(raw), "disk_mb") {
		t.Fatalf("restore into a too small disk: %d %s", status, raw)
	}
	if status, raw := postJSON(t, shared, "/v1/sandboxes/"+sb.ID+"/checkpoint", map[string]any{"type": "everything"}); status != 400 || !strings.Contains(string(raw), "type") {
		t.Fatalf("bad type: %d %s", status, raw)
	}
	if status, raw := postJSON(t, shared, "/v1/sandboxes", api.CreateSandboxRequest{SnapshotID: "snap_nope"}); status != 404 || !strings.Contains(string(raw), "snap_nope") {
		t.Fatalf("unknown snapshot: %d %s", status, raw)
	}
	if resp, err := http.Get("http://" + shared.addr + "/v1/snapshots/snap_nope"); err != nil || resp.StatusCode != 404 {
		t.Fatalf("get unknown snapshot: %v %v", resp, err)
	}
	if _, err := shared.c.DeleteSandbox(ctxT(t), sb.ID); err != nil {
		t.Fatal(err)
	}
	if status, raw := postJSON(t, shared, "/v1/sandboxes/"+sb.ID+"/checkpoint", api.CheckpointRequest{}); status != 409 {
		t.Fatalf("checkpoint of a terminated sandbox: %d %s", status, raw)
	}
	// Deleting the snapshot frees its space.
	path := filepath.Join(shared.dataDir, "snapshots", sn.ID)
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("DELETE", "http://"+shared.addr+"/v1/snapshots/"+sn.ID, nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 204 {
		t.Fatalf("delete snapshot: %v %v", resp, err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("snapshot files left after delete: %v", err)
	}
}

func TestSnapshotCorruptRefused(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, shared, api.CreateSandboxRequest{})
	sh(t, shared, sb.ID, "echo precious > /workspace/p.txt")
	_, sn, raw := checkpoint(t, shared, sb.ID, api.CheckpointRequest{})
	if sn.ID == "" {
		t.Fatalf("checkpoint: %s", raw)
	}
	f := filepath.Join(shared.dataDir, "snapshots", sn.ID, "fs.tar")
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/3] ^= 0x55
	os.WriteFile(f, b, 0o600)
	before := countSandboxes(t, shared)
	status, raw := postJSON(t, shared, "/v1/sandboxes", api.CreateSandboxRequest{SnapshotID: sn.ID})
	if status != 409 || !strings.Contains(string(raw), sn.ID) || !strings.Contains(string(raw), "corrupt") {
		t.Fatalf("restore of a corrupt snapshot: %d %s", status, raw)
	}
	if countSandboxes(t, shared) != before {
		t.Fatal("a refused restore created a sandbox")
	}
}

// TestCheckpointFailureLeavesNothing: with the snapshot store on a tiny
// filesystem, a checkpoint does not fit: 507 naming that filesystem; no
// half snapshot remains and the sandbox keeps running.
func TestCheckpointFailureLeavesNothing(t *testing.T) {
	needRoot(t)
	dataDir := filepath.Join(t.TempDir(), "small")
	snaps := filepath.Join(dataDir, "snapshots")
	os.MkdirAll(snaps, 0o700)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", snaps).CombinedOutput(); err != nil {
		t.Fatalf("mount small fs: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", snaps).Run() })
	d, err := startDaemon(dataDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.deleteAll(); d.stop() })
	sb, err := d.c.CreateSandbox(ctxT(t), api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := d.c.Exec(ctxT(t), sb.ID, api.ExecRequest{Cmd: "sh", Args: []string{"-c", "head -c 8000000 /dev/urandom > /workspace/big.bin"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	status, _, raw := checkpoint(t, d, sb.ID, api.CheckpointRequest{})
	if status != http.StatusInsufficientStorage || !strings.Contains(string(raw), "the filesystem at "+snaps+" (tmpfs)") {
		t.Fatalf("checkpoint onto a 2 MB store: %d %s; want 507 naming the store's filesystem", status, raw)
	}
	if l := listSnapshots(t, d); len(l) != 0 {
		t.Fatalf("failed checkpoint left snapshots: %+v", l)
	}
	ents, _ := os.ReadDir(snaps)
	if len(ents) != 0 {
		t.Fatalf("failed checkpoint left files: %v", ents)
	}
	if res, err := d.c.Exec(ctxT(t), sb.ID, api.ExecRequest{Cmd: "echo", Args: []string{"alive"}}); err != nil || res.Stdout != "alive\n" {
		t.Fatalf("sandbox after failed checkpoint: %+v %v", res, err)
	}
}
