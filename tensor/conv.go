package tensor

import (
	"fmt"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/internal/gemm"
)

// ConvGeom is the geometry of a 2-D convolution.
type ConvGeom struct {
	N, C, H, W   int // input batch, channels, height, width
	Cout, KH, KW int // filters and kernel size
	Stride, Pad  int
	OutH, OutW   int
}

func convGeom(x, w *Tensor, stride, pad int) ConvGeom {
	if len(x.shape) != 4 || len(w.shape) != 4 || x.shape[1] != w.shape[1] || stride < 1 || pad < 0 {
		panic(fmt.Sprintf("tensor: conv2d of %v with %v (stride %d, pad %d)", x.shape, w.shape, stride, pad))
	}
	g := ConvGeom{N: x.shape[0], C: x.shape[1], H: x.shape[2], W: x.shape[3],
		Cout: w.shape[0], KH: w.shape[2], KW: w.shape[3], Stride: stride, Pad: pad}
	g.OutH = (g.H+2*pad-g.KH)/stride + 1
	g.OutW = (g.W+2*pad-g.KW)/stride + 1
	return g
}

// Conv2d cross-correlates x [N, C, H, W] with w [Cout, C, KH, KW] (no bias;
// cuDNN adds it as a separate op) by im2col and one GEMM per image.
func Conv2d(x, w *Tensor, stride, pad int) *Tensor {
	g := convGeom(x, w, stride, pad)
	out := New(promoteAll(x, w), g.N, g.Cout, g.OutH, g.OutW)
	if out.dtype == dtype.F64 {
		storeAs(out, conv2d(get[float64](x), get[float64](w), g))
	} else {
		storeAs(out, conv2d(get[float32](x), get[float32](w), g))
	}
	return out
}

func conv2d[T float](xs, ws []T, g ConvGeom) []T {
	ckk, hw := g.C*g.KH*g.KW, g.OutH*g.OutW
	cols, ys := make([]T, ckk*hw), make([]T, g.N*g.Cout*hw)
	for n := range g.N {
		im2col(cols, xs[n*g.C*g.H*g.W:], g, false)
		gemmT(false, false, g.Cout, hw, ckk, ws, ckk, cols, hw, 0, ys[n*g.Cout*hw:], hw)
	}
	return ys
}

// Conv2dBackward returns the gradients of x and w given dy [N, Cout, OH, OW].
func Conv2dBackward(x, w, dy *Tensor, stride, pad int) (dx, dw *Tensor) {
	g := convGeom(x, w, stride, pad)
	dx, dw = New(promoteAll(x, dy), x.shape...), New(promoteAll(w, dy), w.shape...)
	if dx.dtype == dtype.F64 {
		gx, gw := conv2dBackward(get[float64](x), get[float64](w), get[float64](dy), g)
		storeAs(dx, gx)
		storeAs(dw, gw)
	} else {
		gx, gw := conv2dBackward(get[float32](x), get[float32](w), get[float32](dy), g)
		storeAs(dx, gx)
		storeAs(dw, gw)
	}
	return dx, dw
}

func conv2dBackward[T float](xs, ws, gs []T, g ConvGeom) (dx, dw []T) {
	ckk, hw := g.C*g.KH*g.KW, g.OutH*g.OutW
	cols := make([]T, ckk*hw)
	dx, dw = make([]T, g.N*g.C*g.H*g.W), make([]T, g.Cout*ckk)
	for n := range g.N {
		gy := gs[n*g.Cout*hw:]
		im2col(cols, xs[n*g.C*g.H*g.W:], g, false)
		gemmT(false, true, g.Cout, ckk, hw, gy, hw, cols, hw, 1, dw, ckk) // dW += dy·colsᵀ
		gemmT(true, false, ckk, hw, g.Cout, ws, ckk, gy, hw, 0, cols, hw) // dcols = Wᵀ·dy
		im2col(cols, dx[n*g.C*g.H*g.W:], g, true)
	}
	return dx, dw
}

// im2col lays out one image's receptive fields as cols [C·KH·KW, OH·OW];
// with back set it is the adjoint, adding every entry of cols back to the
// pixel it came from.
func im2col[T float](cols, img []T, g ConvGeom, back bool) {
	i := 0
	for c := range g.C {
		for ky := range g.KH {
			for kx := range g.KW {
				for oy := range g.OutH {
					row := cols[i : i+g.OutW]
					i += g.OutW
					y := oy*g.Stride - g.Pad + ky
					if y < 0 || y >= g.H {
						if !back {
							clear(row)
						}
						continue
					}
					line := img[(c*g.H+y)*g.W : (c*g.H+y+1)*g.W]
					for ox := range row {
						x := ox*g.Stride - g.Pad + kx
						switch {
						case x < 0 || x >= g.W:
							if !back {
								row[ox] = 0
							}
						case back:
							line[x] += row[ox]
						default:
							row[ox] = line[x]
						}
					}
				}
			}
		}
	}
}

// gemmT dispatches a GEMM over compute-type slices to the float32 or float64 kernel.
func gemmT[T float](transA, transB bool, m, n, k int, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	switch a := any(a).(type) {
	case []float64:
		gemm.Dgemm(transA, transB, m, n, k, a, lda, any(b).([]float64), ldb, float64(beta), any(c).([]float64), ldc)
	case []float32:
		gemm.Sgemm(transA, transB, m, n, k, a, lda, any(b).([]float32), ldb, float32(beta), any(c).([]float32), ldc)
	}
}
