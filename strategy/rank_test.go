package strategy_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/comm/local"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/strategy"
)

// TestAgreementsFollowTheStep: the agreements precision makes inside a
// step (an FP8 amax, the loss scaler's skip), which carry no context of
// their own, run under the step's: cancelling it ends one whose peer
// never comes at once, not after the backend's timeout.
func TestAgreementsFollowTheStep(t *testing.T) {
	info, err := strategy.Lookup("ddp")
	if err != nil {
		t.Fatal(err)
	}
	group := local.NewGroup(2, local.Options{Timeout: time.Minute})
	r, err := strategy.NewRank(info, group[0], nn.NewLinear(nn.NewInit(1), 4, 4, false), strategy.Comms{}, strategy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	began := time.Now()
	_, err = r.Pass(ctx, func() (*autograd.Var, error) { // rank 1 never joins
		_, err := r.Max(1)
		return nil, err
	})
	if !errors.Is(err, context.Canceled) || time.Since(began) > 10*time.Second {
		t.Errorf("Max with its peer missing and the step cancelled: %v after %v; want context.Canceled at once", err, time.Since(began))
	}
	for _, c := range group {
		c.Close()
	}
}

var _ comm.Agreement = (*strategy.Rank)(nil)
