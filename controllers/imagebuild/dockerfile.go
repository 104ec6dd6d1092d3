// Package imagebuild imports and builds sandbox images without a Docker daemon, on go-containerregistry: Import
// copies an image (every platform of an index) between registries; Build checks an uploaded ZIP context and
// applies a single-stage Dockerfile of FROM, local COPY/ADD, ENV, WORKDIR, CMD, ENTRYPOINT, LABEL, EXPOSE, USER
// and ARG onto its base image. A Dockerfile that needs more (RUN, several stages) is refused with ErrNeedsBuildKit,
// which the reconciler hands to the BuildKit backend when one is configured. It reads no cluster state.
package imagebuild

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
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

// Instruction is one Dockerfile instruction.
type Instruction struct {
	// Cmd is the instruction, upper case.
	Cmd string
	// Flags are the --name=value flags, in order.
	Flags []string
	// Args is the rest of the line, continuations joined.
	Args string
	// Line is where it starts, from 1.
	Line int
}

// Parse splits a Dockerfile into instructions: comments and blank lines dropped, '\' continuations joined.
func Parse(src string) ([]Instruction, error) {
	var out []Instruction
	lines := strings.Split(strings.ReplaceAll(src, "\r\n", "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		start := i + 1
		line := strings.TrimSpace(lines[i])
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		for strings.HasSuffix(line, `\`) && i+1 < len(lines) {
			i++
			next := strings.TrimSpace(lines[i])
			if strings.HasPrefix(next, "#") {
				continue
			}
			line = strings.TrimSuffix(line, `\`) + " " + next
		}
		line = strings.TrimSuffix(line, `\`)
		cmd, rest, _ := strings.Cut(line, " ")
		in := Instruction{Cmd: strings.ToUpper(cmd), Line: start}
		rest = strings.TrimSpace(rest)
		for strings.HasPrefix(rest, "--") {
			flag, after, _ := strings.Cut(rest, " ")
			in.Flags = append(in.Flags, flag)
			rest = strings.TrimSpace(after)
		}
		in.Args = rest
		out = append(out, in)
	}
	if len(out) == 0 {
		return nil, refuse("The Dockerfile is empty.")
	}
	return out, nil
}

// execForm reads a JSON array form (["a", "b"]) or, failing that, wraps the shell form in /bin/sh -c.
func execForm(args string) []string {
	var v []string
	if strings.HasPrefix(args, "[") && json.Unmarshal([]byte(args), &v) == nil {
		return v
	}
	return []string{"/bin/sh", "-c", args}
}

// keyValues reads the k=v pairs of ENV, LABEL and ARG (quoted values allowed), or the legacy "ENV key value".
func keyValues(args string, legacy bool) ([][2]string, error) {
	if legacy && !strings.Contains(strings.SplitN(args, " ", 2)[0], "=") {
		k, v, ok := strings.Cut(args, " ")
		if !ok {
			return nil, fmt.Errorf("needs a value")
		}
		return [][2]string{{k, strings.TrimSpace(v)}}, nil
	}
	words, err := splitWords(args)
	if err != nil {
		return nil, err
	}
	out := make([][2]string, 0, len(words))
	for _, w := range words {
		k, v, _ := strings.Cut(w, "=")
		if k == "" {
			return nil, fmt.Errorf("has an empty name in %q", w)
		}
		out = append(out, [2]string{k, v})
	}
	return out, nil
}

// splitWords splits on spaces outside double or single quotes, removing the quotes; a backslash escapes the next
// character inside double quotes and outside quotes.
func splitWords(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	inWord := false
	var quote rune
	escaped := false
	for _, r := range s {
		switch {
		case escaped:
			cur.WriteRune(r)
			escaped = false
		case r == '\\' && quote != '\'':
			escaped, inWord = true, true
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '"' || r == '\'':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("has an unterminated quote")
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out, nil
}

// expand replaces $VAR and ${VAR} from vars (ARG and ENV values so far); unknown variables become empty.
func expand(s string, vars map[string]string) string {
	return os.Expand(s, func(k string) string { return vars[k] })
}
