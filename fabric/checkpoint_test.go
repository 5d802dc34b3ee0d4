package fabric_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/weftml/weft/checkpoint"
	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/comm/local"
	"github.com/weftml/weft/data"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim"
	"github.com/weftml/weft/precision"
	"github.com/weftml/weft/tensor"
)

// mlpBatch is global batch i of a classification task for the reference
// MLP: 8 rows of 32 features, a pure function of i.
func mlpBatch(i uint64) data.Batch {
	rng := rand.New(rand.NewPCG(7, i))
	x := make([]float32, 8*32)
	for j := range x {
		x[j] = float32(rng.NormFloat64())
	}
	y := make([]int, 8)
	for j := range y {
		y[j] = rng.IntN(10)
	}
	return data.Batch{X: tensor.FromFloat32(x, 8, 32), Targets: y}
}

// mlpFabric is a reference MLP built from seed, set up under spec (and,
// with c, strategy st over c).
func mlpFabric(t testing.TB, seed uint64, spec, st string, c comm.Communicator) (*fabric.Fabric, *models.MLP) {
	t.Helper()
	f, m, _ := mlpFabricAdamW(t, seed, spec, st, c)
	return f, m
}

// mlpFabricAdamW is mlpFabric with the AdamW it steps.
func mlpFabricAdamW(t testing.TB, seed uint64, spec, st string, c comm.Communicator) (*fabric.Fabric, *models.MLP, *optim.AdamW) {
	t.Helper()
	pol, scaling, err := precision.ParsePolicy(spec, nil, "auto", precision.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := newFabric(t, fabric.Config{Policy: pol, LossScaling: scaling, Strategy: st, Comm: c})
	m := models.NewMLP(nn.NewInit(seed))
	opt, err := optim.NewAdamW(nn.Parameters(m), adamW)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Setup(m, opt); err != nil {
		t.Fatal(err)
	}
	return f, m, opt
}

// trainSteps trains on global batches [from, to) and returns the losses.
func trainSteps(t testing.TB, f *fabric.Fabric, m *models.MLP, from, to uint64) []float64 {
	t.Helper()
	var losses []float64
	for i := from; i < to; i++ {
		res, err := f.TrainStep(context.Background(), m, rankShare(t, f, mlpBatch(i)))
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, res.Loss)
	}
	return losses
}

