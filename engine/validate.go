package engine

import (
	"fmt"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"
)

// Common bounds. Engines may be stricter and say so in their Limits.
const (
	// MaxKeyLen is the longest key any engine must accept, in bytes.
	MaxKeyLen = 512
	// MinTTL is the shortest lease any engine must accept.
	MinTTL = 10 * time.Millisecond
	// MaxTTL is the longest lease any engine must accept.
	MaxTTL = 7 * 24 * time.Hour
	// MaxLimit is the largest Request.Limit: the most permits a semaphore
	// may have.
	MaxLimit = 10000
	// MaxValueLen is the longest Request.Value, in bytes.
	MaxValueLen = 256
)

// Common is the Limits value of an engine that accepts exactly the common
// bounds above.
var Common = Limits{MaxKeyLen: MaxKeyLen, MinTTL: MinTTL, MaxTTL: MaxTTL}

// CheckKey reports whether key is a valid lock key: non-empty, at most
// maxLen bytes, valid UTF-8, and free of control characters (including NUL),
// which several servers cannot store. The error wraps ErrInvalidKey.
func CheckKey(key string, maxLen int) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	case len(key) > maxLen:
		return fmt.Errorf("%w: key is %d bytes, the limit is %d", ErrInvalidKey, len(key), maxLen)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: key %s is not valid UTF-8", ErrInvalidKey, quote(key))
	}
	for i, r := range key {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: key %s has a control character at byte %d", ErrInvalidKey, quote(key), i)
		}
	}
	return nil
}

// CheckValue reports whether v is a valid Request.Value: at most
// MaxValueLen bytes of valid UTF-8 without control characters. The error
// wraps ErrInvalidRequest.
func CheckValue(v string) error {
	switch {
	case len(v) > MaxValueLen:
		return fmt.Errorf("%w: value is %d bytes, the limit is %d", ErrInvalidRequest, len(v), MaxValueLen)
	case !utf8.ValidString(v):
		return fmt.Errorf("%w: value %s is not valid UTF-8", ErrInvalidRequest, quote(v))
	}
	for i, r := range v {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: value %s has a control character at byte %d", ErrInvalidRequest, quote(v), i)
		}
	}
	return nil
}

// CheckRequest validates req against lim: the key with CheckKey, the mode
// (Exclusive only when lim.ExclusiveOnly), the limit (0, or 1..MaxLimit on a Shared request to an engine whose
// lim.Counted is true), the value with
// CheckValue, and the TTL within [lim.MinTTL, lim.MaxTTL]. Engines call it first in
// Validate and add their own rules after it.
func CheckRequest(req Request, lim Limits) error {
	if err := CheckKey(req.Key, lim.MaxKeyLen); err != nil {
		return err
	}
	if req.Mode != Exclusive && req.Mode != Shared {
		return fmt.Errorf("%w: unknown %v", ErrInvalidRequest, req.Mode)
	}
	if req.Mode == Shared && lim.ExclusiveOnly {
		return fmt.Errorf("%w: this engine grants exclusive leases only (no shared or counted requests)",
			ErrInvalidRequest)
	}
	if req.Limit < 0 || req.Limit > MaxLimit {
		return fmt.Errorf("%w: limit %d is outside [1, %d]", ErrInvalidRequest, req.Limit, MaxLimit)
	}
	if req.Limit > 0 && req.Mode != Shared {
		return fmt.Errorf("%w: a limit needs a shared request", ErrInvalidRequest)
	}
	if req.Limit > 0 && !lim.Counted {
		return fmt.Errorf("%w: this engine has no counted mode (Request.Limit)", ErrInvalidRequest)
	}
	if err := CheckValue(req.Value); err != nil {
		return err
	}
	if req.TTL < lim.MinTTL && lim.MinTTL == lim.Floor {
		return fmt.Errorf("%w: %v is below the engine's floor of %v: a holder that stops talking keeps "+
			"its key that long, whatever the lease period",
			ErrInvalidTTL, req.TTL, lim.Floor)
	}
	if req.TTL < lim.MinTTL || req.TTL > lim.MaxTTL {
		return fmt.Errorf("%w: %v is outside [%v, %v]", ErrInvalidTTL, req.TTL, lim.MinTTL, lim.MaxTTL)
	}
	return nil
}

// quote quotes a key for an error message, shortened so that a 512-byte key
// does not flood logs.
func quote(key string) string {
	const max = 64
	if len(key) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(key[cut]) {
			cut--
		}
		return strconv.Quote(key[:cut]) + "..."
	}
	return strconv.Quote(key)
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

// Margin is how long before a lease's server-side expiry an engine ends it
// locally, when the server expires leases on its own clock (Redis keys,
// MySQL lease rows): a tenth of the TTL, at least 5ms and at most 2s. The
// server's TTL starts when it runs the grant or renewal, after the engine
// sent it, so ending the lease at send time + TTL is right only if the
// engine's timer fires on time. On a loaded machine timers and goroutines
// run late (the reliability checker saw 20ms at a 1s TTL); the margin
// keeps Done ahead of any other holder's grant through such delays. A
// process stopped for longer than the margin needs the fencing token.
func Margin(ttl time.Duration) time.Duration {
	return min(max(ttl/10, 5*time.Millisecond), 2*time.Second)
}
