package config

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"

	"github.com/spf13/viper"
)

// topEngine matches a top-level "engine:" line of a YAML file.
var topEngine = regexp.MustCompile(`(?m)^engine:[^\n]*$`)

// SetEngine pins the active engine in the file at path, as an operator's
// flip: every process that Opened or Watches the file follows it. name must
// be a configured engine, or "" to unpin (first healthy in order). The file
// is replaced atomically (a temporary file renamed over it) and must still
// validate. In YAML files only the top-level engine line changes, so
// comments stay; JSON and TOML files are rewritten, which drops comments
// and key order.
func SetEngine(path, name string) error {
	cfg, err := Load(path)
	if err != nil {
		return err
	}
	if name != "" && cfg.Find(name) == nil {
		return fmt.Errorf("%w: engine: %q is not a configured engine", ErrInvalid, name)
	}
	format, err := formatOf(path)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := withEngine(path, format, data, name)
	if err != nil {
		return err
	}
	if _, err := Parse(out, format); err != nil {
		return fmt.Errorf("the edited file would not validate: %w", err)
	}
	return replaceFile(path, out)
}

// withEngine returns data, the file at path in format, with its engine
// setting set to name. A YAML file keeps its layout and comments: only the
// top-level engine line changes, or is added.
func withEngine(path, format string, data []byte, name string) ([]byte, error) {
	if format == "yaml" || format == "yml" {
		line := []byte("engine: " + strconv.Quote(name))
		if topEngine.Match(data) {
			return topEngine.ReplaceAllLiteral(data, line), nil
		}
		out := append(bytes.TrimRight(data, "\n"), '\n')
		return append(append(out, line...), '\n'), nil
	}
	v := viper.New()
	v.SetConfigType(format)
	if err := v.ReadConfig(bytes.NewReader(data)); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalid, path, err)
	}
	v.Set("engine", name)
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".rewrite"+filepath.Ext(path))
	if err := v.WriteConfigAs(tmp); err != nil {
		return nil, err
	}
	defer os.Remove(tmp)
	return os.ReadFile(tmp)
}

// replaceFile replaces the file at path with data at once (a rename),
// keeping its permissions.
func replaceFile(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if info, err := os.Stat(path); err == nil {
		_ = os.Chmod(tmp.Name(), info.Mode().Perm())
	}
	return os.Rename(tmp.Name(), path)
}
