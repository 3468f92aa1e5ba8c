package postgres

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cerberus-go/cerberus/engine"
)

// opErr wraps a server failure of a call made for a caller whose context
// is ctx as an *engine.OpError, classified by engine.Classify with denied
// and down. pgx's errors name the user and the database, never the
// password. A call that did not run under the caller's context passes
// context.Background().
func (e *Engine) opErr(ctx context.Context, op, key string, err error) error {
	return &engine.OpError{Engine: name, Op: op, Key: key,
		Err: engine.Classify(ctx, err, denied, down)}
}

// errGaveUp: an acquire made its most attempts, each refused by a
// serialization failure or a deadlock. The server serves; it is no outage.
var errGaveUp = errors.New("gave up")

// deniedStates are the SQLSTATEs of access control.
var deniedStates = map[string]bool{
	"28000": true, // invalid_authorization_specification: no such role, pg_hba refusal
	"28P01": true, // invalid_password
	"42501": true, // insufficient_privilege
}

// downStates are the SQLSTATEs (besides class 08) that say the server
// cannot serve now.
var downStates = map[string]bool{
	"53300": true, // too_many_connections
	"57P01": true, // admin_shutdown
	"57P02": true, // crash_shutdown
	"57P03": true, // cannot_connect_now: starting up, shutting down, recovery
	"53200": true, // out_of_memory: the shared lock table is full (max_locks_per_transaction)
}

// denied reports a refusal by the server's access control.
func denied(err error) bool { return deniedStates[sqlState(err)] }

// down reports a failure that says the server is not serving now: a server
// error of class 08 (connection exception) or one of downStates, or a
// failure without a server error at all (dial, TLS, a closed or broken
// connection, a pgconn timeout, the engine's own statement timeout),
// except a cancellation and errGaveUp.
func down(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return strings.HasPrefix(pe.Code, "08") || downStates[pe.Code]
	}
	return !errors.Is(err, context.Canceled) && !errors.Is(err, errGaveUp)
}

// transient reports server errors after which an attempt is simply
// repeated: a serialization failure, a deadlock, or a lock_timeout the
// role or database set.
func transient(err error) bool {
	switch sqlState(err) {
	case "40001", "40P01", "55P03":
		return true
	}
	return false
}
