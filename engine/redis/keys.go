package redis

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/cerberus-go/cerberus/engine"
)

// lockKeys are the Redis keys of one lock, all in one hash slot.
type lockKeys struct {
	w, r, ww, q, f, c, h, rw string
	// Issue 17: x is the exclusive holder's "<id> <value>" (only when it
	// has a value), v the shared holders' "<token> <value>" by lease id,
	// cq the arrival queue of counted waiting readers, and wt the mark
	// that someone watches the key.
	x, v, cq, wt string
}

func (e *Engine) keysOf(key string) lockKeys { return e.keysOfTag(tagOf(key)) }

// keysOfTag builds the names from a key's hash tag (tagOf).
func (e *Engine) keysOfTag(tag string) lockKeys {
	// One allocation for all twelve names: each is a slice of the same
	// string.
	p := e.opts.prefix
	all := p + tag + ":w" + p + tag + ":r" + p + tag + ":ww" + p + tag + ":q" + p + tag + ":f" + p +
		tag + ":c" + p + tag + ":h" + p + tag + ":rw" + p + tag + ":x" + p + tag + ":v" + p + tag +
		":cq" + p + tag + ":wt"
	n, i := len(p)+len(tag), 0
	cut := func(suffix int) string {
		s := all[i : i+n+suffix]
		i += n + suffix
		return s
	}
	return lockKeys{w: cut(2), r: cut(2), ww: cut(3), q: cut(2), f: cut(2), c: cut(2), h: cut(2),
		rw: cut(3), x: cut(2), v: cut(2), cq: cut(3), wt: cut(3)}
}

// tagOf is the hash tag that puts every key of a lock in one slot: the
// key itself, or its SHA-256 if it holds a '}', which would end the tag.
func tagOf(key string) string {
	if strings.ContainsRune(key, '}') {
		sum := sha256.Sum256([]byte(key))
		return "{h:" + hex.EncodeToString(sum[:]) + "}"
	}
	return "{k:" + key + "}"
}

// renewKeys are the two keys a renewal of key names: :w and :x for a
// writer, :r and :v for a reader (keysOf's names, built alone, so that a
// renewal round does not build all twelve for every lease).
func (e *Engine) renewKeys(key string, mode engine.Mode) []string {
	a, b := ":w", ":x"
	if mode == engine.Shared {
		a, b = ":r", ":v"
	}
	base := e.opts.prefix + tagOf(key)
	both := base + a + base + b
	return []string{both[:len(base)+2], both[len(base)+2:]}
}

// stateKeys are the keys that exist only while the lock is held or waited
// on (everything but the fencing counter and the watch mark, which
// expires by itself).
func (k lockKeys) stateKeys() []string {
	return []string{k.w, k.r, k.ww, k.q, k.h, k.rw, k.x, k.v, k.cq}
}
