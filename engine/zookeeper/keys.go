package zookeeper

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/cerberus-go/cerberus/engine"
)

// EncodeKey maps a lock key to the znode name of its lock node, the parent
// of the key's queue. The mapping is percent-encoding of the bytes ZooKeeper
// cannot hold in one path component, and nothing else:
//
//   - '%' becomes "%25" and '/' becomes "%2F", so the escaped key is one
//     component and the mapping is reversible;
//   - every UTF-8 byte of a rune the server refuses in a path is written as
//     %XX: control characters (U+0000–U+001F, U+007F–U+009F), U+D800–U+F8FF,
//     U+FFF0–U+FFFF, and runes above U+FFFF (the server checks UTF-16 code
//     units, so their surrogates are refused);
//   - the names "." and ".." become "%2E" and "%2E%2E".
//
// Every other byte is kept, so readable keys stay readable in zkCli.
// DecodeKey reverses it. The key must be valid UTF-8; CheckKey-valid keys
// always are.
func EncodeKey(key string) string {
	if key == "." || key == ".." {
		return strings.Repeat("%2E", len(key))
	}
	clean := true
	for _, r := range key {
		if needsEscape(r) {
			clean = false
			break
		}
	}
	if clean {
		return key
	}
	var b strings.Builder
	b.Grow(len(key) + 16)
	for i := 0; i < len(key); {
		r, n := utf8.DecodeRuneInString(key[i:])
		if !needsEscape(r) {
			b.WriteString(key[i : i+n])
		} else {
			for j := range n {
				b.WriteByte('%')
				b.WriteByte(hexDigits[key[i+j]>>4])
				b.WriteByte(hexDigits[key[i+j]&15])
			}
		}
		i += n
	}
	return b.String()
}

const hexDigits = "0123456789ABCDEF"

// needsEscape reports whether r cannot appear as itself in an escaped name.
func needsEscape(r rune) bool {
	switch {
	case r == '%', r == '/', r == utf8.RuneError:
		return true
	case r <= 0x1F, r >= 0x7F && r <= 0x9F:
		return true
	case r >= 0xD800 && r <= 0xF8FF, r >= 0xFFF0:
		return true
	}
	return false
}

// DecodeKey reverses EncodeKey. It returns an error wrapping
// engine.ErrInvalidKey for a name EncodeKey cannot have produced.
func DecodeKey(name string) (string, error) {
	key, err := unescape(name)
	if err != nil {
		return "", err
	}
	// Refuse what EncodeKey would have escaped, or escaped differently
	// ("%61", "%2f", "a/b", "."), so that no two names decode to one key.
	if again := EncodeKey(key); again != name {
		return "", fmt.Errorf("%w: znode name %q is not an escaped key (its key escapes to %q)",
			engine.ErrInvalidKey, name, again)
	}
	return key, nil
}

func unescape(name string) (string, error) {
	if !strings.Contains(name, "%") {
		return name, nil
	}
	var b strings.Builder
	b.Grow(len(name))
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(name) {
			return "", fmt.Errorf("%w: truncated escape in znode name %q", engine.ErrInvalidKey, name)
		}
		hi, ok1 := unhex(name[i+1])
		lo, ok2 := unhex(name[i+2])
		if !ok1 || !ok2 {
			return "", fmt.Errorf("%w: bad escape in znode name %q", engine.ErrInvalidKey, name)
		}
		b.WriteByte(hi<<4 | lo)
		i += 2
	}
	key := b.String()
	if !utf8.ValidString(key) {
		return "", fmt.Errorf("%w: znode name %q decodes to invalid UTF-8", engine.ErrInvalidKey, name)
	}
	return key, nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}
