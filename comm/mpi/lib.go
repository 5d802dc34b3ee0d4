package mpi

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/ebitengine/purego"
)

// libraries are the names Open MPI's library goes by, tried in order. The
// versioned names need only the runtime package, not the -dev one.
var libraries = []string{"libmpi.so.40", "libmpi.so", "libmpi.40.dylib", "libmpi.dylib"}

// Constants of Open MPI's mpi.h.
const (
	threadMultiple = 3          // MPI_THREAD_MULTIPLE
	inPlace        = uintptr(1) // MPI_IN_PLACE
	maxErrorString = 256        // MPI_MAX_ERROR_STRING
	maxHostName    = 256        // MPI_MAX_PROCESSOR_NAME
)

// lib is Open MPI's C API, bound with purego. Handles are pointers:
// Open MPI's predefined ones (MPI_COMM_WORLD, MPI_BYTE ...) are the
// addresses of exported globals. Every function returns an MPI error code.
type lib struct {
	initThread    func(argc, argv unsafe.Pointer, required int32, provided *int32) int32
	finalize      func() int32
	commRank      func(comm uintptr, rank *int32) int32
	commSize      func(comm uintptr, size *int32) int32
	commDup       func(comm uintptr, dup *uintptr) int32
	commSplit     func(comm uintptr, color, key int32, sub *uintptr) int32
	commFree      func(comm *uintptr) int32
	setErrhandler func(comm, errhandler uintptr) int32
	errorString   func(code int32, s *byte, n *int32) int32
	processorName func(name *byte, n *int32) int32
	abort         func(comm uintptr, code int32) int32

	// The collectives are nonblocking, so that a wait for them can end
	// (see conn.await); each sets req, completed by test.
	iallgather  func(send []byte, scount int32, stype uintptr, recv []byte, rcount int32, rtype, comm uintptr, req *uintptr) int32
	iallgatherv func(send uintptr, scount int32, stype uintptr, recv []byte, rcounts, displs []int32, rtype, comm uintptr, req *uintptr) int32
	ialltoall   func(send []byte, scount int32, stype uintptr, recv []byte, rcount int32, rtype, comm uintptr, req *uintptr) int32
	ialltoallv  func(send []byte, scounts, sdispls []int32, stype uintptr, recv []byte, rcounts, rdispls []int32, rtype, comm uintptr, req *uintptr) int32
	ibcast      func(buf []byte, count int32, dt uintptr, root int32, comm uintptr, req *uintptr) int32

	isend       func(buf []byte, count int32, dt uintptr, dest, tag int32, comm uintptr, req *uintptr) int32
	irecv       func(buf []byte, count int32, dt uintptr, source, tag int32, comm uintptr, req *uintptr) int32
	test        func(req *uintptr, flag *int32, status unsafe.Pointer) int32
	cancel      func(req *uintptr) int32
	wait        func(req *uintptr, status unsafe.Pointer) int32
	requestFree func(req *uintptr) int32

	world        uintptr // MPI_COMM_WORLD
	byteType     uintptr // MPI_BYTE
	errorsReturn uintptr // MPI_ERRORS_RETURN
}

// load opens Open MPI's library: the file at path, or else the first of
// libraries that the dynamic loader finds.
func load(path string) (*lib, error) {
	names := libraries
	if path != "" {
		names = []string{path}
	}
	var errs []error
	for _, name := range names {
		h, err := dlopen(name)
		if err == nil {
			return bind(h)
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("mpi: Open MPI not found: install openmpi-bin libopenmpi-dev (%w)", errors.Join(errs...))
}

// bind looks up every symbol that lib needs in the library h.
func bind(h uintptr) (*lib, error) {
	l := new(lib)
	var err error
	sym := func(name string) uintptr {
		p, e := dlsym(h, name)
		if e != nil && err == nil {
			err = fmt.Errorf("mpi: the library is not Open MPI: %w", e)
		}
		return p
	}
	fn := func(fptr any, name string) {
		if p := sym(name); p != 0 {
			purego.RegisterFunc(fptr, p)
		}
	}
	fn(&l.initThread, "MPI_Init_thread")
	fn(&l.finalize, "MPI_Finalize")
	fn(&l.commRank, "MPI_Comm_rank")
	fn(&l.commSize, "MPI_Comm_size")
	fn(&l.commDup, "MPI_Comm_dup")
	fn(&l.commSplit, "MPI_Comm_split")
	fn(&l.commFree, "MPI_Comm_free")
	fn(&l.setErrhandler, "MPI_Comm_set_errhandler")
	fn(&l.errorString, "MPI_Error_string")
	fn(&l.processorName, "MPI_Get_processor_name")
	fn(&l.abort, "MPI_Abort")
	fn(&l.iallgather, "MPI_Iallgather")
	fn(&l.iallgatherv, "MPI_Iallgatherv")
	fn(&l.ialltoall, "MPI_Ialltoall")
	fn(&l.ialltoallv, "MPI_Ialltoallv")
	fn(&l.ibcast, "MPI_Ibcast")
	fn(&l.isend, "MPI_Isend")
	fn(&l.irecv, "MPI_Irecv")
	fn(&l.test, "MPI_Test")
	fn(&l.cancel, "MPI_Cancel")
	fn(&l.wait, "MPI_Wait")
	fn(&l.requestFree, "MPI_Request_free")
	l.world = sym("ompi_mpi_comm_world")
	l.byteType = sym("ompi_mpi_byte")
	l.errorsReturn = sym("ompi_mpi_errors_return")
	return l, err
}

// check returns nil for MPI_SUCCESS, else an error with MPI's message.
func (l *lib) check(code int32) error {
	if code == 0 {
		return nil
	}
	var s [maxErrorString]byte
	var n int32
	if l.errorString(code, &s[0], &n) != 0 {
		return fmt.Errorf("MPI error %d", code)
	}
	return fmt.Errorf("MPI error %d: %s", code, s[:n])
}
