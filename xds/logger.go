package xds

import (
	"github.com/envoyproxy/go-control-plane/pkg/log"
	"github.com/rs/zerolog"
)

// Logger adapts zerolog to go-control-plane's four-method logger. The
// cache's debug chatter (one line per watch) stays at debug level.
func Logger(l zerolog.Logger) log.Logger {
	return log.LoggerFuncs{
		DebugFunc: func(f string, a ...any) { l.Debug().Msgf(f, a...) },
		InfoFunc:  func(f string, a ...any) { l.Info().Msgf(f, a...) },
		WarnFunc:  func(f string, a ...any) { l.Warn().Msgf(f, a...) },
		ErrorFunc: func(f string, a ...any) { l.Error().Msgf(f, a...) },
	}
}
