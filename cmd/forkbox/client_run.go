package main

// forkbox run and the context commands: code in a sandbox's stateful
// contexts (Jupyter kernels; docs/API.md, "The execution result").

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/client"
)

func runCmd() *cobra.Command {
	var (
		req     api.RunCodeRequest
		timeout secondsFlag
		env     []string
		file    string
		outDir  string
	)
	cmd := &cobra.Command{
		Use:   "run SANDBOX [CODE | -]",
		Short: "Run code in a sandbox, keeping its variables for the next run",
		Long: `Run a cell of code in a code context of a sandbox: a Jupyter kernel (Python
unless --language says otherwise) that keeps its variables between runs, like
a notebook. Without --context the language's default context runs it.

The code is CODE, or the content of -f FILE, or standard input when CODE is -
or absent and standard input is not a terminal.

What the code prints is shown as it is printed; the value of the cell's last
expression is printed like a REPL prints it. Images (figures, png, jpeg, svg)
are saved with --out DIR as DIR/<execution_count>-<n>.png (.jpg, .svg). If
the cell raises, its traceback goes to standard error and forkbox exits 1.`,
		Example: `  forkbox run analysis 'sales = [120, 95]'
  forkbox run analysis 'sum(sales)'                 # prints 215
  forkbox run analysis -f plot.py --out plots/      # saves plots/3-1.png
  echo 'import sys; sys.version' | forkbox run analysis
  forkbox run analysis --timeout 30s -c ctx_3f9a1c 'train()'
  forkbox --json run analysis 'df.describe()'`,
		Args: func(_ *cobra.Command, args []string) error {
			switch {
			case len(args) == 0:
				return errors.New("run: name the SANDBOX to run the code in (see forkbox run --help)")
			case len(args) > 2:
				return fmt.Errorf("run: want SANDBOX and at most one CODE argument, got %d arguments (quote the code)", len(args))
			}
			return nil
		},
		RunE: run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			sandbox := args[0]
			var err error
			if req.Code, err = readCode(cmd, args[1:], file); err != nil {
				return err
			}
			if req.Env, err = parseKV("env", env); err != nil {
				return err
			}
			if cmd.Flags().Changed("timeout") {
				if timeout.secs <= 0 {
					return errors.New("--timeout must be positive")
				}
				ms := int64(math.Ceil(timeout.secs * 1000))
				req.TimeoutMS = &ms
			}
			p := &cellPrinter{stdout: cmd.OutOrStdout(), stderr: cmd.ErrOrStderr()}

			var exec *api.Execution
			if clientFlags.json {
				exec, err = c.RunCode(ctx, sandbox, req)
			} else {
				exec, err = c.RunCodeStream(ctx, sandbox, req, client.CodeHandlers{
					OnStdout: p.onStdout,
					OnStderr: p.onStderr,
					OnResult: p.onResult,
					OnError:  p.onError,
				})
			}
			if err != nil {
				return err
			}
			if clientFlags.json {
				if err := printJSON(p.stdout, exec); err != nil {
					return err
				}
			} else if exec.Error != nil && !p.errShown {
				p.onError(*exec.Error)
			}
			if err := saveImages(p, exec, outDir, !clientFlags.json); err != nil {
				return err
			}
			if e := exec.Error; e != nil {
				return &exitError{code: 1, msg: "cell failed with " + e.Name}
			}
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVarP(&req.Context, "context", "c", "", "context `ID` to run in (default: the language's default context)")
	f.StringVarP(&req.Language, "language", "l", "", `language of the code, or a Jupyter kernel `+"`NAME`"+` (default "python")`)
	f.Var(&timeout, "timeout", "interrupt the cell after this long: seconds or a duration like 30s, 5m")
	f.StringVar(&outDir, "out", "", "save image results into `DIR` (created if missing)")
	f.StringVarP(&file, "file", "f", "", "read the code from `FILE` (- for standard input)")
	f.StringArrayVarP(&env, "env", "e", nil, "environment variable `K=V` for this cell only (Python; repeatable)")
	return cmd
}

// readCode returns the cell's code: the CODE argument, -f FILE, or standard
// input (CODE "-", or no CODE when standard input is not a terminal).
func readCode(cmd *cobra.Command, args []string, file string) (string, error) {
	in := cmd.InOrStdin()
	switch {
	case file != "" && len(args) > 0:
		return "", errors.New("run: give the code as CODE or with -f FILE, not both")
	case file == "-":
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("run: %w", err)
		}
		return string(b), nil
	case len(args) > 0 && args[0] != "-":
		return args[0], nil
	case len(args) == 0 && isTerminal(in):
		return "", errors.New("run: no code to run: give CODE, -f FILE, or pipe the code to standard input")
	}
	b, err := io.ReadAll(in)
	if err != nil {
		return "", fmt.Errorf("run: reading standard input: %w", err)
	}
	return string(b), nil
}

