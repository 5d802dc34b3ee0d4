//go:build darwin || freebsd || linux || netbsd

package mpi

import "github.com/ebitengine/purego"

// dlopen loads with RTLD_GLOBAL because Open MPI's plugins, which it loads
// itself, resolve their calls into libmpi through the global namespace.
func dlopen(name string) (uintptr, error) {
	return purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_GLOBAL)
}

func dlsym(h uintptr, name string) (uintptr, error) { return purego.Dlsym(h, name) }
