package comm

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// OpenFunc returns the communicators of the ranks that this process hosts
// in a group of n ranks: all n for in-process ranks, one for a backend with
// a process per rank. n == 0 asks for the backend's natural size, such as
// the number of processes mpirun started. timeout bounds each collective's
// wait for its peers; 0 means DefaultTimeout.
type OpenFunc func(n int, timeout time.Duration) ([]Communicator, error)

var (
	registryMu sync.RWMutex
	registry   = map[string]OpenFunc{}
)

// Register makes a backend available to Open under name. Backends register
// themselves in init, so a duplicate or nil is a programming error, and
// Register panics like sql.Register rather than let one backend silently
// replace another.
func Register(name string, open OpenFunc) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if open == nil {
		panic("comm: Register of nil backend " + name)
	}
	if _, dup := registry[name]; dup {
		panic("comm: Register called twice for backend " + name)
	}
	registry[name] = open
}

// Open returns this process's communicators in a group of n ranks on the
// named backend, which must have been registered (by importing its
// package, as database/sql drivers are), whose collectives wait timeout
// for their peers (0: DefaultTimeout).
func Open(name string, n int, timeout time.Duration) ([]Communicator, error) {
	registryMu.RLock()
	open, ok := registry[name]
	registryMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("comm: unknown backend %q (registered: %s)", name, strings.Join(Backends(), ", "))
	}
	comms, err := open(n, timeout)
	if err != nil {
		return nil, fmt.Errorf("comm: open %s: %w", name, err)
	}
	return comms, nil
}

// Backends returns the registered backend names, sorted.
func Backends() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	return slices.Sorted(maps.Keys(registry))
}

// LauncherSize returns the number of processes an MPI launcher (mpirun,
// srun with PMI) started this job with, read from the environment it
// sets; ok is false outside such a launcher.
func LauncherSize() (size int, ok bool) {
	for _, key := range []string{"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"} {
		if n, err := strconv.Atoi(os.Getenv(key)); err == nil && n > 0 {
			return n, true
		}
	}
	return 0, false
}

// LauncherLocal returns this process's rank among the job's processes on
// its host and their number, read from what Open MPI's mpirun sets
// (OMPI_COMM_WORLD_LOCAL_RANK and _SIZE); ok is false outside it.
func LauncherLocal() (rank, size int, ok bool) {
	rank, err := strconv.Atoi(os.Getenv("OMPI_COMM_WORLD_LOCAL_RANK"))
	if err != nil || rank < 0 {
		return 0, 0, false
	}
	size, err = strconv.Atoi(os.Getenv("OMPI_COMM_WORLD_LOCAL_SIZE"))
	if err != nil || size <= rank {
		return 0, 0, false
	}
	return rank, size, true
}

// LauncherRank returns this process's rank in the job an MPI launcher
// started, read from the environment it sets; ok is false outside such a
// launcher.
func LauncherRank() (rank int, ok bool) {
	for _, key := range []string{"OMPI_COMM_WORLD_RANK", "PMI_RANK"} {
		if n, err := strconv.Atoi(os.Getenv(key)); err == nil && n >= 0 {
			return n, true
		}
	}
	return 0, false
}
