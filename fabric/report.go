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
	for i, l := range f.cfg.Loggers {
		if err := l.Log(step, fields); err != nil {
			return fmt.Errorf("fabric: logger %d: %w", i, err)
		}
	}
	return nil
}

// jsonl writes each record as one JSON object.
type jsonl struct {
	w   io.Writer
	buf bytes.Buffer
}

// NewJSONL returns a logger that writes each record to w as one JSON
// object, "step" first, then the fields in order; a non-finite float64 is
// null (metrics.jsonl's format).
func NewJSONL(w io.Writer) Logger { return &jsonl{w: w} }

func (l *jsonl) Log(step int, fields []Field) error {
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

// csvLog writes a header row, then one row per record.
type csvLog struct {
	w       *csv.Writer
	columns []string
	started bool
}

// NewCSV returns a logger that writes to w a header row, "step" and the
// columns, then one row per record, a column the record lacks left empty;
// with no columns, the first record's field names are the columns.
func NewCSV(w io.Writer, columns ...string) Logger {
	return &csvLog{w: csv.NewWriter(w), columns: columns}
}

func (l *csvLog) Log(step int, fields []Field) error {
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
