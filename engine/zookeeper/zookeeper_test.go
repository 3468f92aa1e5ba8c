package zookeeper_test

import (
	"context"
	"testing"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
	"github.com/cerberus-go/cerberus/engine/zookeeper"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

func TestConformance(t *testing.T) {
	addr := testenv.ZooKeeperAddr(t)
	admin := rawConn(t, addr)
	base := testBase(t, admin)
	dead := deadAddr(t)
	enginetest.Run(t, func() (engine.Engine, error) {
		return zookeeper.Dial([]string{addr}, testTimeout, zookeeper.WithBasePath(base), zookeeper.WithLogger(quiet{}))
	}, enginetest.Options{
		Leftovers: func(_ context.Context, key string) ([]string, error) {
			return leftovers(admin, base, key)
		},
		Unreachable: func() (engine.Engine, error) {
			return zookeeper.Dial([]string{dead}, testTimeout, zookeeper.WithLogger(quiet{}))
		},
	})
}
