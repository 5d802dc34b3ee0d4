//go:build !(darwin || freebsd || linux || netbsd)

package mpi

import (
	"errors"
	"runtime"
)

var errUnsupported = errors.New("loading Open MPI is not supported on " + runtime.GOOS)

func dlopen(string) (uintptr, error)         { return 0, errUnsupported }
func dlsym(uintptr, string) (uintptr, error) { return 0, errUnsupported }
