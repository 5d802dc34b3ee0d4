// Package proc reads what the operating system counts for this process:
// its CPU time, its resident memory and high-water mark, and the memory
// it may use.
package proc

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
)

// PeakRSS is the process's resident high-water mark, from VmHWM in
// /proc/self/status on Linux; 0 where the system does not say.
func PeakRSS() int64 { return statusKB("VmHWM:") }

// RSS is what the process has resident now (VmRSS); 0 where the system
// does not say.
func RSS() int64 { return statusKB("VmRSS:") }

// statusKB reads the field of /proc/self/status named key, in kB, as bytes.
func statusKB(key string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	return fieldKB(b, key)
}

// fieldKB reads the line of b beginning key, "key:   1234 kB", as bytes;
// 0 if b has none.
func fieldKB(b []byte, key string) int64 {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), key); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// ResetPeakRSS lowers the resident high-water mark to what is resident
// now (Linux 4.0 and later: "5" to /proc/self/clear_refs), so that PeakRSS
// measures from here on; elsewhere it does nothing and says so.
func ResetPeakRSS() error {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}
