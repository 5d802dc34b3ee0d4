package fabric_test

import (
	"bytes"
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/data"
	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim"
	"github.com/weftml/weft/precision"
)

// TestSetupModuleThenOptimizers: SetupModule then SetupOptimizers trains
// as Setup does, bit for bit; a training step before SetupOptimizers, or
// SetupOptimizers before SetupModule, is an error.
func TestSetupModuleThenOptimizers(t *testing.T) {
	together, tm := mlpFabric(t, 1, "bf16-true", "", nil)
	want := trainSteps(t, together, tm, 0, 3)

	p, err := precision.Parse("bf16-true", precision.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := newFabric(t, fabric.Config{Precision: p})
	m := models.NewMLP(nn.NewInit(1))
	opt, err := optim.NewAdamW(nn.Parameters(m), adamW)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.SetupOptimizers(opt); err == nil {
		t.Fatal("SetupOptimizers before SetupModule must fail")
	}
	if err := f.SetupModule(m); err != nil {
		t.Fatal(err)
	}
	if _, err := f.TrainStep(context.Background(), m, mlpBatch(0)); err == nil || !strings.Contains(err.Error(), "SetupOptimizers") {
		t.Fatalf("a step without an optimizer: %v", err)
	}
	if err := f.SetupOptimizers(opt); err != nil {
		t.Fatal(err)
	}
	if got := trainSteps(t, f, m, 0, 3); !slices.Equal(got, want) {
		t.Fatalf("losses %v set up in two calls, %v in one", got, want)
	}
}

// TestInitModuleEmpty: a model built from InitModule(true) has no storage
// until SetupModule, which gives it the weights InitModule(false) builds,
// bit for bit: whole on one device and under ddp, only this rank's chunks
// under fsdp (gathered, the same weights); Config.Seed decides them.
func TestInitModuleEmpty(t *testing.T) {
	whole := func(seed uint64) [][]byte {
		f := newFabric(t, fabric.Config{Seed: seed})
		var out [][]byte
		for _, p := range nn.Parameters(models.NewMLP(f.InitModule(false))) {
			out = append(out, slices.Clone(p.Var.Value.Data()))
		}
		return out
	}
	want := whole(11)
	if slices.EqualFunc(want, whole(12), bytes.Equal) {
		t.Fatal("seeds 11 and 12 built the same weights")
	}
	for _, st := range []string{"single", "ddp", "fsdp"} {
		onRanks(t, 2, func(r int, c comm.Communicator) error {
			pol, _, err := precision.ParsePolicy("32-true", nil, "auto", precision.Options{})
			if err != nil {
				return err
			}
			cfg := fabric.Config{Policy: pol, Seed: 11, Strategy: st, Comm: c}
			if st == "single" {
				cfg.Comm = nil
			}
			f, err := fabric.New(cfg)
			if err != nil {
				return err
			}
			m := models.NewMLP(f.InitModule(true))
			if !m.FC1.Weight.Value.IsMeta() {
				t.Errorf("%s: InitModule(true) built storage", st)
			}
			if err := f.SetupModule(m); err != nil {
				return err
			}
			if held := m.FC1.Weight.Value; st == "fsdp" && !held.IsMeta() {
				t.Errorf("fsdp rank %d holds the whole fc1.weight after setup", r)
			}
			if err := f.Gather(); err != nil {
				return err
			}
			for i, p := range nn.Parameters(m) {
				if !bytes.Equal(p.Var.Value.Data(), want[i]) {
					t.Errorf("%s rank %d: %s differs from the whole build's", st, r, p.Path)
				}
			}
			return nil
		})
	}
}

// TestLoaderShares: on 2 ranks each Loader gives its rank half of every
// global batch, the two halves in rank order being the batch, and
// TrainStep on them trains as one device does on the global batches,
// within float32 rounding.
func TestLoaderShares(t *testing.T) {
	single, sm := mlpFabric(t, 1, "32-true", "", nil)
	want := trainSteps(t, single, sm, 0, 3)
	var shares [2][]data.Batch
	var viaLoader [2][]float64
	onRanks(t, 2, func(r int, c comm.Communicator) error {
		f, m := mlpFabric(t, 1, "32-true", "ddp", c)
		l := f.SetupDataLoader(fabric.DatasetFunc(func(i uint64) (data.Batch, error) { return mlpBatch(i), nil }))
		for range 3 {
			b, err := l.Next()
			if err != nil {
				return err
			}
			shares[r] = append(shares[r], b)
			res, err := f.TrainStep(context.Background(), m, b)
			if err != nil {
				return err
			}
			viaLoader[r] = append(viaLoader[r], res.Loss)
		}
		return nil
	})
	for i := range 3 {
		global := mlpBatch(uint64(i))
		a, b := shares[0][i], shares[1][i]
		if !slices.Equal(append(slices.Clone(a.Targets), b.Targets...), global.Targets) ||
			!slices.Equal(append(slices.Clone(a.X.Data()), b.X.Data()...), global.X.Data()) {
			t.Fatalf("batch %d: the ranks' shares are not the global batch in rank order", i)
		}
	}
	for r := range 2 {
		for i, l := range viaLoader[r] {
			if math.Abs(l-want[i]) > 1e-5*want[i] {
				t.Errorf("rank %d step %d: loss %v on 2 ranks, %v on one", r, i, l, want[i])
			}
		}
	}
	l := single.SetupDataLoader(fabric.DatasetFunc(func(i uint64) (data.Batch, error) { return mlpBatch(i), nil }))
	l.Seek(5)
	if b, err := l.Next(); err != nil || !slices.Equal(b.Targets, mlpBatch(5).Targets) {
		t.Fatalf("after Seek(5) a one-device loader gives %v (%v), want batch 5 whole", b.Targets, err)
	}
}

// TestPrintOnRankZero: of 2 ranks only rank 0 is global zero and prints.
func TestPrintOnRankZero(t *testing.T) {
	var outs [2]bytes.Buffer
	var zero [2]bool
	onRanks(t, 2, func(r int, c comm.Communicator) error {
		f, _ := mlpFabric(t, 1, "32-true", "ddp", c)
		zero[r] = f.IsGlobalZero()
		_, err := f.Print(&outs[r], "validation loss", 1.5)
		return err
	})
	if !zero[0] || zero[1] || outs[0].String() != "validation loss 1.5\n" || outs[1].Len() != 0 {
		t.Fatalf("global zero %v, printed %q and %q; want rank 0 alone", zero, outs[0].String(), outs[1].String())
	}
	if !newFabric(t, fabric.Config{}).IsGlobalZero() {
		t.Fatal("a fabric on one device is global zero")
	}
}

// rowsOnly is a dataset that draws each rank's rows alone and refuses to
// draw a whole batch.
type rowsOnly struct{}

func (rowsOnly) Batch(uint64) (data.Batch, error) {
	return data.Batch{}, errors.New("a RankDataset's whole batch was drawn")
}

func (rowsOnly) Share(i uint64, r, n int) (data.Batch, error) { return mlpBatch(i).Share(r, n) }

// TestLoaderUsesRankDataset: a Loader over a RankDataset asks it for this
// rank's rows only.
func TestLoaderUsesRankDataset(t *testing.T) {
	onRanks(t, 2, func(r int, c comm.Communicator) error {
		f, _ := mlpFabric(t, 1, "32-true", "ddp", c)
		b, err := f.SetupDataLoader(rowsOnly{}).Next()
		if err != nil {
			return err
		}
		if want, _ := mlpBatch(0).Share(r, 2); !slices.Equal(b.Targets, want.Targets) {
			t.Errorf("rank %d: targets %v, want %v", r, b.Targets, want.Targets)
		}
		return nil
	})
}
