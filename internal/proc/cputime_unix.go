//go:build unix

package proc

import (
	"syscall"
	"time"
)

// CPUTime is the user and system time all of the process's threads have
// run so far (getrusage RUSAGE_SELF); 0 where the system does not say.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
