package mysql_test

import (
	"context"
	"errors"
	"log"
	"time"

	gmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/mysql"
	"github.com/cerberus-go/cerberus/engine/mysql/fence"
)

// An engine on the application's gorm handle, a lock, and a fenced write
// made with the lock's token.
func ExampleNew() {
	ctx := context.Background()
	db, err := gorm.Open(gmysql.Open("app:secret@tcp(127.0.0.1:3306)/app?parseTime=true"))
	if err != nil {
		log.Fatal(err)
	}
	e, err := mysql.New(db, mysql.WithTable("locks"))
	if err != nil {
		log.Fatal(err)
	}
	defer e.Close()
	if err := e.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	l, err := e.Acquire(ctx, engine.Request{Key: "order:42", TTL: 10 * time.Second, Renew: true, Wait: true})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(context.WithoutCancel(ctx))
	_, err = fence.Update(db.Table("stock").Where("id = ?", 42), "fence", l.Token(),
		map[string]any{"n": gorm.Expr("n - 1")})
	if errors.Is(err, fence.ErrStale) {
		log.Print("a newer lock holder has written; this one lost its lock")
	}
}

// The row strategy: waiters queue inside InnoDB on the key's row.
func ExampleWithStrategy() {
	e, err := mysql.Open("app:secret@tcp(127.0.0.1:3306)/app", mysql.WithStrategy(mysql.StrategyRow))
	if err != nil {
		log.Fatal(err)
	}
	defer e.Close()
}
