package redis

import (
	"strings"
	"testing"
)

// TestKeysShareOneTag: a lock's keys are prefix{tag}:suffix, with the tag
// from the key, or a hash of it when the key holds a '}', so that they all
// hash to one slot; different keys never share names.
func TestKeysShareOneTag(t *testing.T) {
	e := &Engine{opts: options{prefix: "p:"}}
	seen := map[string]string{}
	for _, key := range []string{"a", "order:42", "}", "a}b", "{x}", "订单"} {
		k := e.keysOf(key)
		tag := "{k:" + key + "}"
		if strings.ContainsRune(key, '}') {
			tag = k.w[len("p:") : strings.IndexByte(k.w, '}')+1]
			if !strings.HasPrefix(tag, "{h:") || len(tag) != len("{h:}")+64 {
				t.Fatalf("%q: hashed tag %q", key, tag)
			}
		}
		want := map[string]string{"w": k.w, "r": k.r, "ww": k.ww, "q": k.q, "f": k.f, "c": k.c, "h": k.h, "rw": k.rw,
			"x": k.x, "v": k.v, "cq": k.cq, "wt": k.wt}
		for sfx, got := range want {
			if got != "p:"+tag+":"+sfx {
				t.Errorf("%q: %s key = %q, want %q", key, sfx, got, "p:"+tag+":"+sfx)
			}
			if other, dup := seen[got]; dup {
				t.Errorf("%q and %q share the key name %q", key, other, got)
			}
			seen[got] = key
		}
	}
}
