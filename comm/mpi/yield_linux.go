package mpi

import "syscall"

// yield gives this thread's core to another process, if one is waiting
// for it (sched_yield): ranks sharing a machine's cores spin while they
// wait for each other, as Open MPI's own waits do when oversubscribed.
func yield() { syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
