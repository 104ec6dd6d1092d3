package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Environment variables that override the stored configuration, one field each.
const (
	EnvURL    = "MODELGATE_URL"
	EnvAPIKey = "MODELGATE_API_KEY"
)

// Config is what `modelgate login` stores: where gatewayd answers and the workspace key to call it with.
type Config struct {
	URL    string `json:"url"`
	APIKey string `json:"api_key"`
}

// ConfigPath is the file login writes: os.UserConfigDir()/modelgate/config ($XDG_CONFIG_HOME or ~/.config on
// Linux, ~/Library/Application Support on macOS, %AppData% on Windows).
func ConfigPath() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("failed to find the user's config directory: %w", err)
	}
	return filepath.Join(dir, "modelgate", "config"), nil
}

// LoadConfig reads the stored configuration (none is not an error), then lets MODELGATE_URL and
// MODELGATE_API_KEY override each field, so a script or CI job needs no login.
func LoadConfig(getenv func(string) string) (Config, error) {
	var c Config
	path, err := ConfigPath()
	if err != nil {
		return c, err
	}
	raw, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return c, fmt.Errorf("failed to read %s: %w", path, err)
	default:
		if err := json.Unmarshal(raw, &c); err != nil {
			return c, fmt.Errorf("failed to read %s (run `modelgate login` again): %w", path, err)
		}
	}
	if v := getenv(EnvURL); v != "" {
		c.URL = v
	}
	if v := getenv(EnvAPIKey); v != "" {
		c.APIKey = v
	}
	c.URL = strings.TrimRight(c.URL, "/")
	return c, nil
}

// SaveConfig writes c to ConfigPath with mode 0600 (the key is a credential), in a directory of mode 0700, and
// returns the path. The file is replaced by a rename, so a reader never sees half of it.
func SaveConfig(c Config) (string, error) {
	path, err := ConfigPath()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("failed to create %s: %w", filepath.Dir(path), err)
	}
	raw, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".config-*")
	if err != nil {
		return "", fmt.Errorf("failed to write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return "", fmt.Errorf("failed to write %s: %w", path, err)
	}
	if _, err := tmp.Write(append(raw, '\n')); err != nil {
		tmp.Close()
		return "", fmt.Errorf("failed to write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("failed to write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", fmt.Errorf("failed to write %s: %w", path, err)
	}
	return path, nil
}
