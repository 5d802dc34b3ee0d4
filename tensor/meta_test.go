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
// panics with a message that says it is a meta tensor.
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
			"Add":           func() { tensor.Add(m(), real.To(dt)) },
			"Scale":         func() { tensor.Scale(m(), 2) },
			"MatMul":        func() { tensor.MatMul(real.To(dt), m(), false, false) },
			"Linear":        func() { tensor.Linear(real.To(dt), m(), nil) },
			"Permute":       func() { tensor.Permute(m(), 1, 0) },
			"Narrow":        func() { tensor.Narrow(m(), 0, 2) },
			"SliceRows":     func() { tensor.SliceRows(m(), 0, 1) },
			"Softmax":       func() { tensor.Softmax(m()) },
			"ReLU":          func() { tensor.ReLU(m()) },
			"ScaleTo":       func() { tensor.ScaleTo(m(), 2, dtype.E4M3FN) },
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
