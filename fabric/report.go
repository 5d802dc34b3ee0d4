package fabric

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
)

// Field is one named value of a logged record: a float64, int, bool, or
// anything encoding/json writes.
type Field struct {
	Name  string
	Value any
}

// Logger records metrics, one record per call, its fields in order.
type Logger interface {
	Log(step int, fields []Field) error
}

// LogDict sends one record of the step to every logger (Lightning's
// log_dict); give loggers to rank 0's fabric only, as weft train does.
func (f *Fabric) LogDict(step int, fields ...Field) error {
	for _, l := range f.cfg.Loggers {
		if err := l.Log(step, fields); err != nil {
			return fmt.Errorf("fabric: logger %T: %w", l, err)
		}
	}
	return nil
}

// JSONL writes each record as one JSON object, "step" first, then the
// fields in order; a non-finite float64 is null (metrics.jsonl's format).
type JSONL struct {
	w   io.Writer
	buf bytes.Buffer
}

// NewJSONL returns a JSONL logger writing to w.
func NewJSONL(w io.Writer) *JSONL { return &JSONL{w: w} }

func (l *JSONL) Log(step int, fields []Field) error {
	l.buf.Reset()
	l.buf.WriteString(`{"step":` + strconv.Itoa(step))
	for _, f := range fields {
		name, err := json.Marshal(f.Name)
		if err != nil {
			return err
		}
		v := []byte("null")
		if x, ok := f.Value.(float64); !ok || isFinite(x) {
			if v, err = json.Marshal(f.Value); err != nil {
				return fmt.Errorf("field %s: %w", f.Name, err)
			}
		}
		l.buf.WriteByte(',')
		l.buf.Write(name)
		l.buf.WriteByte(':')
		l.buf.Write(v)
	}
	l.buf.WriteString("}\n")
	_, err := l.w.Write(l.buf.Bytes())
	return err
}

// CSV writes a header row, "step" and the columns, then one row per
// record, a column the record lacks left empty.
type CSV struct {
	w       *csv.Writer
	columns []string
	started bool
}

// NewCSV returns a CSV logger writing to w; with no columns, the first
// record's field names are the columns.
func NewCSV(w io.Writer, columns ...string) *CSV {
	return &CSV{w: csv.NewWriter(w), columns: columns}
}

func (l *CSV) Log(step int, fields []Field) error {
	if !l.started {
		if l.columns == nil {
			for _, f := range fields {
				l.columns = append(l.columns, f.Name)
			}
		}
		if err := l.w.Write(append([]string{"step"}, l.columns...)); err != nil {
			return err
		}
		l.started = true
	}
	row := make([]string, 1+len(l.columns))
	row[0] = strconv.Itoa(step)
	for _, f := range fields {
		i := slices.Index(l.columns, f.Name)
		if i < 0 {
			return fmt.Errorf("field %q is not a column (columns: %v)", f.Name, l.columns)
		}
		row[i+1] = csvValue(f.Value)
	}
	if err := l.w.Write(row); err != nil {
		return err
	}
	l.w.Flush()
	return l.w.Error()
}

func csvValue(v any) string {
	switch x := v.(type) {
	case float64: // NaN, +Inf and -Inf as pandas reads them back
		return strconv.FormatFloat(x, 'g', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	}
	return fmt.Sprint(v)
}

// Callbacks are values of any type in Config.Callbacks; each hears of the
// events whose hook it implements, as a precision plugin takes on roles.

// StepEndHook hears of every finished TrainStep; step counts from 0 (the
// fabric's StepCount before it).
type StepEndHook interface {
	OnStepEnd(step int, res StepResult) error
}

// ValidationEndHook hears of every finished validation pass (EvalLoss),
// with its loss; step is the step it follows (-1 before the first).
type ValidationEndHook interface {
	OnValidationEnd(step int, loss float64) error
}

// CheckpointHook hears of every checkpoint Save wrote, with
// SaveOptions.Step and its path.
type CheckpointHook interface {
	OnCheckpoint(step int, path string) error
}

// notify calls call on every callback that implements hook H.
func notify[H any](callbacks []any, call func(H) error) error {
	for _, c := range callbacks {
		if h, ok := c.(H); ok {
			if err := call(h); err != nil {
				return fmt.Errorf("fabric: callback %T: %w", c, err)
			}
		}
	}
	return nil
}
