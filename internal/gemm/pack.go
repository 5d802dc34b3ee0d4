package gemm

import (
	"encoding/binary"
	"math"
	"unsafe"

	"github.com/weftml/weft/dtype"
)

// operand is op(X) as the packing routines see it. Element (r, p) of op(X)
// is element (r, p) of the stored row-major matrix, or (p, r) if trans; the
// stored matrix starts off elements into f, or into enc for encoded data.
type operand[T float] struct {
	f   []T    // stored elements, or nil if enc holds them
	enc []byte // stored elements in format dt; only when T is float32
	dt  dtype.DType
	lut *[256]float32 // the value of each code, for 8-bit float formats

	// For 4-bit codes in blocks (see Matrix.Codebook):
	cb     *[16]float32
	absmax []float32
	block  int

	off   int
	ld    int
	trans bool
	scale T // multiplies every element as it is packed
}

// transpose returns the operand for op(X)ᵀ.
func (x operand[T]) transpose() operand[T] {
	x.trans = !x.trans
	return x
}

// strides returns the distance in f between consecutive rows of op(X) and
// between consecutive columns.
func (x *operand[T]) strides() (rs, cs int) {
	if x.trans {
		return 1, x.ld
	}
	return x.ld, 1
}

// from returns the operand for the rows of op(X) from r on.
func (x operand[T]) from(r int) operand[T] {
	rs, _ := x.strides()
	x.off += r * rs
	return x
}

// inPlace reports whether the kernel can read op(X) where it is stored.
func (x *operand[T]) inPlace() bool { return x.enc == nil && x.scale == 1 }

// bf16 reports whether op(X) is bfloat16 whose values pack unchanged.
func (x *operand[T]) bf16() bool { return x.enc != nil && x.dt == dtype.BF16 && x.scale == 1 }

// rows returns h stored rows from row i on, n elements of each from column
// j on, as bytes with the first at 0 and the others lds bytes apart: where
// they are stored, or decoded into dec, which must hold h·(n+2) values.
func (x *operand[T]) rows(i, h, j, n int, dec []T, pk *packer) (rows []byte, lds int) {
	size := int(unsafe.Sizeof(x.scale))
	if x.inPlace() {
		e := x.off + i*x.ld + j
		return asBytes(x.f[e : e+(h-1)*x.ld+n]), x.ld * size
	}
	for r := range h {
		x.decode(x.off+(i+r)*x.ld+j, n, dec[r*(n+2):], pk)
	}
	return asBytes(dec[1 : (h-1)*(n+2)+n+1]), (n + 2) * size
}

// row returns n elements of stored row i from column j on, decoded into dec
// (n+2 values) unless they are used where they lie.
func (x *operand[T]) row(i, j, n int, dec []T, pk *packer) []T {
	e := x.off + i*x.ld + j
	if x.inPlace() {
		return x.f[e : e+n]
	}
	return x.decode(e, n, dec, pk)
}

// decode returns the n elements from element e on, decoded and scaled, in
// dec[1:n+1]; dec[0] is room for the low nibble of E2M1 data that starts
// at a high one.
func (x *operand[T]) decode(e, n int, dec []T, pk *packer) []T {
	d := dec[1 : n+1]
	switch {
	case x.enc == nil:
		for i, v := range x.f[e : e+n] {
			d[i] = v * x.scale
		}
		return d
	case x.lut != nil:
		pk.lookup(any(d).([]float32), x.enc[e:e+n], x.lut, float32(x.scale))
		return d
	case x.dt == dtype.BF16:
		pk.widen(any(d).([]float32), x.enc[2*e:2*(e+n)], float32(x.scale))
		return d
	case x.cb != nil:
		d32 := any(d).([]float32)
		for i := 0; i < n; {
			b := (e + i) / x.block
			m := min(n-i, (b+1)*x.block-e-i) // the rest of the segment in block b
			pk.codes(d32[i:i+m], x.enc, e+i, x.cb, x.absmax[b]*float32(x.scale))
			i += m
		}
		return d
	}
	lead := 0
	if x.dt == dtype.E2M1 {
		lead = e & 1 // two codes per byte: decode from the byte's low nibble
	}
	dtype.Decode(x.dt, any(dec[1-lead:n+1]).([]float32), x.enc[x.dt.StorageBytes(e-lead):])
	if x.scale != 1 {
		for i := range d {
			d[i] *= x.scale
		}
	}
	return d
}

