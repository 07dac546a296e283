package serve

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// Token returns the bearer token: the contents of file (its trailing
// newline trimmed) when file is not empty, else getenv(TokenEnv). A
// command reads it here and never from its command line, where the
// process list would show it.
func Token(file string, getenv func(string) string) (string, error) {
	if file == "" {
		return getenv(TokenEnv), nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}

// Bind checks cfg, binds cfg.Addr with at most cfg.MaxConns connections
// open at once (LimitListener) and checks that cfg.Dir can be locked
// (CheckDir): what a command does before preparations that take minutes
// or pay for runs, so that a bad flag, a busy port or a second service on
// the same directory fails first.
func Bind(cfg Config) (net.Listener, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, err
	}
	if err := CheckDir(cfg.Dir); err != nil {
		ln.Close()
		return nil, err
	}
	return LimitListener(ln, cfg.MaxConns), nil
}

// ShutdownGrace is how long Serve waits for requests in process when its
// context ends.
const ShutdownGrace = 30 * time.Second

// Serve serves s on ln with Server's timeouts until ctx ends, then shuts
// the server down, waiting at most ShutdownGrace for requests in process.
func (s *Service) Serve(ctx context.Context, ln net.Listener) error {
	srv := s.Server()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), ShutdownGrace)
		defer cancel()
		return srv.Shutdown(sctx)
	case err := <-errc:
		return err
	}
}
