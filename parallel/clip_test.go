package parallel_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim"
)

// asIs is a precision plugin with no roles: the model computes in the
// dtype of its parameters.
type asIs struct{}

func (asIs) Name() string { return "as-is" }

// gradNorm is the gradient norm the fabric's ClipGradNorm reports for one
// backward of the 8-head gpt on the test batch, on c's ranks as a mesh of
// tp columns with strategy st on its columns (c nil: one device).
func gradNorm(c comm.Communicator, tp int, st string) (float64, error) {
	g := newGPT() // float64 already
	cfg := fabric.Config{Precision: asIs{}}
	if c != nil {
		mesh, err := comm.NewMesh(context.Background(), c, tp)
		if err != nil {
			return 0, err
		}
		defer mesh.Close()
		cfg.Comm, cfg.Mesh, cfg.TensorPlan, cfg.Strategy = c, mesh, models.GPTPlan, st
	}
	f, err := fabric.New(cfg)
	if err != nil {
		return 0, err
	}
	if err := f.Setup(g, optim.NewSGD(nn.Parameters(g), 1)); err != nil {
		return 0, err
	}
	b := batch()
	if f.Rank() != nil { // the strategy averages the shares' gradients
		var err error
		if b, err = b.Share(f.Rank().Comm().Rank(), f.Rank().Comm().Size()); err != nil {
			return 0, err
		}
	}
	logits, err := f.Forward(func(tp *autograd.Tape) (*autograd.Var, error) { return g.Forward(tp, b) })
	if err != nil {
		return 0, err
	}
	loss, err := f.Tape().CrossEntropy(logits, b.Targets)
	if err != nil {
		return 0, err
	}
	if err := f.Backward(loss); err != nil {
		return 0, err
	}
	return f.ClipGradNorm(math.Inf(1))
}

// TestClipGradNormSplit: ClipGradNorm on a tensor-parallel mesh, with ddp
// and with zero2 on its columns, reports the one-device gradient norm:
// split tensors' shares add up over the row, replicated ones count once.
func TestClipGradNormSplit(t *testing.T) {
	want, err := gradNorm(nil, 1, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []string{"ddp", "zero2"} {
		comms, err := comm.Open("local", 4, 0)
		if err != nil {
			t.Fatal(err)
		}
		err = comm.Each(comms, func(_ int, c comm.Communicator) error {
			got, err := gradNorm(c, 2, st)
			if err == nil && math.Abs(got-want) > 1e-12*want {
				err = fmt.Errorf("%s, rank %d: gradient norm %.15g, one device %.15g", st, c.Rank(), got, want)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
