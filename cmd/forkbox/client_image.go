package main

// forkbox image: build images from recipes, import OCI images, list, inspect
// and remove them.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/client"
	"github.com/forkbox/forkbox/internal/build"
	"github.com/forkbox/forkbox/internal/units"
)

func imageCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "image",
		Aliases: []string{"images"},
		Short:   "Build, import, list and remove images",
		Long: `Images are the read-only root filesystems sandboxes start from (forkbox create
--image NAME). Build one from a recipe (a Debian base or another image, then
steps) with forkbox image build, or import one made by Docker or another OCI
tool with forkbox image import.`,
		Example: `  forkbox image build -f images/py.yaml
  docker save python:3.12-slim | forkbox image import - --name python312
  forkbox image ls
  forkbox image rm py`,
		Args: cobra.NoArgs, // an unknown subcommand is an error, not help
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(imageBuildCmd(), imageImportCmd(), imageLsCmd(), imageInspectCmd(), imageRmCmd())
	return cmd
}

func imageBuildCmd() *cobra.Command {
	var file, name, contextDir string
	cmd := &cobra.Command{
		Use:   "build -f RECIPE [--name NAME] [--context DIR]",
		Short: "Build an image from a recipe and print its name",
		Long: `Build an image from a recipe file (YAML or JSON) and register it under the
recipe's name (or --name), replacing an image of that name unless a sandbox or
a snapshot uses it. The build's progress goes to standard error: a line per
step (CACHED when the step's layer came from the cache and did not run) and
the output of run steps; the image's name goes to standard output.

A recipe has a name, a base (debian:<suite>, bootstrapped from the Debian
mirror, or the name of an image) and steps, each one of:

  run: COMMAND        run /bin/sh -c COMMAND as root, with network access
  env: {K: V, ...}    set environment variables for later steps and sandboxes
  workdir: DIR        set the working directory of later steps and sandboxes
  user: NAME|UID[:GID] run sandbox processes as this user (not root)
  copy: {src: PATH, dest: DIR}  copy PATH of the build context into the image

The build context is the directory copy steps' src paths are relative to:
--context DIR, or by default the recipe file's directory when the recipe has
copy steps. It is sent to the daemon as a tar. A failing step fails the build
with its exit status and the end of its output.`,
		Example: `  cat > py.yaml <<'EOF'
  name: py
  base: debian:bookworm
  steps:
    - run: apt-get update && apt-get install -y --no-install-recommends python3 python3-pip
    - copy: {src: requirements.txt, dest: /tmp/requirements.txt}
    - run: pip install --break-system-packages -r /tmp/requirements.txt
    - env: {PYTHONUNBUFFERED: "1"}
    - workdir: /workspace
  EOF
  forkbox image build -f py.yaml
  forkbox image build -f py.yaml --name py-test --context ../shared
  forkbox --json image build -f py.yaml`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("image build: unexpected argument %q: give the recipe with -f FILE", args[0])
			}
			return nil
		},
		RunE: run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			if file == "" {
				return errors.New("image build: give the recipe with -f FILE (YAML or JSON; - for standard input)")
			}
			rec, err := readRecipe(cmd, file, name)
			if err != nil {
				return err
			}
			if contextDir == "" && hasCopySteps(rec) {
				if file == "-" {
					return errors.New("image build: the recipe has copy steps: give the build --context DIR")
				}
				contextDir = filepath.Dir(file)
			}
			bp := newBuildPrinter(cmd)
			defer bp.stop()
			start := time.Now()
			img, err := c.BuildImage(ctx, *rec, contextDir, bp.onEvent)
			bp.stop()
			if err != nil {
				return err
			}
			if clientFlags.json {
				return printJSON(cmd.OutOrStdout(), img)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "Built %s (%s, %s, %s) in %s\n", img.Name, shortID(img.ID),
				plural(len(img.Layers), "layer", "layers"), units.Bytes(img.SizeBytes), elapsed(time.Since(start)))
			fmt.Fprintln(cmd.OutOrStdout(), img.Name)
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVarP(&file, "file", "f", "", "the recipe `FILE`, YAML or JSON (- for standard input)")
	f.StringVar(&name, "name", "", "register the image as `NAME` instead of the recipe's name")
	f.StringVar(&contextDir, "context", "", "build context `DIR` for copy steps (default: the recipe's directory)")
	return cmd
}

