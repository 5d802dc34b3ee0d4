package proc

import (
	"runtime"
	"testing"
	"time"
)

// TestCPUTimeCountsBusyThreads spins two goroutines until the process's
// CPU time has grown by 100ms (the machine may be shared, so the wall time
// this takes is not known) and requires that growth to fit in what the
// cores could give over the wall time it took: a CPU time read in the
// wrong unit fails one way or the other.
func TestCPUTimeCountsBusyThreads(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("getrusage is read on unix; checked on Linux")
	}
	const want = 100 * time.Millisecond
	before, start := CPUTime(), time.Now()
	done := make(chan bool)
	for range 2 {
		go func() {
			for CPUTime()-before < want && time.Since(start) < 20*time.Second {
			}
			done <- true
		}()
	}
	<-done
	<-done
	wall, cpu := time.Since(start), CPUTime()-before
	if cpu < want || cpu > time.Duration(runtime.NumCPU())*wall+10*time.Millisecond {
		t.Errorf("CPU time %v over %v wall with 2 spinning goroutines on %d CPUs", cpu, wall, runtime.NumCPU())
	}
}

// TestPeakRSSSeesATouchedBuffer touches 64 MiB after a reset and requires
// the high-water mark to have grown by most of it.
func TestPeakRSSSeesATouchedBuffer(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("VmHWM is Linux's")
	}
	if err := ResetPeakRSS(); err != nil {
		t.Skip("clear_refs not writable here:", err)
	}
	base := PeakRSS()
	buf := make([]byte, 64<<20)
	for i := 0; i < len(buf); i += 4096 {
		buf[i] = 1
	}
	if got := PeakRSS() - base; got < 48<<20 {
		t.Errorf("peak RSS grew by %d bytes after touching 64 MiB", got)
	}
	runtime.KeepAlive(buf)
}
