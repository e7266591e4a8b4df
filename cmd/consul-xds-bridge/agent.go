package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"reflect"
	"syscall"

	"github.com/rs/zerolog"

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
	src, err := readAgentConfig(*file)
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
	ag := agent.New(cfg, log)
	registerBuildInfo(ag.Registerer())
	go reloadEnvoysOnHUP(ctx, ag, *file, src, log)
	// Under systemd (Type=notify): ready when /readyz would answer 200.
	go notifySystemd(ctx, log, ag.Started(), ag.NotReadyReason)
	if err := ag.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		log.Error().Err(err).Msg("agent stopped with an error")
		return 1
	}
	log.Info().Msg("agent stopped")
	return 0
}

// readAgentConfig reads the agent configuration as the daemon reads its
// -config files (policy.ReadBoundedFile): a regular file of at most
// policy.MaxDocumentBytes. A FIFO or a device named by -config (or swapped
// in before a SIGHUP) is refused at once instead of hanging the agent, and
// /dev/zero or a huge file by its size, before it is read.
func readAgentConfig(file string) ([]byte, error) {
	src, err := policy.ReadBoundedFile(context.Background(), file, policy.MaxDocumentBytes)
	switch {
	case errors.Is(err, policy.ErrFileTooLarge):
		return nil, fmt.Errorf("cannot read the agent configuration: %w; an agent configuration is a few KiB: check that -config names the right file", err)
	case err != nil:
		return nil, fmt.Errorf("cannot read the agent configuration: %w", err)
	}
	return src, nil
}

// reloadEnvoysOnHUP re-reads the configuration on SIGHUP and applies its
// envoy blocks (a changed block or binary hot-restarts that Envoy); the
// other settings need an agent restart. A configuration with errors is
// refused and the running Envoys stay as they are.
func reloadEnvoysOnHUP(ctx context.Context, ag *agent.Agent, file string, started []byte, log zerolog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	select {
	case <-ag.Started():
	case <-ctx.Done():
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		src, err := readAgentConfig(file)
		if err != nil {
			log.Error().Err(err).Str("config", file).Msg("SIGHUP: cannot read the configuration; Envoys unchanged")
			continue
		}
		cfg, diags := agent.ParseConfig(file, src)
		if diags.HasErrors() {
			log.Error().Strs("diagnostics", policy.FormatDiagnostics(diags)).Str("config", file).Msg("SIGHUP: the configuration has errors; Envoys unchanged")
			continue
		}
		// The blocks were checked against the file's other settings
		// (allow_groups, allow_node_ids, connect, data_dir), but the
		// agent runs with those it started with: an edit of both would
		// start an Envoy the running agent then refuses.
		if changed := agentSettingsChanged(file, started, cfg); changed != "" {
			log.Error().Str("config", file).Str("changed", changed).
				Msg("SIGHUP: settings other than the envoy blocks changed, and they take effect only on restart (the envoy blocks are checked against them); restart the agent; Envoys unchanged")
			continue
		}
		log.Info().Str("config", file).Int("envoys", len(cfg.Envoys)).Msg("SIGHUP: applying the envoy blocks")
		ag.ReloadEnvoys(cfg.Envoys)
	}
}

// agentSettingsChanged names the first setting other than the envoy blocks
// in which next differs from the configuration the agent started with
// (parsed again, so both have the same defaults), "" if none does.
func agentSettingsChanged(file string, started []byte, next *agent.Config) string {
	was, diags := agent.ParseConfig(file, started)
	if diags.HasErrors() {
		return "the configuration the agent started with no longer parses"
	}
	a, b := reflect.ValueOf(*was), reflect.ValueOf(*next)
	for i := range a.NumField() {
		if name := a.Type().Field(i).Name; name != "Envoys" && !reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
			return name
		}
	}
	return ""
}
