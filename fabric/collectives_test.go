package fabric_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/comm/local"
	_ "github.com/weftml/weft/comm/mpi" // the "mpi" backend, under mpirun
	"github.com/weftml/weft/data"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/fabric"
	mpirunjob "github.com/weftml/weft/internal/mpirun"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim"
	"github.com/weftml/weft/precision"
	"github.com/weftml/weft/tensor"
)

// mpiWorld is the number of processes mpirun started, 0 outside mpirun.
var mpiWorld, _ = strconv.Atoi(os.Getenv("OMPI_COMM_WORLD_SIZE"))

// TestCollectives checks the fabric's collectives on every rank against
// values computed here: on a fabric never distributed (a world of one), on
// 1 and 3 in-process ranks, and, when mpirun launched this binary (see
// TestCollectivesUnderMpirun), on the job's processes. Each world runs
// them before Setup and after an FSDP step.
func TestCollectives(t *testing.T) {
	if mpiWorld > 0 {
		comms, err := comm.Open("mpi", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		collectivesOn(t, comms)
		return
	}
	if err := checkCollectives(newFabric(t, fabric.Config{Precision: precision.Pure{DType: dtype.F64}}), 0, 1); err != nil {
		t.Errorf("undistributed: %v", err)
	}
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("local/%d", n), func(t *testing.T) { collectivesOn(t, local.NewGroup(n, local.Options{})) })
	}
}

