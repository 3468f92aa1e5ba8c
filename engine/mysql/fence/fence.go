// Package fence makes fenced writes with gorm: an update that lands only
// if the lock token it carries is newer than the one stored with the data.
// It is the other half of the fencing tokens that cerberus engines hand
// out (Lease.Token), kept in a package of its own so that the MySQL engine
// itself does not pull gorm into a build.
//
// A lock holder can lose its lock without knowing (a long GC pause, a
// partition, an expired TTL) and then write anyway. Storing the token of the
// last write in a fence column and updating only where the stored value is
// lower turns such late writes into no-ops:
//
//	n, err := fence.Update(db.Table("stock").Where("id = ?", id), "fence",
//		lease.Token(), map[string]any{"n": gorm.Expr("n - 1")})
//	if errors.Is(err, fence.ErrStale) { /* a newer holder has written */ }
package fence

import (
	"errors"
	"fmt"
	"maps"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// ErrStale is returned by Update when it changed no row: the stored
// fence was not lower than the token (a later holder has written), or no
// row matched the caller's conditions.
var ErrStale = errors.New("cerberus: fenced write refused")

// Update makes a fenced write with gorm: it updates the rows tx
// selects (tx names the model or table and the conditions, as for any gorm
// update) only where the fence column holds a value lower than token, and
// sets that column to token together with values. The check and the write
// are one UPDATE statement, so a holder whose lease was lost, and whose
// token is therefore older than the current holder's, cannot overwrite the
// current holder's data:
//
//	n, err := fence.Update(db.Table("stock").Where("id = ?", id), "fence",
//		lease.Token(), map[string]any{"n": gorm.Expr("n - 1")})
//
// It returns the number of rows changed, and ErrStale when that is zero.
// Tokens of one engine and key strictly increase, so the fence column of a
// row must only ever be written with tokens of one key on one engine.
// The fence column must be a BIGINT UNSIGNED (or wider) column named by
// ASCII letters, digits and underscores.
func Update(tx *gorm.DB, column string, token uint64, values map[string]any) (int64, error) {
	if err := checkColumn(column); err != nil {
		return 0, err
	}
	v := maps.Clone(values)
	if v == nil {
		v = make(map[string]any, 1)
	}
	v[column] = token
	res := tx.Where(clause.Lt{Column: clause.Column{Name: column}, Value: token}).Updates(v)
	if res.Error != nil {
		return 0, res.Error
	}
	if res.RowsAffected == 0 {
		return 0, fmt.Errorf("%w: token %d is not above the stored %s", ErrStale, token, column)
	}
	return res.RowsAffected, nil
}

func checkColumn(c string) error {
	if c == "" || len(c) > 64 {
		return fmt.Errorf("fence: column %q must be 1 to 64 characters", c)
	}
	for i := 0; i < len(c); i++ {
		ch := c[i]
		if !(ch == '_' || ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9') {
			return fmt.Errorf("fence: column %q may hold only ASCII letters, digits and underscores", c)
		}
	}
	return nil
}