// readRecipe reads and checks a recipe file ("-": standard input); name,
// when set, replaces the recipe's name (which the file may then leave out).
func readRecipe(cmd *cobra.Command, file, name string) (*api.Recipe, error) {
	var (
		data []byte
		err  error
	)
	if file == "-" {
		data, err = io.ReadAll(cmd.InOrStdin())
		file = "standard input"
	} else {
		data, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, err
	}
	if name != "" {
		data = withName(data, name)
	}
	rec, err := build.ParseRecipe(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return rec, nil
}

// withName returns the recipe data (YAML or JSON) as JSON with its name set,
// or data unchanged when it is not an object (ParseRecipe says what is wrong).
func withName(data []byte, name string) []byte {
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		return data
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(j, &m); err != nil || m == nil {
		return data
	}
	m["name"], _ = json.Marshal(name)
	out, err := json.Marshal(m)
	if err != nil {
		return data
	}
	return out
}

func hasCopySteps(r *api.Recipe) bool {
	for _, st := range r.Steps {
		if st.Copy != nil {
			return true
		}
	}
	return false
}

// shortID shortens an image id for people: sha256: and 12 hex digits.
func shortID(id string) string {
	algo, hex, ok := strings.Cut(id, ":")
	if !ok || len(hex) <= 12 {
		return id
	}
	return algo + ":" + hex[:12]
}

// buildPrinter shows a build's or an import's events on stderr: a line per
// step, the output indented under it, and on a terminal a progress line with
// the time the step has taken while it is silent. With --json it shows
// nothing.
type buildPrinter struct {
	cmd       *cobra.Command
	w         io.Writer
	quiet     bool
	p         *progress
	step      string // what the progress line says
	stepStart time.Time
}

func newBuildPrinter(cmd *cobra.Command) *buildPrinter {
	return &buildPrinter{cmd: cmd, w: cmd.ErrOrStderr(), quiet: clientFlags.json}
}

func (b *buildPrinter) onEvent(ev api.BuildEvent) {
	if b.quiet {
		return
	}
	switch ev.Type {
	case api.BuildEventStep:
		b.stop()
		fmt.Fprintln(b.w, stepLine(ev))
		b.step, b.stepStart = stepProgress(ev), time.Now()
		b.spin()
	case api.BuildEventLog:
		b.stop()
		for _, line := range strings.Split(strings.TrimRight(ev.Line, "\r\n"), "\n") {
			fmt.Fprintln(b.w, "    "+strings.TrimRight(line, "\r"))
		}
		b.spin()
	case api.BuildEventDone:
		b.stop()
	}
}

func (b *buildPrinter) spin() {
	if b.step != "" {
		b.p = startProgressSince(b.cmd, b.step, b.stepStart)
	}
}

// stop erases the progress line, if any. It may be called more than once.
func (b *buildPrinter) stop() {
	b.p.Stop()
	b.p = nil
}

// stepLine is the line shown when a step starts: "Step 2/5 run: pip install
// numpy", "Base: debian:bookworm", "Import: py312", with CACHED after a step
// that did not run.
func stepLine(ev api.BuildEvent) string {
	var s string
	switch {
	case ev.Step > 0 && ev.Total > 0:
		s = fmt.Sprintf("Step %d/%d %s: %s", ev.Step, ev.Total, ev.Kind, oneLine(ev.Detail))
	case ev.Step > 0:
		s = fmt.Sprintf("Step %d %s: %s", ev.Step, ev.Kind, oneLine(ev.Detail))
	case ev.Kind != "":
		s = strings.ToUpper(ev.Kind[:1]) + ev.Kind[1:] + ": " + oneLine(ev.Detail)
	default:
		s = oneLine(ev.Detail)
	}
	if ev.Cached {
		s += "  CACHED"
	}
	return s
}

// stepProgress is what the progress line says during a step.
func stepProgress(ev api.BuildEvent) string {
	switch {
	case ev.Step > 0 && ev.Total > 0:
		return fmt.Sprintf("Step %d/%d (%s)", ev.Step, ev.Total, ev.Kind)
	case ev.Kind == "base":
		return "Preparing the base"
	case ev.Kind == "import":
		return "Importing"
	case ev.Kind != "":
		return strings.ToUpper(ev.Kind[:1]) + ev.Kind[1:]
	}
	return "Working"
}

// oneLine shows a step's detail on one line: the first line of a multi-line
// command, cut to 100 characters, with … when something was left out.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	first, rest, multi := strings.Cut(s, "\n")
	first = strings.TrimRight(first, " \\\r")
	cut := truncate(first, 100)
	if multi && strings.TrimSpace(rest) != "" || cut != first {
		return cut + " …"
	}
	return cut
}

