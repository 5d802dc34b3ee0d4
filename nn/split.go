package nn

import "github.com/weftml/weft/autograd"

// A Split computes a Linear that holds one rank's share of its weight
// (tensor parallelism): it runs local, the layer's GEMM on the rank's
// share, between the collectives that make the output what the rank's
// neighbours expect, and decides where the layer's bias (the rank's share
// of it, or all of it) is added.
type Split interface {
	Forward(tp *autograd.Tape, x, bias *autograd.Var, local func(x, bias *autograd.Var) *autograd.Var) *autograd.Var
}

// A SplitChecker is a module whose children split only in some ways: a
// tensor-parallel split of any of its children asks it first whether
// ranks ranks may share it.
type SplitChecker interface {
	CheckSplit(ranks int) error
}
