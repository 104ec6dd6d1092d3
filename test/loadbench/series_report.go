package loadbench

import (
	"fmt"
	"image/color"
	"os"
	"strings"
	"time"

	"github.com/modelgate/modelgate/test/testutil"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Markers of the scale series' section in docs/benchmarks.md.
const (
	SeriesStartMarker = "<!-- scale-series:start -->"
	SeriesEndMarker   = "<!-- scale-series:end -->"
)

func mib(b int64) string {
	if b < 1<<20 {
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
}

func ms(d time.Duration) string {
	if d == 0 {
		return "–"
	}
	if d < 10*time.Millisecond {
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	}
	return d.Round(time.Millisecond).String()
}

// SeriesMarkdown renders the series as a table: one row per size and layout, and the creation figures.
func SeriesMarkdown(points []seriesPoint, cfg SeriesConfig, header string) string {
	var b strings.Builder
	b.WriteString(header)
	b.WriteString("| groups / keys | layout | materialize per change (CPU) | bytes written per change (objects) | propagation p50 / p99 | decode per change (cold) | gatewayd RSS (peak) | target check at this size |\n|---|---|---|---|---|---|---|---|\n")
	for _, p := range points {
		for _, layout := range []string{layoutNumbered, layoutContent} {
			r, ok := p.Layouts[layout]
			if !ok || len(r.Propagation) == 0 {
				fmt.Fprintf(&b, "| %d / %d | %s | not measured: %s | | | | | |\n", p.Groups, p.Keys, layout, orNone(p.Err))
				continue
			}
			p50, p99 := testutil.Percentile(append([]time.Duration(nil), r.Propagation...), .5), testutil.Percentile(append([]time.Duration(nil), r.Propagation...), .99)
			var misses []string
			if p99 > time.Second {
				misses = append(misses, "p99 > 1 s")
			}
			if r.RSS > 1<<30 {
				misses = append(misses, "RSS > 1 GiB")
			}
			if r.Written > 2<<20 {
				misses = append(misses, "bytes > 2 MiB")
			}
			if r.Decode > time.Second {
				misses = append(misses, "decode > 1 s")
			}
			check := "all four hold"
			if len(misses) > 0 {
				check = strings.Join(misses, ", ")
			}
			fmt.Fprintf(&b, "| %d / %d | %s | %s (%s) | %s (%d) | %s / %s | %s (%s) | %s (%s) | %s |\n", p.Groups, p.Keys, layout,
				ms(r.Materialize), ms(r.MaterializeCPU), mib(int64(r.Written)), r.Objects, ms(p50), ms(p99), ms(r.Decode), ms(r.DecodeCold),
				mib(r.RSS), mib(r.Peak), check)
		}
	}
	b.WriteString("\n| groups / keys | created through admission | in | rate | all of it would take | API server RSS | etcd RSS |\n|---|---|---|---|---|---|---|\n")
	for _, p := range points {
		n := p.CreatedGroups + p.CreatedKeys
		rate := float64(n) / max(p.CreateElapsed.Seconds(), 1e-9)
		full := "done"
		if n < p.Groups+p.Keys {
			full = fmt.Sprintf("≈ %s at this rate", (time.Duration(float64(p.Groups+p.Keys)/max(rate, 1e-9)) * time.Second).Round(time.Minute))
		}
		stopped := ""
		if p.CreateErr != "" && !strings.Contains(p.CreateErr, "deadline exceeded") {
			stopped = " (stopped: " + p.CreateErr + ")"
		}
		fmt.Fprintf(&b, "| %d / %d | %d groups, %d keys%s | %s | %.0f objects/s | %s | %s | %s |\n", p.Groups, p.Keys, p.CreatedGroups, p.CreatedKeys,
			stopped, p.CreateElapsed.Round(time.Second), rate, full, mib(p.APIServerRSS), mib(p.EtcdRSS))
	}
	b.WriteString("\n")
	for _, p := range points {
		if p.Err != "" {
			fmt.Fprintf(&b, "- %d groups stopped: %s\n", p.Groups, p.Err)
		}
	}
	fmt.Fprintf(&b, "- Each size: %d single-group limit changes per layout. A change flips the REQUEST per MINUTE limit of a leaf group "+
		"between 1 and its original value in the custom resources, translates the workspace with the manager's translation "+
		"(the whole workspace for the numbered layout, as then; with a translate.Translator for the content layout, as now: only "+
		"what the change reaches), encodes it in the layout, writes it to the API server, and is timed until a probe through a separate gatewayd process "+
		"sees the new limit. It leaves out the manager's List from its informer cache and admission (10 ms at 10,000 groups). "+
		"p99 of so few changes is their maximum.\n", cfg.Changes)
	b.WriteString("- Bytes written per change are the ConfigMap payloads sent to the API server, which stores each object whole in etcd. " +
		"Decode per change is what a gatewayd decodes for one change: the whole payload before; the rewritten part plus the merge of all parts after (cold: every part, as at start).\n")
	fmt.Fprintf(&b, "- Creation through admission: groups (parents first) and then keys in a fresh namespace, %d concurrent creates through the "+
		"validating webhook with the manager running, stopped after %s; what was not created is extrapolated from the rate. API server "+
		"and etcd RSS are read after each size's publication and grow over the series (nothing is deleted).\n", createWorkers, cfg.CreateBudget)
	return b.String()
}

func orNone(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

// WriteSeriesDocs replaces the series section of the file at path.
func WriteSeriesDocs(path, section string) error {
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := replaceBetween(old, SeriesStartMarker, SeriesEndMarker, section)
	if err != nil {
		return fmt.Errorf("failed to update %s: %w", path, err)
	}
	return os.WriteFile(path, out, 0o644)
}

// WriteSeriesPlot draws, per layout, bytes written per change and propagation p99 against the group count,
// on log axes, into a PNG.
func WriteSeriesPlot(points []seriesPoint, path string) error {
	// target is the target at 100,000 groups, drawn dashed; 0 for none.
	panels := []struct {
		title, y string
		target   float64
		f        func(*layoutResult) float64
	}{
		{"Bytes written to etcd per single-group change", "MiB", 2, func(r *layoutResult) float64 { return float64(r.Written) / (1 << 20) }},
		{"Propagation p99 of a single-group change", "seconds", 1, func(r *layoutResult) float64 {
			return testutil.Percentile(append([]time.Duration(nil), r.Propagation...), .99).Seconds()
		}},
		{"Materialization per change (translate + encode)", "seconds", 0, func(r *layoutResult) float64 { return r.Materialize.Seconds() }},
		{"gatewayd RSS", "MiB", 1024, func(r *layoutResult) float64 { return float64(r.RSS) / (1 << 20) }},
	}
	colors := map[string]color.Color{layoutNumbered: color.RGBA{R: 200, A: 255}, layoutContent: color.RGBA{B: 200, G: 90, A: 255}}
	const w, h = 6 * vg.Inch, 4 * vg.Inch
	img := vgimgCanvas(2*w, 2*h)
	tiles := draw.Tiles{Rows: 2, Cols: 2, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2,
		PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	dc := draw.New(img)
	for k, panel := range panels {
		pl := plot.New()
		pl.Title.Text = panel.title
		pl.X.Label.Text = "groups (10 keys each)"
		pl.Y.Label.Text = panel.y
		pl.X.Scale, pl.Y.Scale = plot.LogScale{}, plot.LogScale{}
		pl.X.Tick.Marker, pl.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
		pl.Legend.Top, pl.Legend.Left = true, true
		drawn := false
		for _, layout := range []string{layoutNumbered, layoutContent} {
			var xys plotter.XYs
			for _, p := range points {
				if r, ok := p.Layouts[layout]; ok && len(r.Propagation) > 0 {
					if y := panel.f(r); y > 0 {
						xys = append(xys, plotter.XY{X: float64(p.Groups), Y: y})
					}
				}
			}
			if len(xys) == 0 {
				continue
			}
			line, pts, err := plotter.NewLinePoints(xys)
			if err != nil {
				return err
			}
			line.Color, pts.Color = colors[layout], colors[layout]
			line.Width = vg.Points(2)
			pl.Add(line, pts)
			pl.Legend.Add(layout, line, pts)
			drawn = true
		}
		if !drawn {
			continue // log axes need at least one positive value
		}
		if panel.target > 0 && len(points) > 0 {
			line, err := plotter.NewLine(plotter.XYs{{X: float64(points[0].Groups), Y: panel.target}, {X: float64(points[len(points)-1].Groups), Y: panel.target}})
			if err != nil {
				return err
			}
			line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			line.Color = color.Gray{Y: 100}
			pl.Add(line)
			pl.Legend.Add("target at 100,000 groups", line)
		}
		pl.Draw(tiles.At(dc, k%2, k/2))
	}
	return savePNG(img, path)
}

func vgimgCanvas(w, h vg.Length) *vgimg.Canvas {
	c := vgimg.New(w, h)
	dc := draw.New(c)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	return c
}

func savePNG(c *vgimg.Canvas, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
