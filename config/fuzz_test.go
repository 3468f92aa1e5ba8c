package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"
	"github.com/spf13/viper"
)

// Secrets of the fuzz inputs. The seeds write fuzzSecret as inline
// passwords, tokens and DSN passwords; the fuzzer moves it around. It is
// lower-case and dot-free so that viper, which lower-cases keys and splits
// them at dots, never changes it. fuzzEnvSecret is what password_env and
// token_env seeds resolve to; the file secret is testdata/redis.pass.
const (
	fuzzSecret    = "zq7xk2pw9wsecret"
	fuzzEnvSecret = "fuzz-env-token-r8v"
	fuzzEnv       = "CERBERUS_FUZZ_SECRET"
)

// FuzzParse: Parse, given any bytes as YAML, as TOML and as JSON, never
// panics, and
//
//   - either refuses them with a non-empty error wrapping ErrInvalid that
//     contains no secret of the input (see fuzzSecretPlaced for what
//     counts as one) and none of the resolved file or environment secrets,
//   - or returns a valid Config that round-trips: written back out with
//     viper's writer (the one SetEngine uses) in each of YAML, TOML and
//     JSON, every field under its mapstructure key, and parsed again, it
//     gives a Config reflect.DeepEqual to the first, including the secrets
//     resolved from files and environment variables (unexported fields).
//     The one exception: JSON carries numbers as float64, so the JSON
//     round trip is skipped when an integer setting is beyond 2^53.
//
// Parsing the same bytes twice gives the same Config: a key written twice
// in different case (viper folds case) must not pick a random winner. Any
// other format name is refused with an error that names it.
func FuzzParse(f *testing.F) {
	fileSecret, err := os.ReadFile("testdata/redis.pass")
	if err != nil {
		f.Fatal(err)
	}
	resolved := []string{strings.TrimRight(string(fileSecret), "\r\n"), fuzzEnvSecret}
	f.Setenv(fuzzEnv, fuzzEnvSecret)
	// The token_env of the full.* fixtures.
	f.Setenv("CERBERUS_TEST_CONSUL_TOKEN", fuzzEnvSecret)
	for _, name := range []string{"full.yaml", "full.toml", "full.json", "minimal.yaml"} {
		data, err := os.ReadFile("testdata/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("engines:\n  - {name: r, kind: redis, addrs: [\"h:1\"], password: " + fuzzSecret + "}\n"))
	f.Add([]byte(`{"engines": [{"name": "c", "kind": "consul", "addrs": ["h:1"], "token": "` + fuzzSecret + `"}]}`))
	f.Add([]byte("[[engines]]\nname = \"d\"\nkind = \"mysql\"\ndsn = \"u:" + fuzzSecret + "@tcp(h:3306)/db\"\n"))
	f.Add([]byte("engines:\n  - {name: r, kind: redis, addrs: [\"h:1\"], password_env: " + fuzzEnv + "}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if fuzzReadsDevice(data) {
			return
		}
		if _, err := Parse(data, "ini"); err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `"ini"`) {
			t.Fatalf("Parse(ini) = %v: want ErrInvalid naming the format", err)
		}
		for _, format := range []string{"yaml", "toml", "json"} {
			fuzzParse(t, format, data, resolved)
		}
	})
}

// fuzzParse checks FuzzParse's properties for data in format.
func fuzzParse(t *testing.T, format string, data []byte, resolved []string) {
	t.Helper()
	cfg, err := Parse(data, format)
	if err != nil {
		if cfg != nil {
			t.Fatalf("Parse returned both a Config and %v", err)
		}
		msg := err.Error()
		if msg == "" || !errors.Is(err, ErrInvalid) {
			t.Fatalf("Parse(%s, %q) = %q: want a non-empty error wrapping ErrInvalid", format, data, msg)
		}
		lower := strings.ToLower(string(data))
		for _, s := range resolved {
			if strings.Contains(msg, s) && !strings.Contains(lower, strings.ToLower(s)) {
				t.Fatalf("Parse(%s, %q): the error shows a resolved secret:\n%s", format, data, msg)
			}
		}
		if strings.Contains(msg, fuzzSecret) && fuzzSecretPlaced(format, data) {
			t.Fatalf("Parse(%s, %q): the error shows the secret %q:\n%s", format, data, fuzzSecret, msg)
		}
		return
	}
	if cfg == nil {
		t.Fatalf("Parse(%s, %q) = nil, nil", format, data)
	}
	if again, err := Parse(data, format); err != nil || !reflect.DeepEqual(cfg, again) {
		t.Fatalf("Parse(%s, %q) twice: %#v, then %#v, %v", format, data, cfg, again, err)
	}
	for _, out := range []string{"yaml", "toml", "json"} {
		if out == "json" && !fuzzFitsFloat(reflect.ValueOf(*cfg)) {
			continue
		}
		text, err := fuzzWrite(cfg, out)
		if err != nil {
			t.Fatalf("writing %#v as %s: %v", cfg, out, err)
		}
		back, err := Parse(text, out)
		if err != nil {
			t.Fatalf("Parse(%s, %q) = %#v, written as %s:\n%s\ndoes not parse: %v", format, data, cfg, out, text, err)
		}
		if !reflect.DeepEqual(cfg, back) {
			t.Fatalf("Parse(%s, %q) = %#v, written as %s:\n%s\nparses as %#v", format, data, cfg, out, text, back)
		}
	}
}