// isTerminal reports whether r is a character device, such as a terminal.
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// imageFormats are the result formats that are saved as files, with their
// file extensions, in the order they are saved.
var imageFormats = []struct{ key, ext string }{{"png", ".png"}, {"jpeg", ".jpg"}, {"svg", ".svg"}}

func isImage(r map[string]any) bool {
	for _, f := range imageFormats {
		if _, ok := r[f.key]; ok {
			return true
		}
	}
	return false
}

// cellPrinter shows a streaming cell on the terminal. Its methods are the
// client's CodeHandlers, called one at a time.
type cellPrinter struct {
	stdout, stderr io.Writer
	midLine        bool // stdout's last write did not end its line
	errShown       bool
}

func (p *cellPrinter) onStdout(s string) {
	io.WriteString(p.stdout, s)
	p.midLine = !strings.HasSuffix(s, "\n")
}

func (p *cellPrinter) onStderr(s string) { io.WriteString(p.stderr, s) }

// onResult prints a result's text on its own line, as a REPL does. Images
// are left for saveImages, which needs the execution count; a result with
// neither is named on stderr so that it is not silently lost.
func (p *cellPrinter) onResult(r map[string]any) {
	if isImage(r) {
		return
	}
	text, ok := r["text"].(string)
	if !ok {
		fmt.Fprintf(p.stderr, "(%s result not shown; --json prints it)\n", strings.Join(resultFormats(r), ", "))
		return
	}
	if p.midLine {
		io.WriteString(p.stdout, "\n")
	}
	io.WriteString(p.stdout, text)
	if !strings.HasSuffix(text, "\n") {
		io.WriteString(p.stdout, "\n")
	}
	p.midLine = false
}

// onError prints the cell's traceback, or its name and value without one.
func (p *cellPrinter) onError(e api.ExecutionError) {
	p.errShown = true
	if len(e.Traceback) == 0 {
		fmt.Fprintf(p.stderr, "%s: %s\n", e.Name, e.Value)
		return
	}
	tb := strings.Join(e.Traceback, "\n")
	io.WriteString(p.stderr, tb)
	if !strings.HasSuffix(tb, "\n") {
		io.WriteString(p.stderr, "\n")
	}
}

// resultFormats lists a result's format keys, without is_main_result.
func resultFormats(r map[string]any) []string {
	var out []string
	for k := range r {
		if k != "is_main_result" {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	if len(out) == 0 {
		return []string{"empty"}
	}
	return out
}

// saveImages writes the image results of exec into dir as
// <execution_count>-<n>.<ext>, n counting image results from 1, and says so
// on stderr. Without dir it only notes (when note is set) that images were
// not saved.
func saveImages(p *cellPrinter, exec *api.Execution, dir string, note bool) error {
	n := 0
	for _, r := range exec.Results {
		if !isImage(r) {
			continue
		}
		n++
		if dir == "" {
			continue
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
		for _, f := range imageFormats {
			v, ok := r[f.key]
			if !ok {
				continue
			}
			s, _ := v.(string)
			b := []byte(s)
			if f.key != "svg" {
				var err error
				if b, err = decodeBase64(s); err != nil {
					return fmt.Errorf("image %d of cell %d: bad base64 %s data: %w", n, exec.ExecutionCount, f.key, err)
				}
			}
			name := filepath.Join(dir, fmt.Sprintf("%d-%d%s", exec.ExecutionCount, n, f.ext))
			if err := os.WriteFile(name, b, 0o644); err != nil {
				return err
			}
			fmt.Fprintf(p.stderr, "saved %s\n", name)
		}
	}
	if dir == "" && n > 0 && note {
		what := "1 image was"
		if n > 1 {
			what = fmt.Sprintf("%d images were", n)
		}
		fmt.Fprintf(p.stderr, "(%s not saved; use --out DIR to save images)\n", what)
	}
	return nil
}

// decodeBase64 accepts padded and unpadded base64 (the daemon sends padded
// base64 without line breaks).
func decodeBase64(s string) ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		if b2, err2 := base64.RawStdEncoding.DecodeString(s); err2 == nil {
			return b2, nil
		}
	}
	return b, err
}

func contextsCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "contexts SANDBOX",
		Short:   "List the code contexts of a sandbox",
		Example: `  forkbox contexts analysis`,
		Args:    exactArgs(1, "contexts: name the SANDBOX whose contexts to list"),
		RunE:    run(listContexts),
	}
}

func listContexts(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
	list, err := c.ListContexts(ctx, args[0])
	if err != nil {
		return err
	}
	if clientFlags.json {
		return printJSON(cmd.OutOrStdout(), list)
	}
	printContextTable(cmd.OutOrStdout(), list.Contexts, time.Now())
	return nil
}

