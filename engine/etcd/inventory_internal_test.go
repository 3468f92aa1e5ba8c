package etcd

import (
	"testing"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
	"github.com/cerberus-go/cerberus/internal/testenv"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestListPaged runs enginetest.RunList with one entry per range request,
// so that every listing takes several pages.
func TestListPaged(t *testing.T) {
	defer func(n int64) { listPage = n }(listPage)
	listPage = 1
	addr := testenv.EtcdAddr(t)
	enginetest.RunList(t, func() (engine.Engine, error) {
		return Dial(clientv3.Config{Endpoints: []string{addr}}, WithPrefix("/cerberus-test/paged/"))
	})
}
