package fabric

import (
	"fmt"
	"io"
)

// IsGlobalZero reports whether this is rank 0 of the job (true on one
// device): the rank that writes shared files and reports.
func (f *Fabric) IsGlobalZero() bool {
	if f.tensors != nil { // the strategy's ranks are a mesh column
		return f.mesh.c.Rank() == 0
	}
	_, r := f.ranks()
	return r == 0
}

// Print writes a line to w on rank 0 only (Lightning's fabric.print): the
// job's one report, however many processes run it. It returns what
// fmt.Fprintln does; other ranks write nothing.
func (f *Fabric) Print(w io.Writer, a ...any) (int, error) {
	if !f.IsGlobalZero() {
		return 0, nil
	}
	return fmt.Fprintln(w, a...)
}