// fuzzReadsDevice reports whether data might name a device or kernel file
// as password_file or token_file (/dev/zero would never end), or hide the
// path in an escape sequence. Such inputs are skipped.
func fuzzReadsDevice(data []byte) bool {
	l := strings.ToLower(string(data))
	if !strings.Contains(l, "_file") {
		return false
	}
	return strings.ContainsAny(l, "\\&*") || strings.Contains(l, "/dev") || strings.Contains(l, "/proc") ||
		strings.Contains(l, "/sys") || strings.Contains(l, "/run")
}

// fuzzSecretPlaced reports whether every occurrence of fuzzSecret in data
// is a secret the package promises never to print:
//
//   - if data parses as format, each occurrence must lie inside a value
//     under a password or token key (at any depth, in any case), or inside
//     the password of a DSN (all of it, if the DSN does not parse);
//   - if it does not parse, which value is which is unknown; an occurrence
//     counts as a secret if its line names a password, token or DSN, the
//     rule the package documents for unparsable input.
//
// Anywhere else (an engine name, a key, a comment) the secret is just text
// that an error may quote.
func fuzzSecretPlaced(format string, data []byte) bool {
	if !bytes.Contains(data, []byte(fuzzSecret)) {
		return false
	}
	v := viper.NewWithOptions(viper.KeyDelimiter("."))
	v.SetConfigType(format)
	if err := v.ReadConfig(bytes.NewReader(data)); err != nil {
		for _, line := range strings.Split(string(data), "\n") {
			l := strings.ToLower(line)
			if strings.Contains(l, fuzzSecret) && !strings.Contains(l, "password") && !strings.Contains(l, "token") && !strings.Contains(l, "dsn") {
				return false
			}
		}
		return true
	}
	secret, elsewhere := 0, 0
	var walk func(key string, val any, inSecret bool)
	walk = func(key string, val any, inSecret bool) {
		elsewhere += strings.Count(key, fuzzSecret)
		k := strings.ToLower(key)
		inSecret = inSecret || k == "password" || k == "token"
		switch x := val.(type) {
		case map[string]any:
			for k, v := range x {
				walk(k, v, inSecret)
			}
		case []any:
			for _, v := range x {
				walk("", v, inSecret)
			}
		default:
			s := fmt.Sprint(x)
			n := strings.Count(s, fuzzSecret)
			switch {
			case inSecret:
				secret += n
			case k == "dsn":
				if c, err := mysqldrv.ParseDSN(s); err != nil || strings.Contains(c.Passwd, fuzzSecret) {
					secret += n
				} else {
					elsewhere += n
				}
			default:
				elsewhere += n
			}
		}
	}
	walk("", v.AllSettings(), false)
	return secret > 0 && elsewhere == 0
}

// fuzzWrite writes cfg in format with viper's writer. Every field goes
// under its mapstructure key, nil pointers and slices left out (a nil
// LockDelay means the engine's default, unlike an explicit 0s), and
// durations as Go duration strings.
func fuzzWrite(cfg *Config, format string) ([]byte, error) {
	v := viper.NewWithOptions(viper.KeyDelimiter("."))
	v.SetConfigType(format)
	m, _ := fuzzValue(reflect.ValueOf(*cfg)).(map[string]any)
	if err := v.MergeConfigMap(m); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	err := v.WriteConfigTo(&b)
	return b.Bytes(), err
}

var fuzzDuration = reflect.TypeOf(time.Duration(0))

func fuzzValue(v reflect.Value) any {
	if v.Type() == fuzzDuration {
		return time.Duration(v.Int()).String()
	}
	switch v.Kind() {
	case reflect.Struct:
		m := map[string]any{}
		for i := 0; i < v.NumField(); i++ {
			key := v.Type().Field(i).Tag.Get("mapstructure")
			fv := v.Field(i)
			if key == "" || (fv.Kind() == reflect.Pointer || fv.Kind() == reflect.Slice) && fv.IsNil() {
				continue
			}
			m[key] = fuzzValue(fv)
		}
		return m
	case reflect.Pointer:
		return fuzzValue(v.Elem())
	case reflect.Slice:
		out := make([]any, v.Len())
		for i := range out {
			out[i] = fuzzValue(v.Index(i))
		}
		return out
	}
	return v.Interface()
}

// fuzzFitsFloat reports whether every integer in v survives a float64.
func fuzzFitsFloat(v reflect.Value) bool {
	const max = 1 << 53
	switch v.Kind() {
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() && !fuzzFitsFloat(v.Field(i)) {
				return false
			}
		}
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			if !fuzzFitsFloat(v.Index(i)) {
				return false
			}
		}
	case reflect.Pointer:
		return v.IsNil() || fuzzFitsFloat(v.Elem())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if v.Type() != fuzzDuration {
			return v.Int() >= -max && v.Int() <= max
		}
	}
	return true
}
