package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/client"
)

func execCmd() *cobra.Command {
	var (
		req      api.ExecRequest
		timeout  secondsFlag
		env      []string
		noStream bool
		stdin    bool
	)
	cmd := &cobra.Command{
		Use:   "exec SANDBOX [flags] -- CMD [ARGS...]",
		Short: "Run a command in a sandbox",
		Long: `Run a command in a sandbox. Its output is shown as it is produced, and
forkbox exits with the command's exit code (124 if it timed out, 128+N if a
signal N killed it).`,
		Example: `  forkbox exec analysis -- python3 -c 'print(6*7)'
  forkbox exec analysis --cwd /tmp --env DEBUG=1 -- ls -la
  cat script.py | forkbox exec -i analysis -- python3 -`,
		Args: func(cmd *cobra.Command, args []string) error {
			if dash := cmd.ArgsLenAtDash(); dash > 1 {
				return fmt.Errorf("exec: want one SANDBOX before --, got %q", args[:dash])
			}
			if len(args) < 2 {
				return fmt.Errorf("exec: want SANDBOX -- CMD [ARGS...] (see forkbox exec --help)")
			}
			return nil
		},
		RunE: run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			sandbox := args[0]
			req.Cmd, req.Args = args[1], args[2:]
			var err error
			if req.Env, err = parseKV("env", env); err != nil {
				return err
			}
			if cmd.Flags().Changed("timeout") {
				req.TimeoutSecs = &timeout.secs
			}
			if stdin {
				b, err := io.ReadAll(cmd.InOrStdin())
				if err != nil {
					return fmt.Errorf("reading stdin: %w", err)
				}
				req.Stdin = string(b)
			}

			stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
			var res *api.ExecResult
			switch {
			case clientFlags.json:
				if res, err = c.Exec(ctx, sandbox, req); err != nil {
					return err
				}
				if err := printJSON(stdout, res); err != nil {
					return err
				}
			case noStream:
				if res, err = c.Exec(ctx, sandbox, req); err != nil {
					return err
				}
				io.WriteString(stdout, res.Stdout)
				io.WriteString(stderr, res.Stderr)
			default:
				res, err = c.ExecStream(ctx, sandbox, req,
					func(b []byte) { stdout.Write(b) },
					func(b []byte) { stderr.Write(b) })
				if err != nil {
					return err
				}
			}
			return remoteStatus(res)
		}),
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return fmt.Errorf("%w (put the command to run after --, e.g. forkbox exec SANDBOX -- ls -la)", err)
	})
	f := cmd.Flags()
	f.Var(&timeout, "timeout", "kill the command after this long: seconds or a duration like 5m")
	f.StringVar(&req.Cwd, "cwd", "", "working directory in the sandbox (default /workspace)")
	f.StringArrayVarP(&env, "env", "e", nil, "environment variable `K=V` (repeatable)")
	f.BoolVar(&noStream, "no-stream", false, "print the output when the command has finished")
	f.BoolVarP(&stdin, "stdin", "i", false, "send this process's standard input to the command (read to EOF first)")
	return cmd
}

// remoteStatus turns a finished command's status into nil (success) or an
// *exitError carrying the exit code the CLI should end with.
func remoteStatus(res *api.ExecResult) error {
	var (
		code int
		msg  string
	)
	switch {
	case res.TimedOut:
		code, msg = 124, "command timed out"
	case res.OOMKilled:
		code, msg = 137, "command was killed: out of memory"
	case res.Signal != "":
		code, msg = 1, "command was killed by "+res.Signal
		if n := signalNumber(res.Signal); n > 0 {
			code = 128 + n
		}
	case res.ExitCode != 0:
		code, msg = res.ExitCode, fmt.Sprintf("command terminated with exit code %d", res.ExitCode)
	default:
		return nil
	}
	switch {
	case res.Error != "":
		msg = res.Error // the daemon's own words, e.g. "command timed out after 1s and was killed"
	case res.TimedOut && res.DurationMS > 0:
		msg += fmt.Sprintf(" after %s", (time.Duration(res.DurationMS) * time.Millisecond).Round(time.Millisecond))
	}
	return &exitError{code: code, msg: msg}
}

// linuxSignals numbers the signals by their Linux values: the command ran in
// a Linux sandbox whatever OS this CLI runs on.
var linuxSignals = map[string]int{
	"HUP": 1, "INT": 2, "QUIT": 3, "ILL": 4, "TRAP": 5, "ABRT": 6, "BUS": 7, "FPE": 8,
	"KILL": 9, "USR1": 10, "SEGV": 11, "USR2": 12, "PIPE": 13, "ALRM": 14, "TERM": 15,
	"XCPU": 24, "XFSZ": 25, "SYS": 31,
}

// signalNumber accepts a name ("SIGKILL", "KILL") or a number ("9"); 0 means unknown.
func signalNumber(s string) int {
	if n, err := strconv.Atoi(s); err == nil {
		return n
	}
	return linuxSignals[strings.TrimPrefix(strings.ToUpper(s), "SIG")]
}
