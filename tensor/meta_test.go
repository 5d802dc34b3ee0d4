package tensor_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// TestMetaSizesAndCasts: a meta tensor reports the bytes it would hold in
// every dtype, sub-byte ones included, and casts and views stay meta.
func TestMetaSizesAndCasts(t *testing.T) {
	for _, c := range []struct {
		dt    dtype.DType
		shape []int
	}{{dtype.F32, []int{3, 5}}, {dtype.BF16, []int{7}}, {dtype.E4M3FN, []int{2, 8}}, {dtype.I8, []int{9}}, {dtype.F64, nil}} {
		m := tensor.Meta(c.dt, c.shape...)
		real := tensor.New(c.dt, c.shape...)
		if !m.IsMeta() || real.IsMeta() {
			t.Fatalf("%v: IsMeta %v for Meta and %v for New", c.dt, m.IsMeta(), real.IsMeta())
		}
		if m.Bytes() != real.Bytes() || !m.SameShape(real) || m.DType() != c.dt {
			t.Errorf("Meta(%v, %v) is %v of %d bytes; New gives %v of %d", c.dt, c.shape, m, m.Bytes(), real, real.Bytes())
		}
		for _, to := range []dtype.DType{dtype.BF16, dtype.F32, dtype.E5M2} {
			cast, want := m.To(to), tensor.New(c.dt, c.shape...).To(to)
			if !cast.IsMeta() || cast.Bytes() != want.Bytes() || cast.DType() != to {
				t.Errorf("Meta(%v).To(%v) = %v (meta %v) of %d bytes, want %d", c.dt, to, cast, cast.IsMeta(), cast.Bytes(), want.Bytes())
			}
		}
	}
	if v := tensor.Meta(dtype.F32, 4, 6).Reshape(-1, 3); !v.IsMeta() || v.Dim(0) != 8 || v.Bytes() != 96 {
		t.Errorf("a reshaped meta tensor is %v (meta %v, %d bytes), want meta float32[8 3] of 96", v, v.IsMeta(), v.Bytes())
	}
	if like := tensor.NewLike(tensor.Meta(dtype.F32, 2), dtype.I8, 5); !like.IsMeta() || like.Bytes() != 5 {
		t.Errorf("NewLike(meta) = %v, meta %v", like, like.IsMeta())
	}
	if like := tensor.NewLike(tensor.New(dtype.F32, 2), dtype.I8, 5); like.IsMeta() || len(like.Data()) != 5 {
		t.Errorf("NewLike(real) = %v, meta %v", like, like.IsMeta())
	}
}

// TestMetaKernelsPanic: every way of touching a meta tensor's elements
// (as opposed to an op, which gives a meta result) panics with a message
// that says it is a meta tensor.
func TestMetaKernelsPanic(t *testing.T) {
	real := tensor.New(dtype.F32, 4, 4)
	for _, dt := range []dtype.DType{dtype.F32, dtype.BF16, dtype.F64} {
		m := func() *tensor.Tensor { return tensor.Meta(dt, 4, 4) }
		for name, f := range map[string]func(){
			"Data":          func() { m().Data() },
			"Float32s":      func() { m().Float32s() },
			"Float64s":      func() { m().Float64s() },
			"Ints":          func() { m().Ints() },
			"Item":          func() { tensor.Meta(dt).Item() },
			"Clone":         func() { m().Clone() },
			"CopyFrom":      func() { real.CopyFrom(m()) },
			"CopyFrom into": func() { m().CopyFrom(real) },
			"Fill":          func() { m().Fill(1) },
			"Norm":          func() { m().Norm() },
			"HasNonFinite":  func() { m().HasNonFinite() },
			"AbsMax":        func() { m().AbsMax() },
			"SliceRows":     func() { tensor.SliceRows(m(), 0, 1) },
			"Flat":          func() { m().Flat(0, 4) },
		} {
			t.Run(fmt.Sprintf("%v/%s", dt, name), func(t *testing.T) {
				defer func() {
					msg := fmt.Sprint(recover())
					if !strings.Contains(msg, "meta tensor") {
						t.Errorf("%s of a meta tensor: panic %q, want one naming the meta tensor", name, msg)
					}
				}()
				f()
			})
		}
	}
}

