package engine

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Bounds of Lister.List.
const (
	// AllKeys is the prefix that asks List for every key. An empty
	// prefix is refused, so that a whole keyspace is never read by
	// mistake.
	AllKeys = "*"
	// DefaultListLimit is the number of keys List returns at most when
	// its limit is 0.
	DefaultListLimit = 1000
	// MaxListLimit is the largest limit List accepts.
	MaxListLimit = 10000
)

// ListedHolder is one lease that holds a listed key: a Holder and, where
// the server keeps them, when it was granted and when it expires.
type ListedHolder struct {
	Holder
	// Granted is when the server granted the lease; zero when the
	// engine cannot tell.
	Granted time.Time
	// Expires is when the lease runs out unless renewed; zero when the
	// engine cannot tell or the lease lasts as long as a session.
	Expires time.Time
}

// HeldKey is one key that Lister.List found held.
type HeldKey struct {
	// Key is the lock key, as callers passed it to Acquire.
	Key string
	// Holders are the leases that hold Key, in grant order (ascending
	// Token).
	Holders []ListedHolder
	// Waiters is the number of Acquire calls waiting for Key, or -1 when
	// the engine cannot count them.
	Waiters int
}

// Inventory is what Lister.List returns.
type Inventory struct {
	// Keys are the held keys, in ascending order of Key.
	Keys []HeldKey
	// More reports that more keys under the prefix may be held than the
	// limit let List return.
	More bool
}

// Lister is implemented by an Engine that can list the keys held under a
// prefix: the operator's view of the locks.
type Lister interface {
	// List returns the keys held now whose names begin with prefix
	// (AllKeys for every key), at most limit of them (DefaultListLimit
	// when limit is 0), with their holders as Inspector.Holders reports
	// them. Keys that are only waited on are not listed. The read is
	// bounded (paged or limited server reads; each engine's doc says
	// how), and it is not a snapshot: a key may change while List runs.
	// It checks its arguments with CheckList before any I/O, wrapping
	// ErrInvalidRequest, and reports server failures as *OpError.
	List(ctx context.Context, prefix string, limit int) (Inventory, error)
}

// ListerOf returns the Lister of e, looking through wrappers (Wrapper),
// or nil when e has none.
func ListerOf(e Engine) Lister { return lookThrough[Lister](e) }

// CheckList validates the arguments of Lister.List and returns the prefix
// to match ("" for AllKeys) and the limit to apply (DefaultListLimit for
// 0). An empty prefix, a prefix that is not a valid key (CheckKey with
// maxKeyLen), and a limit below 0 or above MaxListLimit are refused with
// an error wrapping ErrInvalidRequest.
func CheckList(prefix string, limit, maxKeyLen int) (string, int, error) {
	switch {
	case limit < 0 || limit > MaxListLimit:
		return "", 0, fmt.Errorf("%w: list limit %d is outside 0..%d", ErrInvalidRequest, limit, MaxListLimit)
	case limit == 0:
		limit = DefaultListLimit
	}
	switch prefix {
	case "":
		return "", 0, fmt.Errorf("%w: empty list prefix; use %q to list every key", ErrInvalidRequest, AllKeys)
	case AllKeys:
		return "", limit, nil
	}
	if err := CheckKey(prefix, maxKeyLen); err != nil {
		return "", 0, fmt.Errorf("%w: list prefix: %w", ErrInvalidRequest, err)
	}
	return prefix, limit, nil
}

// Collect builds an Inventory from keys found under prefix: it drops keys
// without the prefix or without holders, sorts the rest by Key and keeps
// the first limit, setting More when it dropped any for the limit or when
// more is already true (the server had more than the engine read).
func Collect(keys []HeldKey, prefix string, limit int, more bool) Inventory {
	keys = slices.DeleteFunc(keys, func(k HeldKey) bool {
		return len(k.Holders) == 0 || !strings.HasPrefix(k.Key, prefix)
	})
	slices.SortFunc(keys, func(a, b HeldKey) int { return cmp.Compare(a.Key, b.Key) })
	if len(keys) > limit {
		keys, more = keys[:limit], true
	}
	return Inventory{Keys: keys, More: more}
}

// Listed converts hs, as Inspector.Holders returns them, to ListedHolders
// with no times.
func Listed(hs []Holder) []ListedHolder {
	out := make([]ListedHolder, len(hs))
	for i, h := range hs {
		out[i] = ListedHolder{Holder: h}
	}
	return out
}

// PrefixEnd returns the end of a range read `>= prefix AND < end` that
// holds every key beginning with prefix (a valid UTF-8 string): the prefix
// with its last rune raised by one (past the surrogates, which UTF-8 does
// not encode), after dropping trailing runes that are utf8.MaxRune. In
// byte order, which is code point order for UTF-8, no key beginning with
// prefix reaches it, and it is valid UTF-8, as PostgreSQL's text needs.
// ok is false when there is no end (every rune is utf8.MaxRune).
func PrefixEnd(prefix string) (end string, ok bool) {
	rs := []rune(prefix)
	for i := len(rs) - 1; i >= 0; i-- {
		if rs[i] < utf8.MaxRune {
			rs[i]++
			if rs[i] == 0xD800 {
				rs[i] = 0xE000
			}
			return string(rs[:i+1]), true
		}
	}
	return "", false
}
