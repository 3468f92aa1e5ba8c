package redis

import (
	"strings"
	"testing"
)

// FuzzKeysOf: whatever the key, a lock's six names share one hash tag (the
// text between the first '{' and the first '}' after it), so every script
// stays in one Cluster slot, and distinct keys get distinct names.
func FuzzKeysOf(f *testing.F) {
	for _, seed := range [][2]string{{"a", "b"}, {"}", "{}"}, {"a}b{c", "a}b"}, {"{x}:y", "x"}, {"k:a", "a"}} {
		f.Add(seed[0], seed[1])
	}
	e := &Engine{opts: options{prefix: "cerberus:"}}
	tagOf := func(name string) string {
		i := strings.IndexByte(name, '{')
		j := strings.IndexByte(name[i+1:], '}')
		if i < 0 || j <= 0 {
			return ""
		}
		return name[i+1 : i+1+j]
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ka := e.keysOf(a)
		tag := tagOf(ka.w)
		if tag == "" {
			t.Fatalf("key %q: %q has no usable hash tag", a, ka.w)
		}
		for _, name := range []string{ka.r, ka.ww, ka.q, ka.f, ka.c} {
			if tagOf(name) != tag {
				t.Fatalf("key %q: %q and %q hash to different tags", a, ka.w, name)
			}
		}
		if a != b && e.keysOf(b).w == ka.w {
			t.Fatalf("keys %q and %q share the name %q", a, b, ka.w)
		}
	})
}
