package config_test

import (
	"context"
	"fmt"

	"github.com/cerberus-go/cerberus/config"
)

func Example() {
	cfg, err := config.Parse([]byte(`
engines:
  - name: local
    kind: memory
engine: elsewhere
health: {interval: 500ms}
`), "yaml")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.Health.Interval, cfg.Health.Threshold, cfg.Fence)
	for _, w := range cfg.Warnings() {
		fmt.Println("warning:", w)
	}

	engines, err := cfg.Build(context.Background())
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, n := range engines {
		fmt.Println(n.Name, n.Engine.Name())
		n.Engine.Close()
	}
	// Output:
	// 500ms 3 true
	// warning: engine: "elsewhere" names no configured engine; the first healthy engine in order is used
	// local memory
}

func ExampleParse_errors() {
	_, err := config.Parse([]byte(`
engines:
  - {name: a, kind: redys}
  - {name: b, kind: redis}
  - {name: a, kind: memory}
health: {interval: -1s}
lease: {ttl: 5s, watchdgo: 10s}
`), "yaml")
	fmt.Println(err)
	// Output:
	// lease.watchdgo: unknown key
	// engines[0].kind: unknown kind "redys" (want one of memory, redis, redis-cluster, redlock, zookeeper, consul, mysql, etcd, postgres)
	// engines[1].addrs: required for kind redis
	// engines[2].name: duplicate of engines[0].name ("a")
	// health.interval: must be positive, got -1s
}
