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
// cuDNN adds it as a separate op): im2col of the whole batch into
// [C·KH·KW, N·OH·OW] and one GEMM, so that small images still make a
// product big enough to use every core.
func Conv2d(x, w *Tensor, stride, pad int) *Tensor {
	g := convGeom(x, w, stride, pad)
	if anyMeta(x, w) {
		return Meta(promoteAll(x, w), g.N, g.Cout, g.OutH, g.OutW)
	}
	out := empty(promoteAll(x, w), g.N, g.Cout, g.OutH, g.OutW)
	if out.dtype == dtype.F64 {
		conv2d[float64](out, x, w, g)
	} else {
		conv2d[float32](out, x, w, g)
	}
	return out
}

func conv2d[T float](out, x, w *Tensor, g ConvGeom) {
	xs, ws, ys := get[T](x), get[T](w), buf[T](out)
	ckk, cols := g.C*g.KH*g.KW, g.N*g.OutH*g.OutW
	col, prod := scratch[T](ckk*cols), scratch[T](g.Cout*cols)
	im2col(col, xs, g, false)
	gemmT(false, false, g.Cout, cols, ckk, ws, ckk, col, cols, 0, prod, cols)
	batchMajor(ys, prod, g.N, g.Cout, g.OutH*g.OutW, false)
	put(out, ys)
	drop(x, xs)
	drop(w, ws)
	release(col)
	release(prod)
}

// Conv2dInputGrad returns the gradient of Conv2d's x given dy
// [N, Cout, OH, OW]: Wᵀ·dy scattered back to pixels.
func Conv2dInputGrad(x, w, dy *Tensor, stride, pad int) *Tensor {
	g := convGeom(x, w, stride, pad)
	dx := empty(promoteAll(x, dy), x.shape...) // conv2dInputGrad clears what it accumulates into
	if dx.dtype == dtype.F64 {
		conv2dInputGrad[float64](dx, w, dy, g)
	} else {
		conv2dInputGrad[float32](dx, w, dy, g)
	}
	return dx
}

func conv2dInputGrad[T float](dx, w, dy *Tensor, g ConvGeom) {
	ws, dxs := get[T](w), buf[T](dx)
	ckk, cols := g.C*g.KH*g.KW, g.N*g.OutH*g.OutW
	col, gy := scratch[T](ckk*cols), productOrder[T](dy, g)
	gemmT(true, false, ckk, cols, g.Cout, ws, ckk, gy, cols, 0, col, cols) // dcols = Wᵀ·dy
	// im2col's adjoint adds into the pixels; for low-precision dx, dxs is
	// scratch with undefined contents, so it must start from zero.
	clear(dxs)
	im2col(col, dxs, g, true)
	put(dx, dxs)
	drop(w, ws)
	release(col)
	release(gy)
}

// Conv2dWeightGrad returns the gradient of Conv2d's w given dy: dy·colsᵀ.
func Conv2dWeightGrad(x, w, dy *Tensor, stride, pad int) *Tensor {
	g := convGeom(x, w, stride, pad)
	dw := empty(promoteAll(w, dy), w.shape...)
	if dw.dtype == dtype.F64 {
		conv2dWeightGrad[float64](dw, x, dy, g)
	} else {
		conv2dWeightGrad[float32](dw, x, dy, g)
	}
	return dw
}

func conv2dWeightGrad[T float](dw, x, dy *Tensor, g ConvGeom) {
	xs, dws := get[T](x), buf[T](dw)
	ckk, cols := g.C*g.KH*g.KW, g.N*g.OutH*g.OutW
	col, gy := scratch[T](ckk*cols), productOrder[T](dy, g)
	im2col(col, xs, g, false)
	gemmT(false, true, g.Cout, ckk, cols, gy, cols, col, cols, 0, dws, ckk) // dW = dy·colsᵀ
	put(dw, dws)
	drop(x, xs)
	release(col)
	release(gy)
}

// productOrder returns dy [N, Cout, OH, OW] as the [Cout, N·OH·OW] matrix
// the GEMMs take, in scratch.
func productOrder[T float](dy *Tensor, g ConvGeom) []T {
	gs := get[T](dy)
	gy := scratch[T](len(gs))
	batchMajor(gs, gy, g.N, g.Cout, g.OutH*g.OutW, true)
	drop(dy, gs)
	return gy
}

// batchMajor copies a [C, N·HW] product into NCHW order [N, C, HW], or
// back with toProduct.
func batchMajor[T float](nchw, prod []T, n, c, hw int, toProduct bool) {
	for i := range n {
		for ch := range c {
			img, row := nchw[(i*c+ch)*hw:][:hw], prod[ch*n*hw+i*hw:][:hw]
			if toProduct {
				copy(row, img)
			} else {
				copy(img, row)
			}
		}
	}
}

// im2col lays out the batch's receptive fields as cols [C·KH·KW, N·OH·OW]
// (image n in columns [n·OH·OW, (n+1)·OH·OW)); with back set it is the
// adjoint, adding every entry of cols back to the pixel it came from.
// Images are independent, so large batches split across cores.
func im2col[T float](cols, imgs []T, g ConvGeom, back bool) {
	parts := min(parallelParts(len(cols)), g.N)
	if parts <= 1 {
		im2colImages(cols, imgs, g, 0, g.N, back)
		return
	}
	parallelSplit(g.N, parts, func(lo, hi int) { im2colImages(cols, imgs, g, lo, hi, back) })
}

// im2colImages is im2col for images [first, last).
func im2colImages[T float](cols, imgs []T, g ConvGeom, first, last int, back bool) {
	hw, ld, s := g.OutH*g.OutW, g.N*g.OutH*g.OutW, g.Stride
	for n := first; n < last; n++ { // one image at a time, so that it stays in cache
		img := imgs[n*g.C*g.H*g.W:][:g.C*g.H*g.W]
		r := 0 // row of cols: (c, ky, kx)
		for c := range g.C {
			for ky := range g.KH {
				// Output rows [y0, y1) read image rows inside the image.
				y0 := max(0, (g.Pad-ky+s-1)/s)
				y1 := min(g.OutH, (g.H+g.Pad-ky+s-1)/s)
				for kx := range g.KW {
					// Output columns [x0, x1) read pixels inside the image.
					x0 := max(0, (g.Pad-kx+s-1)/s)
					x1 := min(g.OutW, (g.W+g.Pad-kx+s-1)/s)
					out := cols[r*ld+n*hw:][:hw]
					r++
					if !back {
						clear(out) // padding
					}
					if x0 >= x1 {
						continue
					}
					width := x1 - x0
					for oy := y0; oy < y1; oy++ {
						row := out[oy*g.OutW+x0:][:width]
						line := img[(c*g.H+oy*s-g.Pad+ky)*g.W+x0*s-g.Pad+kx:][:(width-1)*s+1]
						switch {
						case back:
							for ox, v := range row {
								line[ox*s] += v
							}
						case s == 1:
							copy(row, line)
						default:
							for ox := range row {
								row[ox] = line[ox*s]
							}
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
