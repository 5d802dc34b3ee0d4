package comm

import (
	"errors"
	"sync"
)

// Each runs fn for every communicator this process holds (all ranks of an
// in-process group, one rank under mpirun), each on its own goroutine, and
// closes each communicator when its fn returns. It returns the ranks'
// errors joined.
func Each(comms []Communicator, fn func(i int, c Communicator) error) error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			errs[i] = fn(i, c)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
