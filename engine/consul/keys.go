package consul

import (
	"fmt"
	"strings"

	"github.com/cerberus-go/cerberus/engine"
)

// Layout of one lock key K under the prefix P, with E = EncodeKey(K):
//
//	P/E/lock      the lock document: held with the session by an exclusive
//	              holder, or unlocked and listing the shared holders
//	P/E/c-<id>    a shared holder's contender key, held with its session
//	P/E/w-...     a queued waiter's key, held with its session (see fair.go)
//	P/E/queue     exists while anyone queues: a writer's first attempt
//	              checks its absence in the grant transaction, so it never
//	              takes the key past the queue
//	P/E/fence     the key's fencing counter, the last token granted; kept
//	              after release (see fence.go)
//
// E never contains "/" or ".", so P/E/ is a prefix no other key shares, and
// no path segment is "." or ".." (which HTTP path cleaning would rewrite).
const (
	docName       = "lock"
	queueName     = "queue"
	contenderHead = "c-"
)

// EncodeKey maps a lock key to the single KV path segment that stores it.
// ASCII letters, digits and '-' stand for themselves; every other byte
// becomes '_' followed by two upper-case hex digits. The mapping is
// reversible (DecodeKey), injective, and its output is safe in an HTTP path
// and in a Consul KV key.
func EncodeKey(key string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(key) + len(key)/2)
	for i := 0; i < len(key); i++ {
		c := key[i]
		if plain(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('_')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// DecodeKey reverses EncodeKey. A string EncodeKey cannot have produced,
// including an escape of a byte that stands for itself (such as "_61" for
// "a"), is an error wrapping engine.ErrInvalidKey, so two KV segments
// never decode to the same key.
func DecodeKey(enc string) (string, error) {
	b := make([]byte, 0, len(enc))
	for i := 0; i < len(enc); i++ {
		c := enc[i]
		switch {
		case plain(c):
			b = append(b, c)
		case c == '_' && i+2 < len(enc):
			hi, ok1 := unhex(enc[i+1])
			lo, ok2 := unhex(enc[i+2])
			if !ok1 || !ok2 || plain(hi<<4|lo) {
				return "", fmt.Errorf("%w: consul: bad escape at byte %d of %q", engine.ErrInvalidKey, i, enc)
			}
			b = append(b, hi<<4|lo)
			i += 2
		default:
			return "", fmt.Errorf("%w: consul: byte %d of %q is not part of an encoded key",
				engine.ErrInvalidKey, i, enc)
		}
	}
	return string(b), nil
}

func plain(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-'
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// checkPrefix refuses prefixes that would not give one plain KV folder.
func checkPrefix(p string) error {
	if p == "" || strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/") {
		return fmt.Errorf("consul: prefix %q must be non-empty and must not start or end with '/'", p)
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("consul: prefix %q has an empty, '.' or '..' segment", p)
		}
		for i := 0; i < len(seg); i++ {
			c := seg[i]
			if !plain(c) && c != '_' && c != '.' {
				return fmt.Errorf("consul: prefix %q may hold only ASCII letters, digits, '-', '_', '.' and "+
					"'/'", p)
			}
		}
	}
	return nil
}

// keyDir is P/E/, the folder of everything stored for key.
func (e *Engine) keyDir(key string) string { return e.cfg.prefix + "/" + EncodeKey(key) + "/" }

// KeyDir returns the KV folder (ending in '/') under which the engine
// stores everything for key: its lock document, contender keys and fencing
// counter. Tools and
// tests use it to look at a lock from outside.
func (e *Engine) KeyDir(key string) string { return e.keyDir(key) }
