package train

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/weftml/weft/fabric"
)

// loggerNames are the loggers a run can write: metrics.jsonl, which
// --resume and loss.png read and every run writes, and metrics.csv.
var loggerNames = []string{"jsonl", "csv"}

// validateLoop reports the first loop setting that cannot run: gradient
// accumulation, clipping, the schedule and the loggers.
func (c Config) validateLoop() error {
	if c.GradAccum < 1 {
		return fmt.Errorf("grad_accum %d: must be at least 1", c.GradAccum)
	}
	// On a mesh the batch is shared by its rows alone (the ranks of a row see the same rows).
	ranks := max(c.dataRanks(), 1)
	if parts := c.GradAccum * ranks; c.BatchSize%parts != 0 {
		over := ""
		switch {
		case c.TP > 1 && ranks > 1:
			over = fmt.Sprintf(", each split over %d data-parallel ranks", ranks)
		case c.TP <= 1 && ranks > 1:
			over = fmt.Sprintf(", each split over %d devices", ranks)
		}
		return fmt.Errorf("batch size %d does not split into %d micro-batches%s: make it a multiple of %d", c.BatchSize, c.GradAccum, over, parts)
	}
	if err := new(fabric.GradSync).UnmarshalText([]byte(c.GradSync)); err != nil {
		return err
	}
	if c.ClipValue < 0 || math.IsNaN(c.ClipValue) || math.IsInf(c.ClipValue, 0) {
		return fmt.Errorf("clip_value %g: want a positive bound, or 0 for none", c.ClipValue)
	}
	if c.ClipNorm < 0 || math.IsNaN(c.ClipNorm) || math.IsInf(c.ClipNorm, 0) {
		return fmt.Errorf("clip_norm %g: want a positive bound, or 0 for none", c.ClipNorm)
	}
	if c.ClipNorm > 0 && c.ClipValue > 0 {
		return fmt.Errorf("clip_norm %g and clip_value %g: clip by one of them", c.ClipNorm, c.ClipValue)
	}
	if _, err := c.LRSchedule.Build(c.LR, c.Steps); err != nil {
		return err
	}
	for i, name := range c.Loggers {
		if !slices.Contains(loggerNames, name) || slices.Contains(c.Loggers[:i], name) {
			return fmt.Errorf("loggers %v: each of %v at most once", c.Loggers, loggerNames)
		}
	}
	if !slices.Contains(c.Loggers, "jsonl") {
		return fmt.Errorf("loggers %v: jsonl is needed (--resume and loss.png read metrics.jsonl); add the others beside it, as in jsonl,csv", c.Loggers)
	}
	return nil
}

// openLoggers opens the run's loggers after step start (rank 0's), keeping
// what earlier steps logged, and returns the metrics kept and a function
// that closes the files.
func openLoggers(c Config, start int) (loggers []fabric.Logger, kept []Metrics, closeAll func(), err error) {
	var files []*os.File
	closeAll = func() {
		for _, f := range files {
			f.Close()
		}
	}
	jsonl, kept, err := openMetrics(filepath.Join(c.Out, "metrics.jsonl"), start)
	if err != nil {
		return nil, nil, nil, err
	}
	files = append(files, jsonl)
	loggers = append(loggers, fabric.NewJSONL(jsonl))
	if slices.Contains(c.Loggers, "csv") {
		f, err := os.Create(filepath.Join(c.Out, "metrics.csv"))
		if err != nil {
			closeAll()
			return nil, nil, nil, fmt.Errorf("metrics: %w", err)
		}
		files = append(files, f)
		csv := fabric.NewCSV(f, metricColumns...)
		for _, m := range kept { // the earlier steps, as metrics.jsonl keeps them
			if err := csv.Log(m.Step, m.fields()); err != nil {
				closeAll()
				return nil, nil, nil, fmt.Errorf("metrics.csv: %w", err)
			}
		}
		loggers = append(loggers, csv)
	}
	return loggers, kept, closeAll, nil
}

// metricColumns are the fields of a step's record, in metrics.jsonl's
// order.
var metricColumns = []string{"loss", "loss_scale", "tokens_per_s", "skipped", "val_loss", "peak_alloc_mib", "lr", "grad_norm"}

// fields is m as a logged record: the fields of its metrics.jsonl line,
// without step, Skipped, ValLoss and GradNorm only when set.
func (m Metrics) fields() []fabric.Field {
	out := []fabric.Field{{Name: "loss", Value: float64(m.Loss)}, {Name: "loss_scale", Value: m.LossScale}, {Name: "tokens_per_s", Value: m.TokensPerS}}
	if m.Skipped {
		out = append(out, fabric.Field{Name: "skipped", Value: true})
	}
	if m.ValLoss != nil {
		out = append(out, fabric.Field{Name: "val_loss", Value: float64(*m.ValLoss)})
	}
	out = append(out, fabric.Field{Name: "peak_alloc_mib", Value: m.PeakAllocMiB}, fabric.Field{Name: "lr", Value: m.LR})
	if m.GradNorm != nil {
		out = append(out, fabric.Field{Name: "grad_norm", Value: float64(*m.GradNorm)})
	}
	return out
}
