package postgres_test

import (
	"context"
	"fmt"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/postgres"
)

// An engine of the session strategy (advisory locks on a pinned
// connection) on a DSN: Migrate once, then take and give back a lock. It
// is not run: it needs a server.
func ExampleOpen() {
	e, err := postgres.Open("postgres://postgres@127.0.0.1:5432/test?sslmode=disable", postgres.WithTable("locks"))
	if err != nil {
		panic(err)
	}
	defer e.Close()
	ctx := context.Background()
	if err := e.Migrate(ctx); err != nil {
		panic(err)
	}
	l, err := e.Acquire(ctx, engine.Request{Key: "order:42", TTL: 10 * time.Second, Renew: true, Wait: true})
	if err != nil {
		panic(err)
	}
	defer l.Release(context.WithoutCancel(ctx))
	fmt.Println("token", l.Token())
}

// The lease strategy keeps no session state, so it runs behind PgBouncer in
// transaction mode, and counts: three permits of one key.
func ExampleWithStrategy() {
	e, err := postgres.Open("postgres://postgres@127.0.0.1:5432/test?sslmode=disable", postgres.WithStrategy(postgres.StrategyLease))
	if err != nil {
		panic(err)
	}
	defer e.Close()
	permit, err := e.Acquire(context.Background(), engine.Request{Key: "report-workers",
		Mode: engine.Shared, Limit: 3, TTL: 10 * time.Second, Renew: true, Wait: true})
	if err != nil {
		panic(err)
	}
	defer permit.Release(context.Background())
}
