package commtest_test

import (
	"context"
	"fmt"
	"log"
	"testing"
	"time"

	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/comm/commtest"
	"github.com/weftml/weft/comm/local"
	"github.com/weftml/weft/dtype"
)

// A backend's whole conformance test is one call of Run in a test
// function, with a factory for groups of n ranks that give up on a
// missing peer after about a second. (Run needs the *testing.T of a test,
// so this example shows the call and is not run; comm/local's
// TestConformance is this call.)
func ExampleRun() {
	_ = func(t *testing.T) { // func TestConformance(t *testing.T)
		commtest.Run(t, func(n int) []comm.Communicator {
			return local.NewGroup(n, local.Options{Timeout: time.Second})
		})
	}
}

// Awkward wraps a communicator so that every call is delayed and its
// buffers are handed over in pieces, as a slow network would: a correct
// backend gives the same results through it. Run checks every backend
// both ways.
func ExampleAwkward() {
	comms := local.NewGroup(2, local.Options{})
	sums := make([][]float32, 2)
	err := comm.Each(comms, func(r int, c comm.Communicator) error {
		slow := commtest.Awkward(c, time.Millisecond)
		vals := []float32{float32(r + 1), 10 * float32(r+1)}
		buf := make([]byte, 4*len(vals))
		dtype.Encode(dtype.F32, buf, vals, false)
		if err := slow.AllReduce(context.Background(), buf, dtype.F32, comm.Sum); err != nil {
			return err
		}
		dtype.Decode(dtype.F32, vals, buf)
		sums[r] = vals
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(sums)
	// Output: [[3 30] [3 30]]
}
