package mpirun

import (
	"errors"
	"testing"
)

// TestRetryOnlyTheRace: a job failing with Open MPI's PID 0 report runs
// again; any other failure, and a success, run once.
func TestRetryOnlyTheRace(t *testing.T) {
	report := []byte("{\"losses\":[1]}\nmpirun has exited due to process rank 3 with PID 0 on\nnode vm exiting improperly. There are three reasons")
	for _, c := range []struct {
		name  string
		first []byte
		fail  error
		runs  int
	}{
		{"race", report, errors.New("exit status 1"), 2},
		{"other failure", []byte("mpirun has exited due to process rank 1 with PID 4017 on\nnode x exiting improperly"), errors.New("exit status 1"), 1},
		{"success", report, nil, 1},
	} {
		runs := 0
		_, err := Retry(func() ([]byte, error) {
			runs++
			if runs == 1 {
				return c.first, c.fail
			}
			return nil, nil
		})
		if runs != c.runs || (c.runs == 2 && err != nil) {
			t.Errorf("%s: %d runs (err %v), want %d", c.name, runs, err, c.runs)
		}
	}
}
