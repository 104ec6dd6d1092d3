package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

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
		_, err := p.out.Write(b.Bytes())
		return err
	case FormatYAML:
		y, err := yaml.JSONToYAML(body)
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
	return p.raw(body, func(v any) error {
		items, _ := lookup(v, field).([]any)
		p.table(items, cols)
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
		_, err := fmt.Fprintln(p.out, say(m))
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
		return x
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