// pack stores the rows×kc block of op(X) at (r0, p0) in dst as panels of w
// rows, transposing stored rows with pk.transpose. A panel holds its w values
// of each k step together, in the order the micro-kernel reads them; the
// last panel is padded with zero rows. dec must hold max(8·(kc+2), rows+2)
// values unless op(X) is packed where it lies.
func (x *operand[T]) pack(dst []T, r0, rows, p0, kc, w int, dec []T, pk *packer) {
	padPanel(dst, rows, kc, w)
	if x.trans { // stored rows are op(X) columns: a k step is a run of values
		for p := range kc {
			src := x.row(p0+p, r0, rows, dec, pk)
			for r := 0; r < rows; r += w {
				copy(dst[r*kc+p*w:][:min(w, rows-r)], src[r:])
			}
		}
		return
	}
	// op(X) rows are stored rows, contiguous along k: a panel is their
	// transpose, taken eight rows at a time to bound dec.
	size := int(unsafe.Sizeof(x.scale))
	for r := 0; r < rows; r += w {
		panel := asBytes(dst[r*kc : (r+w)*kc])
		h := min(w, rows-r)
		for i := 0; i < h; i += 8 {
			g := min(8, h-i)
			src, lds := x.rows(r0+r+i, g, p0, kc, dec, pk)
			pk.transpose(g, kc, src, lds, panel[i*size:], w*size)
		}
	}
}

// packBF16 is pack for bfloat16 operands that the kernel multiplies as
// they are: dst holds pairs of k steps, kc+1 >> 1 of them, each in the bits
// of one float32 with the earlier step in its low half (see impl.bf16). An
// odd kc leaves the last high halves zero. dec must hold rows values.
func (x *operand[T]) packBF16(dst []T, r0, rows, p0, kc, w int, dec []T, pk *packer) {
	d32 := unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(dst))), len(dst))
	le := binary.LittleEndian
	kw, odd := (kc+1)/2, kc%2
	padPanel(dst, rows, kw, w)
	if x.trans { // a pair comes from two stored rows, each a run of values
		words := unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(dec))), rows)
		for q := range kw {
			lo := x.enc[2*(x.off+(p0+2*q)*x.ld+r0):][:2*rows]
			if 2*q+1 < kc {
				pk.interleave(words, lo, x.enc[2*(x.off+(p0+2*q+1)*x.ld+r0):][:2*rows])
			} else {
				for r := range words {
					words[r] = uint32(le.Uint16(lo[2*r:]))
				}
			}
			for r := 0; r < rows; r += w {
				copy(d32[r*kw+q*w:][:min(w, rows-r)], words[r:])
			}
		}
		return
	}
	// Both elements of a pair are adjacent in a stored row: pairs are
	// 32-bit words to transpose, but for a last, odd element.
	for r := 0; r < rows; r += w {
		panel := d32[r*kw : (r+w)*kw]
		h := min(w, rows-r)
		e := x.off + (r0+r)*x.ld + p0
		if kw > odd {
			src := x.enc[2*e : 2*(e+(h-1)*x.ld+kc-odd)]
			pk.transpose(h, kw-odd, src, 2*x.ld, asBytes(panel), 4*w)
		}
		if odd == 1 {
			for i := range h {
				panel[(kw-1)*w+i] = uint32(le.Uint16(x.enc[2*(e+i*x.ld+kc-1):]))
			}
		}
	}
}

// packWiden is pack for bfloat16 operands that the widen kernel multiplies:
// each panel is packed as by packBF16 into pairs (w·(kc+1)/2 values), then
// split into two k steps of float32, the high element of each pair first,
// as the dot kernel takes them. An odd kc ends with a zero k step.
func (x *operand[T]) packWiden(dst []T, r0, rows, p0, kc, w int, dec, pairs []T, pk *packer) {
	kw := (kc + 1) / 2
	pairs = pairs[:w*kw]
	for r := 0; r < rows; r += w {
		x.packBF16(pairs, r0+r, min(w, rows-r), p0, kc, w, dec, pk)
		pk.split(any(dst[r*2*kw:(r+w)*2*kw]).([]float32), unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(pairs))), len(pairs)), w)
	}
}

// padPanel zeroes the last panel if it is partial, before packing fills it
// but for its padding rows: one clear is faster than one for each k step.
func padPanel[T float](dst []T, rows, kc, w int) {
	if h := rows % w; h != 0 {
		clear(dst[(rows-h)*kc:][:w*kc])
	}
}

