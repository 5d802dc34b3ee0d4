//go:build !linux

package mpi

// yield would give the core to another process; runtime.Gosched, which
// poll calls beside it, is all there is here.
func yield() {}
