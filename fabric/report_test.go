package fabric_test

import (
	"bytes"
	"context"
	"errors"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim"
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
type onlyValidation struct {
	steps  []int
	losses []float64
}

func (o *onlyValidation) OnValidationEnd(step int, loss float64) error {
	o.steps, o.losses = append(o.steps, step), append(o.losses, loss)
	return nil
}

var _ fabric.ValidationEndHook = (*onlyValidation)(nil)

// stepEnds records the steps it hears of.
type stepEnds []int

func (s *stepEnds) OnStepEnd(step int, _ fabric.StepResult) error {
	*s = append(*s, step)
	return nil
}

// failing fails every checkpoint hook.
type failing struct{}

func (failing) OnCheckpoint(int, string) error { return errors.New("disk on fire") }

// TestCallbackHooks: TrainStep, EvalLoss and Save tell the callbacks that
// implement their hooks, and no other; a hook's error is Save's.
func TestCallbackHooks(t *testing.T) {
	v, ends := &onlyValidation{}, &stepEnds{}
	f := newFabric(t, fabric.Config{Callbacks: []any{v, "not a callback", failing{}, ends}})
	m := models.NewMLP(nn.NewInit(1))
	opt, err := optim.NewAdamW(nn.Parameters(m), adamW)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Setup(m, opt); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := f.TrainStep(context.Background(), m, mlpBatch(uint64(i))); err != nil {
			t.Fatal(err)
		}
	}
	loss, err := f.EvalLoss(context.Background(), m, mlpBatch(7), mlpBatch(8))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(*ends, []int{0, 1}) || !slices.Equal(v.steps, []int{1}) || !slices.Equal(v.losses, []float64{loss}) {
		t.Errorf("step ends heard %v, validations %v %v; want [0 1], step 1 with loss %v", *ends, v.steps, v.losses, loss)
	}
	err = f.Save(context.Background(), filepath.Join(t.TempDir(), "ckpt"), fabric.SaveOptions{Step: 2})
	if err == nil || err.Error() != "fabric: callback fabric_test.failing: disk on fire" {
		t.Errorf("a failing hook: %v", err)
	}
}
