package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"
	"unicode/utf8"

	"sigs.k8s.io/yaml"
)

// Output formats of -o.
const (
	FormatTable = "table"
	FormatJSON  = "json"
	FormatYAML  = "yaml"
)

// column is one column of a table: its header and the dotted path of the field it shows ("metadata.name";
// "models[].slug" lists a field of every element).
type column struct {
	header string
	path   string
}

// printer writes an answer in the format of -o: the server's JSON (indented) or its YAML for scripts, or a table
// (or a sentence) for people.
type printer struct {
	format string
	out    io.Writer
}

// raw prints an answer's JSON as is in json or yaml; in table format it calls table with the decoded answer.
func (p printer) raw(body []byte, table func(v any) error) error {
	switch p.format {
	case FormatJSON:
		var b bytes.Buffer
		if err := json.Indent(&b, bytes.TrimSpace(body), "", "  "); err != nil {
			return fmt.Errorf("the server answered something that is not JSON: %w", err)
		}
		b.WriteByte('\n')
		_, err := io.WriteString(p.out, escapeJSON(b.String()))
		return err
	case FormatYAML:
		// As JSON escapes, the YAML encoder escapes DEL and C1 too, where it would refuse them raw.
		y, err := yaml.JSONToYAML([]byte(escapeJSON(string(body))))
		if err != nil {
			return fmt.Errorf("the server answered something that is not JSON: %w", err)
		}
		_, err = p.out.Write(y)
		return err
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("the server answered something that is not JSON: %w", err)
	}
	return table(v)
}

// list prints the array at field of the answer as a table of cols (the whole answer in json and yaml).
func (p printer) list(body []byte, field string, cols []column) error {
	return p.listRows(body, field, cols, func(items []any) []any { return items })
}

// listRows is list with rows made from the items first, for cells the answer does not hold as such.
func (p printer) listRows(body []byte, field string, cols []column, rows func([]any) []any) error {
	return p.raw(body, func(v any) error {
		items, _ := lookup(v, field).([]any)
		p.table(rows(items), cols)
		if more, _ := lookup(v, "pagination.has_more").(bool); more {
			fmt.Fprintf(p.out, "(more: --cursor %s, or --all)\n", cell(lookup(v, "pagination.cursor")))
		}
		return nil
	})
}

// one prints the answer as a one-row table of cols.
func (p printer) one(body []byte, cols []column) error {
	return p.raw(body, func(v any) error {
		p.table([]any{v}, cols)
		return nil
	})
}

// sentence prints the answer in json and yaml, and say(answer) for a person.
func (p printer) sentence(body []byte, say func(v map[string]any) string) error {
	return p.raw(body, func(v any) error {
		m, _ := v.(map[string]any)
		_, err := fmt.Fprintln(p.out, printable(say(m)))
		return err
	})
}

func (p printer) table(items []any, cols []column) {
	tw := tabwriter.NewWriter(p.out, 0, 4, 3, ' ', 0)
	heads := make([]string, len(cols))
	for i, c := range cols {
		heads[i] = c.header
	}
	fmt.Fprintln(tw, strings.Join(heads, "\t"))
	for _, item := range items {
		cells := make([]string, len(cols))
		for i, c := range cols {
			cells[i] = cell(lookup(item, c.path))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	_ = tw.Flush()
}

// lookup follows a dotted path through decoded JSON; "a[].b" collects b of every element of a.
func lookup(v any, path string) any {
	if path == "" {
		return v
	}
	head, rest, _ := strings.Cut(path, ".")
	if name, ok := strings.CutSuffix(head, "[]"); ok {
		m, _ := v.(map[string]any)
		arr, _ := m[name].([]any)
		out := make([]any, 0, len(arr))
		for _, el := range arr {
			out = append(out, lookup(el, rest))
		}
		return out
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	return lookup(m[head], rest)
}

// cell renders one decoded JSON value for a table: "-" for null or empty, lists joined by commas, whole numbers
// without a fraction, objects as compact JSON.
func cell(v any) string {
	switch x := v.(type) {
	case nil:
		return "-"
	case string:
		if x == "" {
			return "-"
		}
		return printable(x)
	case bool:
		return strconv.FormatBool(x)
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case []any:
		if len(x) == 0 {
			return "-"
		}
		parts := make([]string, len(x))
		for i, el := range x {
			parts[i] = cell(el)
		}
		return strings.Join(parts, ",")
	default:
		b, _ := json.Marshal(x)
		return string(b)
	}
}

// printable escapes what a terminal would act on rather than show: control characters (C0 with newline and tab,
// DEL, C1: ESC starts the sequences that move the cursor, recolour, retitle the window or write the clipboard),
// bidirectional overrides (which reorder what is shown) and bytes that are not UTF-8. Each is written as Go
// writes it in a string literal (\x1b, \n, \u202e). Every piece of server text the CLI prints for a person
// goes through it (docs/security.md "The CLI trusts its server only so far").
func printable(s string) string {
	if !needsEscape(s) {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], string(utf8.RuneError)):
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case escaped(r):
			b.WriteString(strings.Trim(strconv.QuoteRune(r), "'"))
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// printableLines is printable for each line of s: for a message the CLI put together of several lines.
func printableLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = printable(l)
	}
	return strings.Join(lines, "\n")
}

// escaped reports whether printable escapes r.
func escaped(r rune) bool { return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) }

func needsEscape(s string) bool {
	if !utf8.ValidString(s) {
		return true
	}
	for _, r := range s {
		if escaped(r) {
			return true
		}
	}
	return false
}

// escapeJSON writes the characters printable escapes as JSON escapes (\u001b) in indented JSON, whose strings
// may hold DEL, C1 and bidirectional overrides unescaped: the same document, safe on a terminal. Newlines between
// tokens stay (inside a JSON string a newline is always escaped already).
func escapeJSON(s string) string {
	if !needsEscape(strings.ReplaceAll(s, "\n", "")) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if r != '\n' && escaped(r) {
			fmt.Fprintf(&b, `\u%04x`, r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