// startProgressSince is startProgress with the time counted from start: the
// progress line of a build step shows how long the step has run, not how
// long since its last line of output.
func startProgressSince(cmd *cobra.Command, msg string, start time.Time) *progress {
	w := cmd.ErrOrStderr()
	width, tty := stderrTerminal(w)
	if clientFlags.json || !tty || os.Getenv("TERM") == "dumb" {
		return nil
	}
	p := &progress{w: w, msg: msg, width: width, start: start, stop: make(chan struct{}), done: make(chan struct{})}
	if utf8Locale() {
		p.frames, p.ellipsis = strings.Split("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏", ""), "…"
	} else {
		p.frames, p.ellipsis = []string{"|", "/", "-", `\`}, "..."
	}
	go p.loop()
	return p
}

func imageImportCmd() *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "import FILE|DIR|- --name NAME",
		Short: "Import an OCI or Docker image and print its name",
		Long: `Import an image made by Docker or another OCI tool as image NAME, replacing
an image of that name unless a sandbox or a snapshot uses it:

  FILE  the output of docker save (or podman save), or an OCI image layout
        packed as a tar; gzipped or not
  DIR   an OCI image layout directory (skopeo copy ... oci:DIR), or a docker
        save tar unpacked; sent as a tar
  -     a tar read from standard input

The image's environment, working directory and user come from its config;
a user of root becomes forkbox's unprivileged default.`,
		Example: `  docker save python:3.12-slim -o python.tar
  forkbox image import python.tar --name python312
  docker save python:3.12-slim | forkbox image import - --name python312
  skopeo copy docker://python:3.12-slim oci:py312 && forkbox image import py312 --name python312`,
		Args: exactArgs(1, "image import: name the FILE, DIR or - (standard input) to import"),
		RunE: run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			if name == "" {
				return errors.New("image import: give the image's --name")
			}
			src := args[0]
			var archive io.Reader
			switch fi, err := os.Stat(src); {
			case src == "-":
				archive = cmd.InOrStdin()
			case err != nil:
				return err
			case fi.IsDir():
				if !isImageDir(src) {
					return fmt.Errorf("image import: %s is not an OCI image layout (no oci-layout or index.json) nor an unpacked docker save (no manifest.json)", src)
				}
				pr, pw := io.Pipe()
				go func() { pw.CloseWithError(client.TarDir(pw, src)) }()
				defer pr.Close() // stops the writer if the daemon refused early
				archive = pr
			default:
				f, err := os.Open(src)
				if err != nil {
					return err
				}
				defer f.Close()
				archive = f
			}
			bp := newBuildPrinter(cmd)
			defer bp.stop()
			start := time.Now()
			img, err := c.ImportImage(ctx, name, archive, bp.onEvent)
			bp.stop()
			if err != nil {
				return err
			}
			if clientFlags.json {
				return printJSON(cmd.OutOrStdout(), img)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "Imported %s (%s, %s, %s) in %s\n", img.Name, shortID(img.ID),
				plural(len(img.Layers), "layer", "layers"), units.Bytes(img.SizeBytes), elapsed(time.Since(start)))
			fmt.Fprintln(cmd.OutOrStdout(), img.Name)
			return nil
		}),
	}
	cmd.Flags().StringVar(&name, "name", "", "register the image as `NAME` (required)")
	return cmd
}

// isImageDir reports whether dir looks like an OCI image layout or an
// unpacked docker save.
func isImageDir(dir string) bool {
	for _, f := range []string{"oci-layout", "index.json", "manifest.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			return true
		}
	}
	return false
}

func imageLsCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List images",
		Long: `List images by name. BASE is what the image was built on (debian:<suite>,
another image, oci for an import, host for the host-derived image); SIZE is
the size of its layers, some of which other images may share.`,
		Args: cobra.NoArgs,
		RunE: run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			list, err := c.ImageList(ctx)
			if err != nil {
				return err
			}
			if clientFlags.json {
				if list.Images == nil {
					list.Images = []api.Image{}
				}
				return printJSON(cmd.OutOrStdout(), list)
			}
			printImageTable(cmd.OutOrStdout(), list.Images, time.Now())
			for _, b := range list.Building {
				switch {
				case b.State == api.ImageFailed:
					fmt.Fprintf(cmd.ErrOrStderr(), "image %s: its build failed: %s\n", b.Name, b.Error)
				case b.Steps > 0:
					fmt.Fprintf(cmd.ErrOrStderr(), "image %s: being built by the daemon, step %d of %d; creates from it answer 503 until then\n", b.Name, b.Step, b.Steps)
				default:
					fmt.Fprintf(cmd.ErrOrStderr(), "image %s: being built by the daemon; creates from it answer 503 until then\n", b.Name)
				}
			}
			return nil
		}),
	}
}

func printImageTable(w io.Writer, imgs []api.Image, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "NAME\tBASE\tLAYERS\tSIZE\tCREATED")
	for _, img := range imgs {
		created := humanAge(now, img.CreatedAt)
		if created != "-" {
			created += " ago"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", img.Name, orDash(img.Base), len(img.Layers), units.Bytes(img.SizeBytes), created)
	}
	tw.Flush()
}

func imageInspectCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "inspect NAME",
		Aliases: []string{"get"},
		Short:   "Show an image as JSON",
		Args:    exactArgs(1, "image inspect: name the image"),
		RunE: run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			img, err := c.GetImage(ctx, args[0])
			if err != nil {
				return err
			}
			return printJSON(cmd.OutOrStdout(), img)
		}),
	}
}

func imageRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "rm NAME...",
		Aliases: []string{"delete"},
		Short:   "Delete images and the layers no other image uses",
		Long: `Delete images, printing the name of each one deleted (--json: a JSON array of
them). An image that a sandbox (running or suspended) or a snapshot uses is
not deleted: remove those first.`,
		Example: `  forkbox image rm py py-test`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return errors.New("image rm: name at least one image")
			}
			return nil
		},
		RunE: run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, names []string) error {
			return removeEach(ctx, cmd, names, "images", func(name string) error { return c.DeleteImage(ctx, name) })
		}),
	}
}
