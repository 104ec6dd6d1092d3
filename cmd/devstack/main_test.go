package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTerminalShowsInfoFileKeepsAll: by default the terminal shows INFO and above and the log file every level;
// --debug brings DEBUG to the terminal.
func TestTerminalShowsInfoFileKeepsAll(t *testing.T) {
	for _, tc := range []struct {
		name      string
		wantDebug bool
	}{{"default", false}, {"debug", true}} {
		t.Run(tc.name, func(t *testing.T) {
			var terminal bytes.Buffer
			path := filepath.Join(t.TempDir(), logFile)
			opts := terminalOptions(tc.wantDebug)
			opts.DestWriter = &terminal
			logger, closeLog, err := newLogger(&opts, path)
			if err != nil {
				t.Fatal(err)
			}
			log := logger.WithName("test")
			log.V(1).Info("Probed a deployment")
			log.Info("Published snapshot")
			if err := closeLog(); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(terminal.String(), "Published snapshot") ||
				strings.Contains(terminal.String(), "Probed a deployment") != tc.wantDebug {
				t.Errorf("terminal (debug %v):\n%s", tc.wantDebug, terminal.String())
			}
			full, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(full), "Probed a deployment") || !strings.Contains(string(full), "Published snapshot") {
				t.Errorf("the log file lacks a line:\n%s", full)
			}
		})
	}
}
