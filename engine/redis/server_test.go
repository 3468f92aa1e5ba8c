package redis

import (
	"testing"

	"github.com/cerberus-go/cerberus/internal/testenv"
)

// privateServer is a redis-server of the test's own, for faults that must
// not disturb the shared server.
type privateServer struct {
	*testenv.RedisServer
	addr string
}

// startServer starts a private redis-server that stops when the test ends.
func startServer(t testing.TB) *privateServer {
	t.Helper()
	s := testenv.StartRedis(t)
	return &privateServer{RedisServer: s, addr: s.Addr}
}

// kill stops the server at once, as a crash would.
func (s *privateServer) kill() { s.Kill() }
