package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/client"
)

func portCmd() *cobra.Command {
	var public, private, revoke bool
	cmd := &cobra.Command{
		Use:   "port SANDBOX [PORT]",
		Short: "Print the URL and token that reach a server inside a sandbox, or list its ports",
		Long: `Print the daemon's URL for a server listening on PORT inside SANDBOX (on
127.0.0.1 or 0.0.0.0 there), then its access token. Without PORT, list the
ports listening in the sandbox now and those with access settings. Requests to the URL are
proxied into the sandbox, resuming it when it is suspended, and keep it from
idling out. They need the API key, or the token (header X-Forkbox-Token, or
?forkbox_token=… on the URL), unless the port is --public.`,
		Example: `  forkbox exec demo -- sh -c 'nohup python3 -m http.server 8000 >/dev/null 2>&1 &'
  forkbox port demo
  forkbox port demo 8000
  curl -H "X-Forkbox-Token: $(forkbox port demo 8000 | sed -n 2p)" "$(forkbox port demo 8000 | head -1)"
  forkbox port demo 8000 --revoke`,
		Args: rangeArgs(1, 2, "port: name the SANDBOX, and the PORT: forkbox port SANDBOX [PORT]"),
		RunE: run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				if public || private || revoke {
					return errors.New("port: --public, --private and --revoke need a PORT")
				}
				return listPorts(ctx, c, cmd, args[0])
			}
			port, err := strconv.Atoi(args[1])
			if err != nil || port < 1 || port > 65535 {
				return fmt.Errorf("port: %q is not a port number (1 to 65535)", args[1])
			}
			var p *api.Port
			switch {
			case btoi(public)+btoi(private)+btoi(revoke) > 1:
				return errors.New("port: give at most one of --public, --private and --revoke")
			case public || private:
				p, err = c.SetPortPublic(ctx, args[0], port, public)
			case revoke:
				p, err = c.RevokePort(ctx, args[0], port)
			default:
				p, err = c.Port(ctx, args[0], port)
			}
			if err != nil {
				return err
			}
			if clientFlags.json {
				return printJSON(cmd.OutOrStdout(), p)
			}
			fmt.Fprintln(cmd.OutOrStdout(), p.URL)
			fmt.Fprintln(cmd.OutOrStdout(), p.Token)
			if p.Public {
				fmt.Fprintln(cmd.ErrOrStderr(), "public: anyone who can reach the daemon reaches this port")
			}
			return nil
		}),
	}
	f := cmd.Flags()
	f.BoolVar(&public, "public", false, "let anyone reach the port, without key or token")
	f.BoolVar(&private, "private", false, "make a public port private again")
	f.BoolVar(&revoke, "revoke", false, "replace the port's token (the old one stops working) and make it private")
	return cmd
}

func listPorts(ctx context.Context, c *client.Client, cmd *cobra.Command, sandbox string) error {
	l, err := c.ListPorts(ctx, sandbox)
	if err != nil {
		return err
	}
	if clientFlags.json {
		return printJSON(cmd.OutOrStdout(), l)
	}
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PORT\tLISTENING\tPROCESS\tACCESS\tURL")
	for _, p := range l.Ports {
		listening, access := "no", "key or token"
		if p.Listening {
			listening = "yes"
		}
		if p.Public {
			access = "public"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", p.Port, listening, p.Process, access, p.URL)
	}
	return tw.Flush()
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
