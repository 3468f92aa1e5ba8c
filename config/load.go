package config

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"
)

// EnvPrefix is the prefix of the environment variables Load reads.
const EnvPrefix = "CERBERUS"

// envKeys are the keys Load overrides from CERBERUS_<KEY> (dots become
// underscores).
var envKeys = []string{
	"engine", "auto", "single_process", "failback", "fence",
	"health.interval", "health.threshold",
	"lease.ttl", "lease.watchdog", "lease.hold_limit",
}

// formats maps file extensions to viper config types.
var formats = map[string]string{".yaml": "yaml", ".yml": "yaml", ".toml": "toml", ".json": "json"}

// Load reads the configuration file at path (YAML, TOML or JSON, by its
// extension: .yaml, .yml, .toml, .json), applies the CERBERUS_* environment
// overrides listed in the package documentation, resolves secret files and
// environment variables, and validates the result. Errors wrap ErrInvalid,
// except a file that cannot be read, whose error wraps the *fs.PathError.
func Load(path string) (*Config, error) {
	format, err := formatOf(path)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return parse(data, format, true)
}

// Parse reads configuration from data in format ("yaml", "toml" or "json"),
// resolves secret files and environment variables, and validates the
// result. Unlike Load it applies no CERBERUS_* overrides. Errors wrap
// ErrInvalid.
func Parse(data []byte, format string) (*Config, error) {
	return parse(data, format, false)
}

func formatOf(path string) (string, error) {
	ext := strings.ToLower(filepath.Ext(path))
	if f, ok := formats[ext]; ok {
		return f, nil
	}
	return "", fmt.Errorf("%w: %s: unsupported extension %q (want .yaml, .yml, .toml or .json)",
		ErrInvalid, path, ext)
}

func parse(data []byte, format string, env bool) (*Config, error) {
	switch format {
	case "yaml", "yml", "toml", "json":
	default:
		return nil, fmt.Errorf("%w: unsupported format %q (want yaml, toml or json)", ErrInvalid, format)
	}
	v := viper.NewWithOptions(viper.KeyDelimiter("."))
	v.SetConfigType(format)
	if err := v.ReadConfig(bytes.NewReader(data)); err != nil {
		// Parser messages name lines and tokens, but be safe: nothing
		// of the input is known to be secret yet, so keep only the text.
		return nil, fmt.Errorf("%w: %s: %s", ErrInvalid, format, scrub(err.Error(), scanSecrets(data)))
	}
	if env {
		for _, k := range envKeys {
			_ = v.BindEnv(k, EnvPrefix+"_"+strings.ToUpper(strings.ReplaceAll(k, ".", "_")))
		}
	}
	raw := v.AllSettings()
	secrets := rawSecrets(raw)

	cfg := defaults()
	var md mapstructure.Metadata
	dec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		DecodeHook:       mapstructure.ComposeDecodeHookFunc(durationHook, wholeNumberHook),
		WeaklyTypedInput: true, // environment values are strings
		Metadata:         &md,
		Result:           &cfg,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	var errs []error
	decodeErr := dec.Decode(raw)
	if decodeErr != nil {
		errs = append(errs, decodeErrors(decodeErr, secrets)...)
	}
	sort.Strings(md.Unused)
	for _, k := range md.Unused {
		errs = append(errs, invalidf("%s: unknown key", k))
	}
	if decodeErr != nil {
		// Fields that did not decode would be reported again, wrongly.
		return nil, errors.Join(errs...)
	}
	// Unknown keys leave the rest intact: report its problems too.
	errs = append(errs, cfg.resolveSecrets()...)
	errs = append(errs, cfg.validate()...)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &cfg, nil
}

var durationType = reflect.TypeOf(time.Duration(0))

// durationHook decodes Go duration strings and refuses numbers, which
// would otherwise be read as nanoseconds.
func durationHook(from, to reflect.Type, data any) (any, error) {
	if to != durationType {
		return data, nil
	}
	switch d := data.(type) {
	case string:
		v, err := time.ParseDuration(strings.TrimSpace(d))
		if err != nil {
			return nil, fmt.Errorf("want a Go duration such as \"1s\" or \"250ms\", got %q", d)
		}
		return v, nil
	case time.Duration:
		return d, nil
	default:
		return nil, fmt.Errorf("want a Go duration string such as \"1s\", got %v (%T)", data, data)
	}
}

// wholeNumberHook refuses a number with a fraction for an integer setting
// (max_conns: 12.7, say), which the weakly typed decoder would otherwise
// truncate without a word.
func wholeNumberHook(from, to reflect.Type, data any) (any, error) {
	if to == durationType {
		return data, nil
	}
	switch to.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
	default:
		return data, nil
	}
	var f float64
	switch d := data.(type) {
	case float64:
		f = d
	case float32:
		f = float64(d)
	default:
		return data, nil
	}
	if f != math.Trunc(f) || math.IsInf(f, 0) {
		return nil, fmt.Errorf("want a whole number, got %v", f)
	}
	return data, nil
}

// decodeErrors splits mapstructure's joined errors, one per field, each
// scrubbed of secrets.
func decodeErrors(err error, secrets []string) []error {
	var out []error
	var walk func(error)
	walk = func(err error) {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		out = append(out, invalidf("%s", fieldMessage(scrub(err.Error(), secrets))))
	}
	walk(err)
	return out
}

