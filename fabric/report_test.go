package fabric_test

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/weftml/weft/fabric"
)

// TestCSVLogger: the first record's fields are the columns unless given;
// a record without a column leaves it empty, one with an unknown field is
// refused, and values read back as written.
func TestCSVLogger(t *testing.T) {
	var b bytes.Buffer
	l := fabric.NewCSV(&b)
	for step, fields := range [][]fabric.Field{
		{{Name: "loss", Value: 2.5}, {Name: "lr", Value: 1e-3}, {Name: "skipped", Value: false}},
		{{Name: "loss", Value: math.NaN()}, {Name: "skipped", Value: true}},
	} {
		if err := l.Log(step, fields); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Log(2, []fabric.Field{{Name: "val_loss", Value: 1.0}}); err == nil || !strings.Contains(err.Error(), `"val_loss" is not a column`) {
		t.Errorf("an unknown field: %v", err)
	}
	if want := "step,loss,lr,skipped\n0,2.5,0.001,false\n1,NaN,,true\n"; b.String() != want {
		t.Errorf("wrote %q, want %q", b.String(), want)
	}
}

// onlyValidation implements one hook: the fabric calls it for that event
// alone.
type onlyValidation struct{ losses []float64 }

func (o *onlyValidation) OnValidationEnd(_ int, loss float64) error {
	o.losses = append(o.losses, loss)
	return nil
}

var _ fabric.ValidationEndHook = (*onlyValidation)(nil)

// failing fails every checkpoint hook.
type failing struct{}

func (failing) OnCheckpoint(int, string) error { return errors.New("disk on fire") }

func TestCallbackHooks(t *testing.T) {
	v := &onlyValidation{}
	f := fabric.New(&noRoles{})
	f.Callbacks = []any{v, "not a callback", failing{}}
	if err := f.StepEnded(0, fabric.StepResult{}); err != nil {
		t.Fatal(err)
	}
	if err := f.ValidationEnded(0, 1.5); err != nil {
		t.Fatal(err)
	}
	if len(v.losses) != 1 || v.losses[0] != 1.5 {
		t.Errorf("validation hook heard %v, want [1.5]", v.losses)
	}
	if err := f.Checkpointed(1, "ckpt"); err == nil || err.Error() != "fabric: callback fabric_test.failing: disk on fire" {
		t.Errorf("a failing hook: %v", err)
	}
}
