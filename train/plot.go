package train

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// plotLoss draws metrics.jsonl's train and validation loss into png.
func plotLoss(metrics, png string) error { return PlotRuns(png, metrics) }

// PlotRuns draws the train and validation loss of one or more runs (their
// metrics.jsonl files) into one PNG, each run labelled by its folder.
func PlotRuns(png string, metricsFiles ...string) error {
	p := plot.New()
	p.Title.Text = "weft: loss"
	p.X.Label.Text = "step"
	p.Y.Label.Text = "cross-entropy"
	var lines []any
	for _, path := range metricsFiles {
		ms, err := readMetrics(path)
		if err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		var train, val plotter.XYs
		for _, m := range ms {
			if finite(float64(m.Loss)) {
				train = append(train, plotter.XY{X: float64(m.Step), Y: float64(m.Loss)})
			}
			if m.ValLoss != nil && finite(float64(*m.ValLoss)) {
				val = append(val, plotter.XY{X: float64(m.Step), Y: float64(*m.ValLoss)})
			}
		}
		name := ""
		if len(metricsFiles) > 1 {
			name = filepath.Base(filepath.Dir(path)) + " "
		}
		lines = append(lines, name+"train", smooth(train, 10), name+"validation", val)
	}
	if err := plotutil.AddLines(p, lines...); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	save := p.Save
	if len(metricsFiles) > 1 {
		save = legendBeside(p)
	}
	if err := save(8*vg.Inch, 5*vg.Inch, png); err != nil {
		return fmt.Errorf("plot %s: %w", strings.TrimSpace(png), err)
	}
	return nil
}

// legendBeside returns p's Save with its legend to the right of the
// curves, which a legend of many runs would otherwise cover; the image
// grows by the legend's width, and in height to hold it.
func legendBeside(p *plot.Plot) func(w, h vg.Length, png string) error {
	return func(w, h vg.Length, png string) error {
		legend := p.Legend
		legend.Left, legend.Top = true, true
		p.Legend = plot.NewLegend()
		size := legend.Rectangle(draw.Canvas{}).Size()
		margin := legend.TextStyle.Font.Size
		img := vgimg.New(w+size.X+2*margin, max(h, size.Y+2*margin))
		c := draw.New(img)
		p.Draw(draw.Crop(c, 0, -(size.X + 2*margin), 0, 0))
		legend.Draw(draw.Crop(c, w+margin, -margin, margin, -margin))
		f, err := os.Create(png)
		if err != nil {
			return err
		}
		if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
}

// smooth averages each point with the window-1 before it, so the train
// curve's trend is visible through batch noise.
func smooth(xys plotter.XYs, window int) plotter.XYs {
	out := make(plotter.XYs, len(xys))
	var sum float64
	for i, xy := range xys {
		sum += xy.Y
		if i >= window {
			sum -= xys[i-window].Y
		}
		out[i] = plotter.XY{X: xy.X, Y: sum / float64(min(i+1, window))}
	}
	return out
}

// Final is how a run ended: its last validation loss and the mean training
// loss of its last 10 steps (one step's loss is too noisy to compare).
type Final struct {
	Step       int
	Val, Train float64
}

// FinalLosses reads the final losses of run folders.
func FinalLosses(runs []string) ([]Final, error) {
	out := make([]Final, len(runs))
	for i, r := range runs {
		ms, err := readMetrics(filepath.Join(r, "metrics.jsonl"))
		if err != nil {
			return nil, err
		}
		if len(ms) == 0 {
			return nil, fmt.Errorf("compare: %s has no metrics", r)
		}
		f := &out[i]
		tail := ms[max(0, len(ms)-10):]
		for _, m := range tail {
			f.Train += float64(m.Loss) / float64(len(tail))
		}
		for _, m := range ms {
			if m.ValLoss != nil {
				f.Step, f.Val = m.Step, float64(*m.ValLoss)
			}
		}
	}
	return out, nil
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
