// Package openblas calls Debian's libopenblas through purego (no cgo), so
// that weft's GEMM can be measured beside OpenBLAS in the same run.
package openblas

import (
	"fmt"
	"os"
	"sync"

	"github.com/ebitengine/purego"
)

// libraries are the sonames Debian's libopenblas packages install.
var libraries = []string{"libopenblas.so.0", "libopenblas.so", "libopenblasp-r0.3.21.so"}

// cblas constants (CBLAS_ORDER, CBLAS_TRANSPOSE).
const (
	rowMajor = 101
	noTrans  = 111
	trans    = 112
)

var (
	load  sync.Once
	sgemm func(order, ta, tb, m, n, k int32, alpha float32, a *float32, lda int32, b *float32, ldb int32, beta float32, c *float32, ldc int32)
	err   error
)

// Load opens libopenblas. OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset
// first: some machines set them to values that halve its speed.
func Load() error {
	load.Do(func() {
		os.Unsetenv("OPENBLAS_CORETYPE")
		os.Unsetenv("OPENBLAS_L2_SIZE")
		for _, name := range libraries {
			h, e := purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_GLOBAL)
			if e != nil {
				continue
			}
			purego.RegisterLibFunc(&sgemm, h, "cblas_sgemm")
			return
		}
		err = fmt.Errorf("openblas: none of %v found (apt-get install libopenblas0-pthread)", libraries)
	})
	return err
}

// Sgemm computes C = op(A)·op(B) + beta·C for row-major float32 matrices.
func Sgemm(transA, transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	op := func(t bool) int32 {
		if t {
			return trans
		}
		return noTrans
	}
	sgemm(rowMajor, op(transA), op(transB), int32(m), int32(n), int32(k), 1, &a[0], int32(lda), &b[0], int32(ldb), beta, &c[0], int32(ldc))
}
