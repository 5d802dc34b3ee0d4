package gemm

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/weftml/weft/dtype"
)

// The paths for products of two bfloat16 operands (see BF16Path).
const (
	PathDot   = "dot"
	PathWiden = "widen"
	PathAuto  = "auto"
)

// BF16Env names the environment variable that sets the bfloat16 path at
// start-up, as SetBF16Path does; unset means "auto".
const BF16Env = "WEFT_GEMM_BF16"

var (
	bf16Choice atomic.Value // string: PathDot, PathWiden or PathAuto
	bf16Timed  atomic.Int32 // auto's progress: untimed, timing, or the path it chose
)

// The states of bf16Timed.
const (
	untimed int32 = iota
	timing
	timedDot
	timedWiden
)

// setBF16FromEnv sets the path BF16Env names, once the kernels are chosen.
func setBF16FromEnv() {
	p := os.Getenv(BF16Env)
	if p == "" {
		p = PathAuto
	}
	if err := SetBF16Path(p); err != nil {
		panic(fmt.Sprintf("gemm: %s: %v", BF16Env, err))
	}
}

// BF16Paths returns the paths this machine has for products of two
// bfloat16 operands: "dot" where the CPU has VDPBF16PS, and "widen".
func BF16Paths() []string {
	if single.bf16.fn != nil {
		return []string{PathDot, PathWiden}
	}
	return []string{PathWiden}
}

// SetBF16Path sets how F32 multiplies two bfloat16 operands (unscaled):
// "dot" multiplies pairs of them with VDPBF16PS; "widen" widens them to
// float32 while packing and runs the float32 kernel, which is faster where
// VDPBF16PS has no more throughput than two float32 FMAs (Intel CPUs
// without AMX); "auto" times both on first use and keeps the faster. The
// results are the same bits on every path (those of VDPBF16PS, see
// stubs_amd64.go), but for which NaN comes out where several meet. It
// returns an error, changing nothing, for a path BF16Paths does not list.
func SetBF16Path(p string) error {
	if p != PathAuto && !slices.Contains(BF16Paths(), p) {
		return fmt.Errorf("bfloat16 path %q, want %s or %s", p, strings.Join(BF16Paths(), ", "), PathAuto)
	}
	bf16Choice.Store(p)
	return nil
}

// BF16Path returns the path set for products of two bfloat16 operands,
// with "auto" resolved to the one it chose.
func BF16Path() string {
	if bf16Dot() {
		return PathDot
	}
	return PathWiden
}

// bf16Dot reports whether products of two bfloat16 operands take the dot
// path, if the kernels in use have it.
func bf16Dot() bool {
	switch bf16Choice.Load().(string) {
	case PathDot:
		return single.bf16.fn != nil
	case PathWiden:
		return false
	}
	return single.bf16.fn != nil && bf16Fastest() == PathDot
}

// bf16Fastest returns the path auto chose, timing both on its first call.
// A call while the timing runs, on another goroutine or on the timing's
// own (a helper's job that it drains), takes the widen path meanwhile
// rather than wait for it, which could wait for itself: every path gives
// the same bits.
func bf16Fastest() string {
	switch bf16Timed.Load() {
	case timedDot:
		return PathDot
	case untimed:
		if bf16Timed.CompareAndSwap(untimed, timing) {
			p, state := measureBF16(), timedWiden
			if p == PathDot {
				state = timedDot
			}
			bf16Timed.Store(state)
			return p
		}
	}
	return PathWiden
}

// measureBF16 returns the faster path on this machine: the best of three
// timings of each, interleaved, of a product large enough to be split
// between goroutines as large ones are.
func measureBF16() string {
	const m, n, k = 192, 192, 1024
	data := make([]byte, 2*m*k)
	for i := 0; i < len(data); i += 2 {
		data[i], data[i+1] = byte(i), 0x3f // values in [0.5, 2)
	}
	a := Matrix{DType: dtype.BF16, Data: data, LD: k}.operand("A", m, k)
	bt := Matrix{DType: dtype.BF16, Data: data, LD: k}.operand("Bᵀ", n, k)
	c := make([]float32, m*n)
	var best [2]time.Duration // dot, widen
	for range 3 {
		for i, kern := range []kernel[float32]{single.bf16, single.widen} {
			g := gemm[float32]{m: m, n: n, k: k, a: a, bt: bt, c: c, ldc: n, kern: kern, pairs: dotPairs, pk: &single.pack}
			if i == 1 {
				g.pairs = widenPairs
			}
			start := time.Now()
			g.run(&single)
			if d := time.Since(start); best[i] == 0 || d < best[i] {
				best[i] = d
			}
		}
	}
	if best[0] < best[1] {
		return PathDot
	}
	return PathWiden
}