// fieldMessage turns mapstructure's "decoding failed due to the following
// error(s):\n\n'engines[0].fair' cannot parse ..." into
// "engines[0].fair: cannot parse ...".
func fieldMessage(msg string) string {
	msg = strings.TrimSpace(msg)
	if i := strings.LastIndex(msg, "\n"); i >= 0 {
		msg = strings.TrimSpace(msg[i+1:])
	}
	if strings.HasPrefix(msg, "'") {
		if end := strings.Index(msg[1:], "'"); end >= 0 {
			key, rest := msg[1:1+end], strings.TrimSpace(msg[2+end:])
			if key != "" {
				return key + ": " + rest
			}
		}
	}
	return msg
}

// rawSecrets collects the secret values written inline in the settings, so
// that decode errors can be scrubbed of them.
func rawSecrets(raw map[string]any) []string {
	var out []string
	if k, ok := raw["engine_key"].(map[string]any); ok {
		for name, v := range k {
			if strings.ToLower(name) == "token" {
				out = append(out, fmt.Sprint(v))
			}
		}
	}
	list, _ := raw["engines"].([]any)
	for _, item := range list {
		m, ok := item.(map[string]any)
		if !ok {
			continue
		}
		for k, v := range m {
			switch strings.ToLower(k) {
			case "password", "token":
				out = append(out, fmt.Sprint(v))
			case "dsn":
				s := fmt.Sprint(v)
				out = append(out, s, dsnPassword(s))
			}
		}
	}
	return out
}

// scanSecrets is a last resort for input that did not parse: it guesses
// the values of lines that mention a password, token or DSN.
func scanSecrets(data []byte) []string {
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		l := strings.ToLower(line)
		if !strings.Contains(l, "password") && !strings.Contains(l, "token") &&
			!strings.Contains(l, "dsn") {
			continue
		}
		if i := strings.IndexAny(line, ":="); i >= 0 {
			v := strings.Trim(strings.TrimSpace(line[i+1:]), `"',`)
			out = append(out, v, dsnPassword(v))
		}
	}
	return out
}

// dsnPassword returns the password part of user:password@... (a
// go-sql-driver/mysql DSN or a postgres:// URL), or of a PostgreSQL
// key=value password=..., or "".
func dsnPassword(dsn string) string {
	if m := pgPasswordRE.FindStringSubmatch(dsn); m != nil {
		return strings.Trim(m[2], "'")
	}
	if _, rest, ok := strings.Cut(dsn, "://"); ok {
		dsn = rest
	}
	at := strings.LastIndex(dsn, "@")
	if at < 0 {
		return ""
	}
	_, pw, ok := strings.Cut(dsn[:at], ":")
	if !ok {
		return ""
	}
	return pw
}

// scrub replaces every non-trivial secret in msg.
func scrub(msg string, secrets []string) string {
	sort.Slice(secrets, func(i, j int) bool { return len(secrets[i]) > len(secrets[j]) })
	for _, s := range secrets {
		if len(s) >= 3 {
			msg = strings.ReplaceAll(msg, s, redacted)
		}
	}
	return msg
}

// invalidf formats one validation problem wrapping ErrInvalid. The message
// is the format's text alone; ErrInvalid is reachable through errors.Is.
func invalidf(format string, args ...any) error {
	return &invalidError{msg: fmt.Sprintf(format, args...)}
}

type invalidError struct{ msg string }

func (e *invalidError) Error() string { return e.msg }
func (e *invalidError) Unwrap() error { return ErrInvalid }

// resolveSecrets reads password and token files and environment variables.
func (c *Config) resolveSecrets() []error {
	var errs []error
	k := &c.EngineKey
	var err error
	if k.token, err = resolve("engine_key", "token", k.Token, k.TokenFile, k.TokenEnv); err != nil {
		errs = append(errs, err)
	}
	for i := range c.Engines {
		e := &c.Engines[i]
		path := fmt.Sprintf("engines[%d]", i)
		e.password, err = resolve(path, "password", e.Password, e.PasswordFile, e.PasswordEnv)
		if err != nil {
			errs = append(errs, err)
		}
		e.token, err = resolve(path, "token", e.Token, e.TokenFile, e.TokenEnv)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

func resolve(path, key, inline, file, env string) (string, error) {
	var set []string
	for _, s := range []struct{ k, v string }{{key, inline}, {key + "_file", file},
		{key + "_env", env}} {
		if s.v != "" {
			set = append(set, s.k)
		}
	}
	switch {
	case len(set) > 1:
		return "", invalidf("%s.%s: set at most one of %s, %s_file and %s_env (got %s)", path, key, key,
			key, key, strings.Join(set, ", "))
	case inline != "":
		return inline, nil
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", invalidf("%s.%s_file: %v", path, key, err)
		}
		s := strings.TrimRight(string(b), "\r\n")
		if s == "" {
			return "", invalidf("%s.%s_file: %s is empty", path, key, file)
		}
		return s, nil
	case env != "":
		s, ok := os.LookupEnv(env)
		if !ok || s == "" {
			return "", invalidf("%s.%s_env: environment variable %s is unset or empty", path, key, env)
		}
		return s, nil
	}
	return "", nil
}
