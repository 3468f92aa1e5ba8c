package etcd_test

import (
	"testing"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
	"github.com/cerberus-go/cerberus/internal/testenv"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestCloseTellsFirst: a closing engine tells its holders before their keys
// are free (enginetest.RunCloseTellsFirst).
func TestCloseTellsFirst(t *testing.T) {
	addr := testenv.EtcdAddr(t)
	enginetest.RunCloseTellsFirst(t, func() (engine.Engine, error) {
		return dial(clientv3.Config{Endpoints: []string{addr}})
	})
}
