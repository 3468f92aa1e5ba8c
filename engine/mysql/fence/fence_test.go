package fence

import (
	"testing"

	"gorm.io/gorm"
)

// TestBadColumn: a fence column name that is not a plain identifier is
// refused before the statement is built. The database round trip is
// covered by the MySQL engine's tests (TestFence in engine/mysql).
func TestBadColumn(t *testing.T) {
	for _, c := range []string{"", "fence`; DROP TABLE t; --", "a b", "f-1", string(make([]byte, 65))} {
		if _, err := Update(&gorm.DB{}, c, 1, nil); err == nil {
			t.Errorf("column %q was accepted", c)
		}
	}
}
