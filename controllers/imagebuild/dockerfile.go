// Package imagebuild imports and builds sandbox images without a Docker daemon, on go-containerregistry: Import
// copies an image (every platform of an index) between registries; Build checks an uploaded ZIP context and
// applies a single-stage Dockerfile of FROM, local COPY/ADD, ENV, WORKDIR, CMD, ENTRYPOINT, LABEL, EXPOSE, USER
// and ARG onto its base image. A Dockerfile that needs more (RUN, several stages) is refused with ErrNeedsBuildKit,
// which the reconciler hands to the BuildKit backend when one is configured. It reads no cluster state.
//
// The Dockerfile is read by BuildKit's own parser and instruction reader, and words are expanded by its shell
// lexer, so what Docker refuses is refused here too, with the instruction and its line (docs/security.md).
package imagebuild

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/shell"
)

// Refusal is a build that cannot succeed as submitted: its reason goes to the build's status as is.
type Refusal struct{ Reason string }

func (r *Refusal) Error() string { return r.Reason }

func refuse(format string, a ...any) error { return &Refusal{Reason: fmt.Sprintf(format, a...)} }

// ErrNeedsBuildKit marks a Dockerfile only the BuildKit backend can build (errors.Is).
var ErrNeedsBuildKit = errors.New("needs the BuildKit backend")

// needsBuildKit is a refusal that wraps ErrNeedsBuildKit.
type needsBuildKit struct{ Refusal }

func (n *needsBuildKit) Unwrap() error { return ErrNeedsBuildKit }

func buildKitRefusal(format string, a ...any) error {
	return &needsBuildKit{Refusal{Reason: fmt.Sprintf(format, a...) +
		" The built-in builder supports FROM, local COPY/ADD, ENV, WORKDIR, CMD, ENTRYPOINT, LABEL, EXPOSE, USER and ARG; " +
		"anything else needs the BuildKit backend, which this installation has not configured (manager flag --sandbox-buildkit-image)."}}
}

// Step is one instruction of the stage, as BuildKit's instruction reader typed it.
type Step struct {
	// Cmd is the instruction, upper case.
	Cmd string
	// Line is where it starts, from 1.
	Line int
	// Command is the typed instruction (*instructions.EnvCommand, *instructions.CopyCommand, ...).
	Command instructions.Command
}

// lineError is a refusal that names an instruction and its line.
func lineError(line int, cmd string, format string, a ...any) error {
	return refuse("Dockerfile line %d: %s %s", line, cmd, fmt.Sprintf(format, a...))
}

// vars is the environment words are expanded in: ARG and ENV values so far (shell.EnvGetter).
type vars map[string]string

func (v vars) Get(k string) (string, bool) { s, ok := v[k]; return s, ok }

func (v vars) Keys() []string {
	out := make([]string, 0, len(v))
	for k := range v {
		out = append(out, k)
	}
	return out
}

// expander expands one word the way Docker does (${A:-b}, ${A:+b}, quotes, escapes); an unset variable is empty.
func expander(lex *shell.Lex, env vars) instructions.SingleWordExpander {
	return func(word string) (string, error) {
		s, _, err := lex.ProcessWord(word, env)
		return s, err
	}
}

// ports reads EXPOSE's words as Docker does: <port>[-<port>][/tcp|udp|sctp], each port within 0-65535, and
// answers them as "<port>/<proto>", a range spelled out.
func ports(words []string) ([]string, error) {
	var out []string
	for _, w := range words {
		spec, proto, _ := strings.Cut(w, "/")
		switch strings.ToLower(proto) {
		case "":
			proto = "tcp"
		case "tcp", "udp", "sctp":
			proto = strings.ToLower(proto)
		default:
			return nil, fmt.Errorf("%q has the protocol %q; it must be tcp, udp or sctp", w, proto)
		}
		lo, hi, isRange := strings.Cut(spec, "-")
		start, err := strconv.ParseUint(lo, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("%q is not a port: a port is a number from 0 to 65535", w)
		}
		end := start
		if isRange {
			if end, err = strconv.ParseUint(hi, 10, 16); err != nil || end < start {
				return nil, fmt.Errorf("%q is not a port range: both ends are numbers from 0 to 65535, the first the lower", w)
			}
		}
		for p := start; p <= end; p++ {
			out = append(out, strconv.FormatUint(p, 10)+"/"+proto)
		}
	}
	return out, nil
}
