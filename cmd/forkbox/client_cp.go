package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"

	"github.com/spf13/cobra"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/client"
	"github.com/forkbox/forkbox/internal/units"
)

func cpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy a file between this machine and a sandbox",
		Long: `Copy a file between this machine and a sandbox. Exactly one of SRC and DST
is SANDBOX:PATH; a relative PATH is relative to /workspace in the sandbox. A
DST ending in / (or an existing local directory) receives the file under its
own name. "-" as the local side is standard input or output.

Directories cannot be copied yet: pack them first, e.g.
  tar czf - mydir | forkbox cp - SANDBOX:mydir.tgz`,
		Example: `  forkbox cp sales.csv analysis:data/
  forkbox cp analysis:/workspace/chart.png .
  forkbox cp analysis:out.json - | jq .`,
		Args: cobra.ExactArgs(2),
		RunE: run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			src, dst := parseCpArg(args[0]), parseCpArg(args[1])
			switch {
			case src.remote() && dst.remote():
				return errors.New("cp: both sides are in a sandbox; one of SRC and DST must be a local path")
			case !src.remote() && !dst.remote():
				return errors.New("cp: neither side is in a sandbox; write one of SRC and DST as SANDBOX:PATH")
			case src.remote():
				return download(ctx, cmd, c, src, dst.path)
			}
			return upload(ctx, cmd, c, src.path, dst)
		}),
	}
}

// cpArg is one side of cp: a local path (sandbox empty) or SANDBOX:PATH.
type cpArg struct{ sandbox, path string }

func (a cpArg) remote() bool { return a.sandbox != "" }

func (a cpArg) String() string { return a.sandbox + ":" + a.path }

// sandboxRef matches what may stand before the colon of SANDBOX:PATH: an id
// (sbx_…) or a name.
var sandboxRef = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// parseCpArg tells a sandbox side from a local one. Like docker cp, a path
// that starts with / or . (or a Windows drive) is local even if it has a colon.
func parseCpArg(s string) cpArg {
	if s == "-" || strings.HasPrefix(s, "/") || strings.HasPrefix(s, ".") ||
		(runtime.GOOS == "windows" && filepath.VolumeName(s) != "") {
		return cpArg{path: s}
	}
	sb, p, ok := strings.Cut(s, ":")
	if !ok || !sandboxRef.MatchString(sb) {
		return cpArg{path: s}
	}
	return cpArg{sandbox: sb, path: p}
}

// intoDir reports whether a sandbox path names a directory to copy into.
func intoDir(p string) bool {
	return p == "" || p == "." || strings.HasSuffix(p, "/") || strings.HasSuffix(p, "/.")
}

func upload(ctx context.Context, cmd *cobra.Command, c *client.Client, local string, dst cpArg) error {
	var (
		in   = cmd.InOrStdin()
		mode os.FileMode
		size int64 = -1
	)
	if local == "-" {
		if intoDir(dst.path) {
			return fmt.Errorf("cp: %s is a directory; give the file name for standard input, e.g. %s:data.bin", dst, dst.sandbox)
		}
	} else {
		f, err := os.Open(local)
		if err != nil {
			return fmt.Errorf("cp: %w", err)
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return fmt.Errorf("cp: %w", err)
		}
		if fi.IsDir() {
			return fmt.Errorf("cp: %s is a directory; only files can be copied for now (pack it first: tar czf - %s | forkbox cp - %s:%s.tgz)",
				local, local, dst.sandbox, filepath.Base(filepath.Clean(local)))
		}
		in, mode, size = f, fi.Mode().Perm(), fi.Size()
		if intoDir(dst.path) {
			dst.path = path.Join(dst.path, filepath.Base(local))
		}
	}
	res, err := c.WriteFile(ctx, dst.sandbox, dst.path, in, mode)
	if err != nil {
		return err
	}
	if size >= 0 && res.Size != size {
		return fmt.Errorf("cp: sent %d bytes but the sandbox stored %d", size, res.Size)
	}
	if clientFlags.json {
		return printJSON(cmd.OutOrStdout(), res)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "copied %s to %s:%s\n", units.Bytes(res.Size), dst.sandbox, res.Path)
	return nil
}

func download(ctx context.Context, cmd *cobra.Command, c *client.Client, src cpArg, local string) error {
	if src.path == "" {
		return fmt.Errorf("cp: %s names no file", src)
	}
	if local == "-" {
		_, err := c.ReadFileTo(ctx, src.sandbox, src.path, cmd.OutOrStdout())
		return err
	}
	if fi, err := os.Stat(local); (err == nil && fi.IsDir()) || strings.HasSuffix(local, string(filepath.Separator)) {
		local = filepath.Join(local, path.Base(src.path))
	}
	// Write beside the target and rename when complete, so a failed copy
	// neither leaves half a file nor clobbers an existing one.
	tmp, err := os.CreateTemp(filepath.Dir(local), ".forkbox-cp-*")
	if err != nil {
		return fmt.Errorf("cp: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	n, err := c.ReadFileTo(ctx, src.sandbox, src.path, tmp)
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), local); err != nil {
		return fmt.Errorf("cp: %w", err)
	}
	if clientFlags.json {
		abs, _ := filepath.Abs(local)
		return printJSON(cmd.OutOrStdout(), api.WriteFileResult{Path: abs, Size: n})
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "copied %s to %s\n", units.Bytes(n), local)
	return nil
}