// TestSaveLoadResumesExactly: 3 steps, Save, Load into a fabric of a
// model built from another seed, 3 more steps: the losses are those of 6
// steps straight, bit for bit (weights, AdamW moments and the loss
// scaler's state all came back).
func TestSaveLoadResumesExactly(t *testing.T) {
	straight, sm := mlpFabric(t, 1, "16-mixed", "", nil)
	want := trainSteps(t, straight, sm, 0, 6)

	first, fm := mlpFabric(t, 1, "16-mixed", "", nil)
	trainSteps(t, first, fm, 0, 3)
	dir := filepath.Join(t.TempDir(), "ckpt")
	if err := first.Save(context.Background(), dir, fabric.SaveOptions{Step: 3, Config: map[string]string{"note": "mine"}}); err != nil {
		t.Fatal(err)
	}
	resumed, rm := mlpFabric(t, 99, "16-mixed", "", nil)
	loaded, err := resumed.Load(dir, fabric.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var config map[string]string
	if err := json.Unmarshal(loaded.Manifest.Config, &config); err != nil || loaded.Manifest.Step != 3 || config["note"] != "mine" || len(loaded.Converted) != 0 {
		t.Fatalf("manifest step %d config %s, conversions %q; want 3, the saved config, none", loaded.Manifest.Step, loaded.Manifest.Config, loaded.Converted)
	}
	if resumed.StepCount() != 3 {
		t.Fatalf("step count %d after load, want 3", resumed.StepCount())
	}
	if got := append(want[:3:3], trainSteps(t, resumed, rm, 3, 6)...); !slices.Equal(got, want) {
		t.Fatalf("resumed losses %v, straight %v", got, want)
	}
}

// TestLoadReplacesValues: Load on one device leaves live the checkpoint's
// values and moments and nothing of the values Setup made, which it
// replaces (they once stayed, a copy of the model in every resumed run).
func TestLoadReplacesValues(t *testing.T) {
	first, fm := mlpFabric(t, 1, "32-true", "", nil)
	trainSteps(t, first, fm, 0, 1)
	dir := filepath.Join(t.TempDir(), "ckpt")
	if err := first.Save(context.Background(), dir, fabric.SaveOptions{Step: 1}); err != nil {
		t.Fatal(err)
	}
	resumed, rm := mlpFabric(t, 99, "32-true", "", nil)
	var params int64
	for _, p := range nn.Parameters(rm) {
		params += int64(p.Var.Value.Bytes())
	}
	before := tensor.Memory().Live
	if _, err := resumed.Load(dir, fabric.LoadOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := tensor.Memory().Live - before; got != 2*params {
		t.Errorf("Load added %d live bytes, want %d: the two AdamW moments of %d bytes of parameters", got, 2*params, params)
	}
}

// TestLoadReplacesValuesOnRanks: on 2 ranks of every data-parallel
// strategy, Load leaves live only the moments it restores (each rank's
// chunks, padded to whole chunks, under ZeRO and FSDP), nothing of the
// values Setup made, of the whole moments a rank cut its chunks from, or
// of the chunks cut before (each once stayed live in a resumed run).
func TestLoadReplacesValuesOnRanks(t *testing.T) {
	const ranks = 2
	for _, st := range []string{"ddp", "zero1", "zero2", "fsdp"} {
		dir := filepath.Join(t.TempDir(), "ckpt")
		onRanks(t, ranks, func(_ int, c comm.Communicator) error {
			f, m := mlpFabric(t, 1, "32-true", st, c)
			trainSteps(t, f, m, 0, 1)
			return f.Save(context.Background(), dir, fabric.SaveOptions{Step: 1})
		})
		var want int64 // both ranks' moments, as the pool counts them
		_, m := mlpFabric(t, 1, "32-true", "", nil)
		for _, p := range nn.Parameters(m) {
			n := p.Var.Value.Len()
			if st != "ddp" {
				n = (n + ranks - 1) / ranks
			}
			want += ranks * 2 * tensor.PoolBytes(dtype.F32, n)
		}
		// Live counts every rank's tensors: rank 0 reads it while the
		// others wait at a barrier, before any rank loads and after all have.
		var before, after int64
		onRanks(t, ranks, func(r int, c comm.Communicator) error {
			f, _ := mlpFabric(t, 99, "32-true", st, c)
			read := func(at *int64) error {
				if err := c.Barrier(context.Background()); err != nil {
					return err
				}
				if r == 0 {
					*at = tensor.Memory().Live
				}
				return c.Barrier(context.Background())
			}
			if err := read(&before); err != nil {
				return err
			}
			_, err := f.Load(dir, fabric.LoadOptions{})
			return errors.Join(err, read(&after))
		})
		if after-before != want {
			t.Errorf("%s: Load added %d live bytes on %d ranks, want %d (their AdamW moments)", st, after-before, ranks, want)
		}
	}
}

// onRanks runs fn on n in-process ranks.
func onRanks(t *testing.T, n int, fn func(r int, c comm.Communicator) error) {
	t.Helper()
	if err := comm.Each(local.NewGroup(n, local.Options{}), fn); err != nil {
		t.Fatal(err)
	}
}

// TestSaveFullOrSharded: under zero1 on 2 ranks a sharded save writes one
// optimizer file per rank and a Full save none, with the moments whole;
// the sharded checkpoint loaded onto 4 ranks says it resharded, and a Full
// save from there holds the same moments, byte for byte; both load on one
// device to the same next loss, and the sharded save consolidated holds
// the full one's tensors. Low-bit moments (adamw8bit, adamw4bit,
// adamwfp8) reshard so too: their codes and scales are the whole
// parameter's blocks on any count.
func TestSaveFullOrSharded(t *testing.T) {
	for _, spec := range []string{"32-true", "bf16-mixed+adamw8bit", "bf16-mixed+adamw4bit", "bf16-mixed+adamwfp8"} {
		t.Run(spec, func(t *testing.T) { saveFullOrSharded(t, spec) })
	}
}

func saveFullOrSharded(t *testing.T, spec string) {
	root := t.TempDir()
	sharded, full, four := filepath.Join(root, "sharded"), filepath.Join(root, "full"), filepath.Join(root, "four")
	onRanks(t, 2, func(_ int, c comm.Communicator) error {
		f, m := mlpFabric(t, 1, spec, "zero1", c)
		trainSteps(t, f, m, 0, 2)
		if err := f.Save(context.Background(), sharded, fabric.SaveOptions{}); err != nil {
			return err
		}
		return f.Save(context.Background(), full, fabric.SaveOptions{Full: true})
	})
	for dir, want := range map[string]int{sharded: 2, full: 0} {
		shards, _ := filepath.Glob(filepath.Join(dir, "optim-rank-*"))
		if len(shards) != want {
			t.Errorf("%s: %d optimizer shard files, want %d", filepath.Base(dir), len(shards), want)
		}
	}
	var notes []string
	onRanks(t, 4, func(r int, c comm.Communicator) error {
		f, m, opt := mlpFabricAdamW(t, 5, spec, "zero1", c)
		loaded, err := f.Load(sharded, fabric.LoadOptions{})
		if err != nil {
			return err
		}
		if opt.StateFormat != nil {
			if err := blockChunks(f, opt, m, 4); err != nil {
				return err
			}
		}
		if r == 0 {
			notes = loaded.Converted
		}
		return f.Save(context.Background(), four, fabric.SaveOptions{Full: true})
	})
	if !slices.Equal(notes, []string{"optimizer state resharded from 2 to 4 ranks"}) {
		t.Errorf("conversions loading 2 ranks' shards onto 4: %q", notes)
	}
	a, b := readState(t, full), readState(t, four)
	for _, name := range a.Names() {
		x, _ := a.Tensor(name)
		y, ok := b.Tensor(name)
		if !ok || !slices.Equal(x.Data, y.Data) {
			t.Errorf("%s differs between the full saves of 2 ranks and of 4 ranks resharded", name)
		}
	}
	consolidated := filepath.Join(root, "consolidated.safetensors")
	if err := checkpoint.Consolidate(sharded, consolidated); err != nil {
		t.Fatal(err)
	}
	joined, err := checkpoint.ReadSafetensors(consolidated)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range a.Names() {
		x, _ := a.Tensor(name)
		if y, ok := joined.Tensor(name); !ok || !slices.Equal(x.Data, y.Data) {
			t.Errorf("%s differs between the full save and the sharded one consolidated", name)
		}
	}
	var losses []float64
	for _, dir := range []string{sharded, full} {
		f, m := mlpFabric(t, 5, spec, "", nil)
		loaded, err := f.Load(dir, fabric.LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if dir == sharded && !slices.Equal(loaded.Converted, []string{"optimizer state joined from 2 ranks' shards"}) {
			t.Errorf("conversions loading shards on one device: %q", loaded.Converted)
		}
		losses = append(losses, trainSteps(t, f, m, 2, 4)...)
	}
	if !slices.Equal(losses[:2], losses[2:]) {
		t.Errorf("losses after loading the sharded save %v, the full save %v", losses[:2], losses[2:])
	}
}

func readState(t *testing.T, dir string) *checkpoint.File {
	t.Helper()
	f, err := checkpoint.ReadSafetensors(filepath.Join(dir, "state.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestLoadCastsToThePrecision: a checkpoint saved in 32-true loads into a
// bf16-true fabric with every parameter rounded to bfloat16, and says so.
func TestLoadCastsToThePrecision(t *testing.T) {
	f32, m32 := mlpFabric(t, 1, "32-true", "", nil)
	trainSteps(t, f32, m32, 0, 1)
	dir := filepath.Join(t.TempDir(), "ckpt")
	if err := f32.Save(context.Background(), dir, fabric.SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	bf, mbf := mlpFabric(t, 2, "bf16-true", "", nil)
	loaded, err := bf.Load(dir, fabric.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	params := nn.Parameters(m32)
	if len(loaded.Converted) == 0 || !strings.HasPrefix(loaded.Converted[0], fmt.Sprintf("cast %d parameters float32→", len(params))) {
		t.Fatalf("conversions %q; want first a cast of all %d parameters", loaded.Converted, len(params))
	}
	for i, p := range nn.Parameters(mbf) {
		want := params[i].Var.Value.To(dtype.BF16)
		if p.Var.Value.DType() != dtype.BF16 || !slices.Equal(p.Var.Value.Data(), want.Data()) {
			t.Fatalf("%s: loaded %s, want the checkpoint's float32 rounded to bfloat16", p.Path, p.Var.Value.DType())
		}
	}
	if l := trainSteps(t, bf, mbf, 1, 2)[0]; math.IsNaN(l) || l > 2*math.Log(10) {
		t.Fatalf("loss %v after the cast: the trained weights were not taken", l)
	}
}

// TestLoadRawStrict: a plain safetensors of weights loads into the model
// and nothing else; a key the model lacks, or a parameter the file lacks,
// fails a strict load naming it and is reported by a partial one.
func TestLoadRawStrict(t *testing.T) {
	src := models.NewMLP(nn.NewInit(3))
	var tensors []checkpoint.Tensor
	for _, p := range nn.Parameters(src) {
		if p.Path == "head.bias" {
			continue
		}
		v := p.Var.Value
		tensors = append(tensors, checkpoint.Tensor{Name: p.Path, DType: v.DType(), Shape: v.Shape(), Data: v.Data()})
	}
	extra := tensor.FromFloat32([]float32{1, 2}, 2)
	tensors = append(tensors, checkpoint.Tensor{Name: "extra.scale", DType: dtype.F32, Shape: []int{2}, Data: extra.Data()})
	path := filepath.Join(t.TempDir(), "weights.safetensors")
	if err := checkpoint.WriteSafetensors(path, tensors, nil); err != nil {
		t.Fatal(err)
	}
	f, m := mlpFabric(t, 4, "32-true", "", nil)
	if _, err := f.LoadRaw(path, m, fabric.LoadOptions{}); err == nil || !strings.Contains(err.Error(), "head.bias is missing") {
		t.Fatalf("strict load of a file without head.bias: %v", err)
	}
	headBias := slices.Clone(m.Head.Bias.Value.Data())
	loaded, err := f.LoadRaw(path, m, fabric.LoadOptions{Partial: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(loaded.Missing, []string{"head.bias"}) || !slices.Equal(loaded.Unexpected, []string{"extra.scale"}) {
		t.Fatalf("missing %q unexpected %q; want [head.bias] [extra.scale]", loaded.Missing, loaded.Unexpected)
	}
	if !slices.Equal(m.FC1.Weight.Value.Data(), src.FC1.Weight.Value.Data()) || !slices.Equal(m.Head.Bias.Value.Data(), headBias) {
		t.Fatal("a partial load must take the file's weights and leave the missing parameter as it was")
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	tensors = tensors[:len(tensors)-1] // without extra.scale, still without head.bias
	if err := checkpoint.WriteSafetensors(path, tensors, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := f.LoadRaw(path, m, fabric.LoadOptions{}); err == nil || !strings.Contains(err.Error(), "head.bias") {
		t.Fatalf("strict load still must name head.bias: %v", err)
	}
}

// TestLoadRefusesAnotherModel: a parameter of another shape is an error
// that says the checkpoint holds another model, partial or not.
func TestLoadRefusesAnotherModel(t *testing.T) {
	v := tensor.New(dtype.F32, 3, 3)
	path := filepath.Join(t.TempDir(), "w.safetensors")
	if err := checkpoint.WriteSafetensors(path, []checkpoint.Tensor{{Name: "fc1.weight", DType: dtype.F32, Shape: []int{3, 3}, Data: v.Data()}}, nil); err != nil {
		t.Fatal(err)
	}
	f, m := mlpFabric(t, 4, "32-true", "", nil)
	if _, err := f.LoadRaw(path, m, fabric.LoadOptions{Partial: true}); err == nil || !strings.Contains(err.Error(), "another model") {
		t.Fatalf("loading a 3×3 fc1.weight: %v", err)
	}
}

// TestLoadRawUnderFSDP: LoadRaw into a fabric's model after Setup under
// fsdp cuts each rank's chunks from the file's weights: gathered, they are
// the file's.
func TestLoadRawUnderFSDP(t *testing.T) {
	src := models.NewMLP(nn.NewInit(3))
	var tensors []checkpoint.Tensor
	for _, p := range nn.Parameters(src) {
		v := p.Var.Value
		tensors = append(tensors, checkpoint.Tensor{Name: p.Path, DType: v.DType(), Shape: v.Shape(), Data: v.Data()})
	}
	path := filepath.Join(t.TempDir(), "weights.safetensors")
	if err := checkpoint.WriteSafetensors(path, tensors, nil); err != nil {
		t.Fatal(err)
	}
	onRanks(t, 2, func(r int, c comm.Communicator) error {
		f, m := mlpFabric(t, 4, "32-true", "fsdp", c)
		if _, err := f.LoadRaw(path, m, fabric.LoadOptions{}); err != nil {
			return err
		}
		if !m.FC1.Weight.Value.IsMeta() {
			t.Errorf("rank %d holds fc1.weight whole after LoadRaw under fsdp", r)
		}
		if err := f.Gather(); err != nil {
			return err
		}
		for i, p := range nn.Parameters(m) {
			if !slices.Equal(p.Var.Value.Data(), tensors[i].Data) {
				t.Errorf("rank %d: %s gathered is not the file's", r, p.Path)
			}
		}
		return nil
	})
}