func collectivesOn(t *testing.T, comms []comm.Communicator) {
	err := comm.Each(comms, func(_ int, c comm.Communicator) error {
		for _, setup := range []bool{false, true} {
			f := newFabric(t, fabric.Config{Precision: precision.Pure{DType: dtype.F64}, Strategy: "fsdp", Comm: c})
			if setup {
				if err := fsdpStep(f, c); err != nil {
					return err
				}
			}
			if err := checkCollectives(f, c.Rank(), c.Size()); err != nil {
				return fmt.Errorf("rank %d (after Setup %v): %w", c.Rank(), setup, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// fsdpStep sets f up with an MLP and trains one step on this rank's share
// of a batch, so that the strategy's collectives have run on the link.
func fsdpStep(f *fabric.Fabric, c comm.Communicator) error {
	m := models.NewMLP(nn.NewInit(1))
	opt, err := optim.NewAdamW(nn.Parameters(m), optim.AdamWConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.95})
	if err != nil {
		return err
	}
	if err := f.Setup(m, opt); err != nil {
		return err
	}
	n := 2 * c.Size()
	x := make([]float64, n*32)
	for i := range x {
		x[i] = float64(i%7) / 7
	}
	whole := data.Batch{X: tensor.FromFloat64(x, n, 32), Targets: make([]int, n)}
	b, err := whole.Share(c.Rank(), c.Size())
	if err != nil {
		return err
	}
	logits, err := f.Forward(func(tp *autograd.Tape) (*autograd.Var, error) { return m.Forward(tp, b) })
	if err != nil {
		return err
	}
	loss, err := f.Tape().CrossEntropy(logits, b.Targets)
	if err != nil {
		return err
	}
	if err := f.Backward(loss); err != nil {
		return err
	}
	_, err = f.Step()
	return err
}

// checkCollectives runs every collective on rank r of n, whose tensor is
// (r+1, -(r+1)/2, r²), and compares each result with its exact value.
func checkCollectives(f *fabric.Fabric, r, n int) error {
	ctx := context.Background()
	mine := func(r int) []float64 { return []float64{float64(r + 1), -float64(r+1) / 2, float64(r * r)} }
	x := tensor.FromFloat64(mine(r), 3)
	var all, sum, maxs, mins []float64
	for k := range n {
		v := mine(k)
		all = append(all, v...)
		if k == 0 {
			sum, maxs, mins = slices.Clone(v), slices.Clone(v), slices.Clone(v)
			continue
		}
		for i := range v {
			sum[i] += v[i]
			maxs[i], mins[i] = max(maxs[i], v[i]), min(mins[i], v[i])
		}
	}
	mean := make([]float64, 3)
	for i := range sum {
		mean[i] = sum[i] * (1 / float64(n))
	}

	gathered, err := f.AllGather(ctx, x)
	if err != nil {
		return err
	}
	if err := equal("allgather", gathered, []int{n, 3}, all); err != nil {
		return err
	}
	for _, c := range []struct {
		op   fabric.Reduction
		want []float64
	}{{fabric.Sum, sum}, {fabric.Mean, mean}, {fabric.Max, maxs}, {fabric.Min, mins}} {
		got, err := f.AllReduce(ctx, x, c.op)
		if err != nil {
			return err
		}
		if err := equal("allreduce "+c.op.String(), got, []int{3}, c.want); err != nil {
			return err
		}
	}
	got, err := f.Broadcast(ctx, x, n-1)
	if err != nil {
		return err
	}
	if err := equal("broadcast", got, []int{3}, mine(n-1)); err != nil {
		return err
	}
	if err := equal("the input", x, []int{3}, mine(r)); err != nil {
		return err
	}
	if err := f.Barrier(ctx); err != nil {
		return err
	}

	// Bad calls fail alike on every rank, before any communication.
	_, errOp := f.AllReduce(ctx, x, fabric.Reduction(9))
	_, errMean := f.AllReduce(ctx, tensor.New(dtype.I32, 2), fabric.Mean)
	_, errSrc := f.Broadcast(ctx, x, n)
	_, errNil := f.AllGather(ctx, nil)
	_, errMeta := f.AllReduce(ctx, tensor.Meta(dtype.F32, 2), fabric.Sum)
	for _, c := range []struct {
		err  error
		want string
	}{
		{errOp, "fabric: allreduce: unknown reduction Reduction(9) (accepted: sum, mean, max, min)"},
		{errMean, "fabric: allreduce: the mean of the int32 tensor int32[2] would not be one"},
		{errSrc, fmt.Sprintf("fabric: broadcast: src rank %d outside [0, %d)", n, n)},
		{errNil, "fabric: allgather needs a tensor with values, got <nil>"},
		{errMeta, "fabric: allreduce needs a tensor with values, got float32[2]"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			return fmt.Errorf("got %v, want an error containing %q", c.err, c.want)
		}
	}
	return f.Barrier(ctx) // the group is still usable
}

func equal(what string, got *tensor.Tensor, shape []int, want []float64) error {
	if !slices.Equal(got.Shape(), shape) || !slices.Equal(got.Float64s(), want) {
		return fmt.Errorf("%s: got %v %v, want %v %v", what, got.Shape(), got.Float64s(), shape, want)
	}
	return nil
}

// TestCollectivesUnderMpirun runs TestCollectives as two and as three
// Open MPI processes.
func TestCollectivesUnderMpirun(t *testing.T) {
	if mpiWorld > 0 {
		t.Skip("already running under mpirun")
	}
	mpirun, err := exec.LookPath("mpirun")
	if err != nil || testing.Short() {
		t.Skip("mpirun not installed (apt-get install openmpi-bin libopenmpi-dev) or -short")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{2, 3} {
		args := []string{"--oversubscribe", "-np", strconv.Itoa(n), self, "-test.run=^TestCollectives$", "-test.v"}
		if os.Geteuid() == 0 {
			args = append([]string{"--allow-run-as-root"}, args...)
		}
		out, err := mpirunjob.Retry(func() ([]byte, error) { return exec.CommandContext(t.Context(), mpirun, args...).CombinedOutput() })
		if got := strings.Count(string(out), "--- PASS: TestCollectives "); err != nil || got != n {
			t.Errorf("mpirun -np %d: %d ranks passed (%v):\n%s", n, got, err, out)
		}
	}
}