func printContextTable(w io.Writer, cs []api.Context, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "ID\tLANGUAGE\tKERNEL\tSTATE\tCELLS\tCWD\tAGE")
	for _, c := range cs {
		id := c.ID
		if c.Default {
			id += " (default)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n",
			id, orDash(c.Language), orDash(c.Kernel), orDash(c.State), c.ExecutionCount, orDash(c.Cwd), humanAge(now, c.CreatedAt))
	}
	tw.Flush()
}

func contextCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "context",
		Short: "Create, list, interrupt, restart and remove code contexts",
		Long: `A code context is a Jupyter kernel in a sandbox with its own variables. Every
language has a default context; create more to keep separate state, and pass
the id to forkbox run --context.`,
		Example: `  CTX=$(forkbox context create analysis --cwd /workspace/data)
  forkbox run analysis -c $CTX 'import pandas as pd'
  forkbox context interrupt analysis $CTX    # stop the running cell
  forkbox context restart analysis $CTX      # forget all variables
  forkbox context rm analysis $CTX`,
		Args: cobra.NoArgs, // an unknown subcommand is an error, not help
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(contextCreateCmd(), contextLsCmd(), contextRmCmd(),
		contextActionCmd("interrupt", "Interrupt the cell a context is running (its variables are kept)",
			(*client.Client).InterruptContext),
		contextActionCmd("restart", "Restart a context's kernel: its variables are gone",
			(*client.Client).RestartContext))
	return cmd
}

func contextCreateCmd() *cobra.Command {
	var (
		req api.CreateContextRequest
		env []string
	)
	cmd := &cobra.Command{
		Use:   "create SANDBOX",
		Short: "Create a code context and print its id",
		Example: `  forkbox context create analysis
  forkbox context create analysis -l ir --cwd /workspace/r --env LANG=C.UTF-8`,
		Args: exactArgs(1, "context create: name the SANDBOX to create the context in"),
		RunE: run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			var err error
			if req.Env, err = parseKV("env", env); err != nil {
				return err
			}
			cx, err := c.CreateContext(ctx, args[0], req)
			if err != nil {
				return err
			}
			if clientFlags.json {
				return printJSON(cmd.OutOrStdout(), cx)
			}
			fmt.Fprintln(cmd.OutOrStdout(), cx.ID)
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVarP(&req.Language, "language", "l", "", `language of the kernel, or a Jupyter kernel `+"`NAME`"+` (default "python")`)
	f.StringVar(&req.Cwd, "cwd", "", "working directory of the kernel (default /workspace)")
	f.StringArrayVarP(&env, "env", "e", nil, "environment variable `K=V` of the kernel (repeatable)")
	return cmd
}

func contextLsCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "ls SANDBOX",
		Aliases: []string{"list"},
		Short:   "List the code contexts of a sandbox (same as forkbox contexts)",
		Args:    exactArgs(1, "context ls: name the SANDBOX whose contexts to list"),
		RunE:    run(listContexts),
	}
}

func contextRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "rm SANDBOX ID...",
		Aliases: []string{"delete"},
		Short:   "Shut code contexts down and forget their variables",
		Example: `  forkbox context rm analysis ctx_3f9a1c`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) < 2 {
				return errors.New("context rm: want SANDBOX and at least one context ID")
			}
			return nil
		},
		RunE: run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			sandbox, ids := args[0], args[1:]
			var (
				failed int
				last   error
			)
			for _, id := range ids {
				if err := c.DeleteContext(ctx, sandbox, id); err != nil {
					if ctx.Err() != nil {
						return err
					}
					failed++
					last = err
					if len(ids) > 1 {
						fmt.Fprintf(cmd.ErrOrStderr(), "forkbox: %s\n", itemError(id, err))
					}
					continue
				}
				fmt.Fprintln(cmd.OutOrStdout(), id)
			}
			switch {
			case failed == 0:
				return nil
			case len(ids) == 1:
				return last
			}
			return fmt.Errorf("%d of %d contexts not removed", failed, len(ids))
		}),
	}
}

// contextActionCmd builds interrupt and restart, which differ only in the call.
func contextActionCmd(name, short string, call func(*client.Client, context.Context, string, string) (*api.Context, error)) *cobra.Command {
	return &cobra.Command{
		Use:     name + " SANDBOX ID",
		Short:   short,
		Example: "  forkbox context " + name + " analysis ctx_3f9a1c",
		Args:    exactArgs(2, "context "+name+": want SANDBOX and a context ID"),
		RunE: run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			cx, err := call(c, ctx, args[0], args[1])
			if err != nil {
				return err
			}
			if clientFlags.json {
				return printJSON(cmd.OutOrStdout(), cx)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", cx.ID, cx.State)
			return nil
		}),
	}
}

// exactArgs is cobra.ExactArgs with a message that says what is missing.
func exactArgs(n int, msg string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != n {
			return errors.New(msg)
		}
		return nil
	}
}

// rangeArgs is cobra.RangeArgs with a message that says what is wrong.
func rangeArgs(min, max int, msg string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) < min || len(args) > max {
			return errors.New(msg)
		}
		return nil
	}
}
