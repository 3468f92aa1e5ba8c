package mysql

import (
	"context"
	"errors"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/cerberus-go/cerberus/engine"
)

// opErr wraps a server failure of a call made for a caller whose context
// is ctx as an *engine.OpError, classified by engine.Classify with denied
// and down. Driver errors carry error numbers and messages, never the DSN.
// A call that did not run under the caller's context passes
// context.Background().
func (e *Engine) opErr(ctx context.Context, op, key string, err error) error {
	return &engine.OpError{Engine: name, Op: op, Key: key,
		Err: engine.Classify(ctx, err, denied, down)}
}

// errGaveUp: an acquire made its most attempts, each refused by a deadlock
// or a vanished row. The server serves; it is no outage.
var errGaveUp = errors.New("gave up")

// deniedNumbers are the MySQL and MariaDB errors of access control.
var deniedNumbers = map[uint16]bool{
	1044: true, // ER_DBACCESS_DENIED_ERROR: no rights on the database
	1045: true, // ER_ACCESS_DENIED_ERROR: wrong user or password
	1142: true, // ER_TABLEACCESS_DENIED_ERROR: no rights on a table
	1143: true, // ER_COLUMNACCESS_DENIED_ERROR
	1227: true, // ER_SPECIFIC_ACCESS_DENIED_ERROR: a missing global privilege
	1370: true, // ER_PROCACCESS_DENIED_ERROR
	1698: true, // ER_ACCESS_DENIED_NO_PASSWORD_ERROR
	1862: true, // ER_MUST_CHANGE_PASSWORD_LOGIN: the password has expired
	3118: true, // MySQL's ER_ACCOUNT_HAS_BEEN_LOCKED (not used by MariaDB)
	4151: true, // MariaDB's ER_ACCOUNT_HAS_BEEN_LOCKED
}

// downNumbers are the server errors that say it cannot serve now.
var downNumbers = map[uint16]bool{
	1040: true, // ER_CON_COUNT_ERROR: too many connections
	1053: true, // ER_SERVER_SHUTDOWN: shutdown in progress
	1077: true, // ER_NORMAL_SHUTDOWN
	1152: true, // ER_ABORTING_CONNECTION
	1184: true, // ER_NEW_ABORTING_CONNECTION
	1203: true, // ER_TOO_MANY_USER_CONNECTIONS
	1927: true, // MariaDB's ER_CONNECTION_KILLED
	2006: true, // CR_SERVER_GONE_ERROR, as relayed by proxies
	2013: true, // CR_SERVER_LOST, as relayed by proxies
}

// denied reports a refusal by the server's access control.
func denied(err error) bool { return deniedNumbers[errNumber(err)] }

// down reports a failure that says the server is not serving now: one of
// downNumbers, or a failure without a server error at all (dial, TLS, a bad
// or broken connection, driver.ErrBadConn, the engine's own statement
// timeout), except a cancellation and errGaveUp.
func down(err error) bool {
	var me *mysqldrv.MySQLError
	if errors.As(err, &me) {
		return downNumbers[me.Number]
	}
	return !errors.Is(err, context.Canceled) && !errors.Is(err, errGaveUp)
}
