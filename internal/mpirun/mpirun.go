// Package mpirun helps weft's tests run Open MPI jobs.
package mpirun

import "regexp"

// race is how Open MPI 4.1's runtime reports a process that finalized and
// exited while mpirun was still recording it, when several jobs run at
// once: "rank N with PID 0" names no real process (open-mpi/ompi#9389,
// #12607), and the job's own output is complete.
var race = regexp.MustCompile(`with PID 0 on\s+node \S+ exiting improperly`)

// Race reports whether a failed job's output is that report.
func Race(out []byte) bool { return race.Match(out) }

// Retry runs job and, when it fails with Race, runs it once more: job must
// start afresh each time (a new output folder).
func Retry(job func() ([]byte, error)) ([]byte, error) {
	out, err := job()
	if err != nil && Race(out) {
		return job()
	}
	return out, err
}
