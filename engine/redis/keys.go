package redis

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// lockKeys are the Redis keys of one lock, all in one hash slot.
type lockKeys struct {
	w, r, ww, q, f, c, h, rw string
}

func (e *Engine) keysOf(key string) lockKeys {
	var tag string
	if strings.ContainsRune(key, '}') {
		sum := sha256.Sum256([]byte(key))
		tag = "{h:" + hex.EncodeToString(sum[:]) + "}"
	} else {
		tag = "{k:" + key + "}"
	}
	// One allocation for all eight names: each is a slice of the same
	// string.
	p := e.opts.prefix
	all := p + tag + ":w" + p + tag + ":r" + p + tag + ":ww" + p + tag + ":q" + p + tag + ":f" + p +
		tag + ":c" + p + tag + ":h" + p + tag + ":rw"
	n, i := len(p)+len(tag), 0
	cut := func(suffix int) string {
		s := all[i : i+n+suffix]
		i += n + suffix
		return s
	}
	return lockKeys{w: cut(2), r: cut(2), ww: cut(3), q: cut(2), f: cut(2), c: cut(2), h: cut(2),
		rw: cut(3)}
}

// stateKeys are the keys that exist only while the lock is held or waited
// on (everything but the fencing counter).
func (k lockKeys) stateKeys() []string { return []string{k.w, k.r, k.ww, k.q, k.h, k.rw} }