// A packer holds the routines packing runs on, from the impl in use.
type packer struct {
	transpose transposer

	// lookup sets dst[i] to lut[src[i]]·s: it decodes 8-bit float formats.
	lookup func(dst []float32, src []byte, lut *[256]float32, s float32)

	// widen sets dst[i] to bfloat16 i of src, times s.
	widen func(dst []float32, src []byte, s float32)

	// interleave sets dst[i] to the pair of bfloat16 lo[i], hi[i], the
	// first in the low half: it packs a pair of stored rows.
	interleave func(dst []uint32, lo, hi []byte)

	// split sets, for each run q of w pairs of bfloat16 in src (the first
	// in the low half), dst[2q·w+i] to the high element of src[q·w+i] and
	// dst[(2q+1)·w+i] to the low one: it widens packed pairs to two k steps.
	split func(dst []float32, src []uint32, w int)

	// codes sets dst[i] to cb[c]·s, c the 4-bit code of element e+i of
	// src (see Matrix.Codebook): it decodes a run of one block.
	codes func(dst []float32, src []byte, e int, cb *[16]float32, s float32)
}

// luts holds the value of every code of each 8-bit float format.
var luts = func() map[dtype.DType]*[256]float32 {
	codes := make([]byte, 256)
	for c := range codes {
		codes[c] = byte(c)
	}
	m := make(map[dtype.DType]*[256]float32)
	for _, d := range []dtype.DType{dtype.E4M3FN, dtype.E5M2, dtype.E4M3FNUZ, dtype.E5M2FNUZ, dtype.E8M0} {
		m[d] = new([256]float32)
		dtype.Decode(d, m[d][:], codes)
	}
	return m
}()

// lookupGo is packer.lookup in Go.
func lookupGo(dst []float32, src []byte, lut *[256]float32, s float32) {
	for i, c := range src[:len(dst)] {
		dst[i] = lut[c] * s
	}
}

// widenGo is packer.widen in Go.
func widenGo(dst []float32, src []byte, s float32) {
	src = src[:2*len(dst)]
	for i := range dst {
		dst[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(src[2*i:]))<<16) * s
	}
}

// splitGo is packer.split in Go.
func splitGo(dst []float32, src []uint32, w int) {
	dst = dst[:2*len(src)]
	for q := 0; q < len(src); q += w {
		hi, lo := dst[2*q:][:w], dst[2*q+w:][:w]
		for i, v := range src[q : q+w] {
			hi[i], lo[i] = math.Float32frombits(v&0xffff0000), math.Float32frombits(v<<16)
		}
	}
}

// codesGo is packer.codes in Go.
func codesGo(dst []float32, src []byte, e int, cb *[16]float32, s float32) {
	for i := range dst {
		j := e + i
		dst[i] = cb[src[j/2]>>(4-4*(j&1))&15] * s
	}
}

// interleaveGo is packer.interleave in Go.
func interleaveGo(dst []uint32, lo, hi []byte) {
	le := binary.LittleEndian
	lo, hi = lo[:2*len(dst)], hi[:2*len(dst)]
	for i := range dst {
		dst[i] = uint32(le.Uint16(lo[2*i:])) | uint32(le.Uint16(hi[2*i:]))<<16
	}
}

// A transposer stores word p of each of the h rows of src, row i at byte
// i*lds, at byte p*ldd + i*size of dst, for p < n, where size is the word
// size of the kernel it belongs to. The rows may be misaligned.
type transposer func(h, n int, src []byte, lds int, dst []byte, ldd int)

// transposeGo is the transposer for words of type W in Go. Taking four rows
// at a time stores runs of four words instead of single ones.
func transposeGo[W uint32 | uint64](h, n int, src []byte, lds int, dst []byte, ldd int) {
	size := int(unsafe.Sizeof(W(0)))
	le := binary.LittleEndian
	load := func(b []byte) W {
		if size == 4 {
			return W(le.Uint32(b))
		}
		return W(le.Uint64(b))
	}
	store := func(b []byte, v W) {
		if size == 4 {
			le.PutUint32(b, uint32(v))
		} else {
			le.PutUint64(b, uint64(v))
		}
	}
	i := 0
	for ; i+4 <= h; i += 4 {
		s0, s1, s2, s3 := src[i*lds:][:n*size], src[(i+1)*lds:][:n*size], src[(i+2)*lds:][:n*size], src[(i+3)*lds:][:n*size]
		for p := range n {
			d := dst[p*ldd+i*size:][:4*size]
			store(d, load(s0[p*size:]))
			store(d[size:], load(s1[p*size:]))
			store(d[2*size:], load(s2[p*size:]))
			store(d[3*size:], load(s3[p*size:]))
		}
	}
	for ; i < h; i++ {
		s := src[i*lds:][:n*size]
		for p := range n {
			store(dst[p*ldd+i*size:], load(s[p*size:]))
		}
	}
}

// asBytes returns the memory of x.
func asBytes[T any](x []T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), len(x)*int(unsafe.Sizeof(*new(T))))
}
