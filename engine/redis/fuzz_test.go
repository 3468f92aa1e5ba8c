package redis

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cerberus-go/cerberus/engine"
)

// FuzzKeysOf: for every prefix New accepts (no brace) and every key,
// keysOf never panics and
//
//   - each of the six names is exactly prefix + "{" + tag + "}:" + suffix,
//     with the suffixes w, r, ww, q, f, c;
//   - Redis Cluster's hash tag of every name (the text between the first
//     '{' and the first '}' after it) is that tag, so all six hash to one
//     slot;
//   - a key without '}' is stored verbatim: the tag is "k:" + key, and
//     decoding it gives the key back byte for byte; a key with '}' (which
//     would end the tag early) has the tag "h:" + hex(SHA-256(key)), so no
//     name ever depends on anything but the key;
//   - distinct keys get distinct names (the second key is fuzzed too).
//
// Keys the engine refuses are refused by Validate, before keysOf, with an
// error wrapping engine.ErrInvalidKey.
func FuzzKeysOf(f *testing.F) {
	for _, seed := range [][3]string{
		{"cerberus:", "a", "b"}, {"cerberus:", "}", "{}"}, {"cerberus:", "a}b{c", "a}b"},
		{"cerberus:", "{x}:y", "x"}, {"cerberus:", "k:a", "a"}, {"", "h:" + strings.Repeat("0", 64), "}"},
		{"app:", "{", "{{"}, {"p", ":w", ""},
	} {
		f.Add(seed[0], seed[1], seed[2])
	}
	suffixes := []string{"w", "r", "ww", "q", "f", "c"}
	f.Fuzz(func(t *testing.T, prefix, a, b string) {
		if strings.ContainsAny(prefix, "{}") {
			// New refuses it before starting anything; a typed nil
			// client is enough to get that far.
			_, err := New((*goredis.Client)(nil), WithPrefix(prefix))
			if !errors.Is(err, engine.ErrInvalidRequest) || !strings.Contains(err.Error(), "brace") {
				t.Fatalf("New(WithPrefix(%q)) = %v: want ErrInvalidRequest naming the brace", prefix, err)
			}
			return
		}
		e := &Engine{opts: options{prefix: prefix}}
		if err := e.Validate(engine.Request{Key: a, Mode: engine.Exclusive, TTL: engine.MinTTL}); err != nil {
			if engine.CheckKey(a, engine.MaxKeyLen) == nil || !errors.Is(err, engine.ErrInvalidKey) {
				t.Fatalf("Validate(%q) = %v: want CheckKey's verdict, wrapping ErrInvalidKey", a, err)
			}
		} else if engine.CheckKey(a, engine.MaxKeyLen) != nil {
			t.Fatalf("Validate accepts %q, which CheckKey refuses", a)
		}
		ka := e.keysOf(a)
		names := []string{ka.w, ka.r, ka.ww, ka.q, ka.f, ka.c}
		tag := clusterTag(ka.w)
		for i, name := range names {
			if want := prefix + "{" + tag + "}:" + suffixes[i]; name != want {
				t.Fatalf("key %q: name %q, want %q", a, name, want)
			}
			if clusterTag(name) != tag {
				t.Fatalf("key %q: %q and %q hash to different tags", a, ka.w, name)
			}
		}
		if got, ok := decodeTag(tag); !strings.ContainsRune(a, '}') {
			if !ok || got != a {
				t.Fatalf("key %q: tag %q decodes to %q, %v", a, tag, got, ok)
			}
		} else if sum := sha256.Sum256([]byte(a)); tag != "h:"+hex.EncodeToString(sum[:]) {
			t.Fatalf("key %q with a '}': tag %q is not its hash", a, tag)
		}
		if a != b {
			kb := e.keysOf(b)
			for i, name := range []string{kb.w, kb.r, kb.ww, kb.q, kb.f, kb.c} {
				if name == names[i] {
					t.Fatalf("keys %q and %q share the name %q", a, b, name)
				}
			}
		}
	})
}

// clusterTag returns what Redis Cluster hashes for name: the text between
// the first '{' and the first '}' after it, if non-empty, else "" (the
// whole name is hashed, which the engine never relies on).
func clusterTag(name string) string {
	i := strings.IndexByte(name, '{')
	if i < 0 {
		return ""
	}
	j := strings.IndexByte(name[i+1:], '}')
	if j <= 0 {
		return ""
	}
	return name[i+1 : i+1+j]
}

// decodeTag reverses the verbatim form of a tag: "k:" + key.
func decodeTag(tag string) (string, bool) {
	return strings.CutPrefix(tag, "k:")
}
