package redis

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// lockKeys are the Redis keys of one lock, all in one hash slot.
type lockKeys struct {
	w, r, ww, q, f, c string
}

func (e *Engine) keysOf(key string) lockKeys {
	var tag string
	if strings.ContainsRune(key, '}') {
		sum := sha256.Sum256([]byte(key))
		tag = "{h:" + hex.EncodeToString(sum[:]) + "}"
	} else {
		tag = "{k:" + key + "}"
	}
	base := e.opts.prefix + tag
	return lockKeys{w: base + ":w", r: base + ":r", ww: base + ":ww", q: base + ":q", f: base + ":f", c: base + ":c"}
}

// stateKeys are the keys that exist only while the lock is held or waited
// on (everything but the fencing counter).
func (k lockKeys) stateKeys() []string { return []string{k.w, k.r, k.ww, k.q} }