// TestMetaOps: an op over a meta input returns a meta result of the dtype
// and shape the op computes on real inputs, and the pool hands out nothing.
func TestMetaOps(t *testing.T) {
	for _, dt := range []dtype.DType{dtype.F32, dtype.BF16, dtype.F64} {
		ops := map[string]func(mk func(...int) *tensor.Tensor) *tensor.Tensor{
			"MatMul": func(mk func(...int) *tensor.Tensor) *tensor.Tensor {
				return tensor.MatMul(mk(2, 3, 4), mk(2, 5, 4), false, true)
			},
			"Linear": func(mk func(...int) *tensor.Tensor) *tensor.Tensor {
				return tensor.Linear(mk(2, 3, 4), mk(5, 4), mk(5))
			},
			"AddBroadcast": func(mk func(...int) *tensor.Tensor) *tensor.Tensor {
				return tensor.AddBroadcast(mk(2, 3, 4), mk(3, 4), 1)
			},
			"Mul":        func(mk func(...int) *tensor.Tensor) *tensor.Tensor { return tensor.Mul(mk(6), mk(6)) },
			"Scale":      func(mk func(...int) *tensor.Tensor) *tensor.Tensor { return tensor.Scale(mk(6), 2) },
			"ReLU":       func(mk func(...int) *tensor.Tensor) *tensor.Tensor { return tensor.ReLU(mk(6)) },
			"GELU":       func(mk func(...int) *tensor.Tensor) *tensor.Tensor { return tensor.GELU(mk(6)) },
			"Softmax":    func(mk func(...int) *tensor.Tensor) *tensor.Tensor { return tensor.Softmax(mk(3, 4)) },
			"CausalMask": func(mk func(...int) *tensor.Tensor) *tensor.Tensor { return tensor.CausalMask(mk(2, 4, 4), -1) },
			"Permute":    func(mk func(...int) *tensor.Tensor) *tensor.Tensor { return tensor.Permute(mk(2, 3, 4), 0, 2, 1) },
			"Narrow":     func(mk func(...int) *tensor.Tensor) *tensor.Tensor { return tensor.Narrow(mk(2, 6), 1, 3) },
			"Conv2d": func(mk func(...int) *tensor.Tensor) *tensor.Tensor {
				return tensor.Conv2d(mk(2, 1, 5, 5), mk(3, 1, 3, 3), 1, 1)
			},
			"ScaleTo": func(mk func(...int) *tensor.Tensor) *tensor.Tensor { return tensor.ScaleTo(mk(2, 3), 2, dtype.E4M3FN) },
			"ScaledMatMul": func(mk func(...int) *tensor.Tensor) *tensor.Tensor {
				return tensor.ScaledMatMul(mk(2, 3), mk(4, 3), false, true, 1, 1, dtype.BF16)
			},
			"LayerNorm": func(mk func(...int) *tensor.Tensor) *tensor.Tensor {
				y, mean, _ := tensor.LayerNorm(mk(2, 4), mk(4), mk(4), 1e-5)
				return tensor.AddBroadcast(y.To(dtype.F32), mean, 0)
			},
			"Embedding": func(mk func(...int) *tensor.Tensor) *tensor.Tensor {
				out, err := tensor.Embedding(mk(5, 3), []int{0, 4, 2, 1}, 2, 2)
				if err != nil {
					t.Fatal(err)
				}
				return out
			},
			"CrossEntropy": func(mk func(...int) *tensor.Tensor) *tensor.Tensor {
				out, err := tensor.CrossEntropy(mk(2, 3), []int{0, 2})
				if err != nil {
					t.Fatal(err)
				}
				return out
			},
		}
		for name, op := range ops {
			want := op(func(shape ...int) *tensor.Tensor { return tensor.New(dtype.F32, shape...).To(dt) })
			before := tensor.Memory().Live
			got := op(func(shape ...int) *tensor.Tensor { return tensor.Meta(dt, shape...) })
			if live := tensor.Memory().Live; live != before {
				t.Errorf("%v %s of meta inputs took %d pool bytes", dt, name, live-before)
			}
			if !got.IsMeta() || got.DType() != want.DType() || !got.SameShape(want) {
				t.Errorf("%v %s of meta inputs = %v (meta %v), want meta %v", dt, name, got, got.IsMeta(), want)
			}
		}
	}
}

// TestPoolBytes: PoolBytes is what the pool counts for a tensor New makes.
func TestPoolBytes(t *testing.T) {
	for _, c := range []struct {
		dt dtype.DType
		n  int
	}{{dtype.F32, 1}, {dtype.F32, 1000}, {dtype.BF16, 333}, {dtype.E4M3FN, 4097}, {dtype.F64, 70000}} {
		before := tensor.Memory().Live
		x := tensor.New(c.dt, c.n)
		if got, want := tensor.PoolBytes(c.dt, c.n), tensor.Memory().Live-before; got != want {
			t.Errorf("PoolBytes(%v, %d) = %d, the pool counted %d", c.dt, c.n, got, want)
		}
		tensor.Free(x)
	}
}
