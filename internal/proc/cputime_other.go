//go:build !unix

package proc

import "time"

// CPUTime is 0: this system's process CPU time is not read here.
func CPUTime() time.Duration { return 0 }
