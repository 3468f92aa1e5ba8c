package etcd_test

import (
	"testing"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
	"github.com/cerberus-go/cerberus/internal/testenv"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestList runs enginetest.RunList under the test prefix.
func TestList(t *testing.T) {
	addr := testenv.EtcdAddr(t)
	enginetest.RunList(t, func() (engine.Engine, error) {
		return dial(clientv3.Config{Endpoints: []string{addr}})
	})
}
