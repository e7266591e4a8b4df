package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/consul-xds-bridge/consul-xds-bridge/agent"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

// agentCmd runs the per-VM agent (package agent).
func agentCmd(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("agent", stderr)
	file := fs.String("config", "", "agent configuration `FILE` (HCL)")
	if _, code, ok := parseCommand(fs, args, stdout, stderr); !ok {
		return code
	}
	if *file == "" {
		fmt.Fprintln(stderr, "agent: -config FILE is required")
		return 2
	}
	src, err := os.ReadFile(*file)
	if err != nil {
		fmt.Fprintf(stderr, "agent: %v\n", err)
		return 1
	}
	cfg, diags := agent.ParseConfig(*file, src)
	if diags.HasErrors() {
		printDiagnostics(stderr, diags)
		return 1
	}
	log, err := newLogger(policy.LogSettings{Level: cfg.LogLevel}, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "agent: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log.Info().Str("version", version).Str("config", *file).Msg("starting agent")
	a := agent.New(cfg, log)
	registerBuildInfo(a.Registerer())
	// Under systemd (Type=notify): ready when /readyz would answer 200.
	go notifySystemd(ctx, log, a.Started(), a.NotReadyReason)
	if err := a.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		log.Error().Err(err).Msg("agent stopped with an error")
		return 1
	}
	log.Info().Msg("agent stopped")
	return 0
}
