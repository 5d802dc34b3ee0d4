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

// A ShardedSplit is a Split that says where the shares of the whole
// weight begin, for arithmetic whose blocks must not straddle two ranks
// (MXFP8's 32-element blocks).
type ShardedSplit interface {
	Split
	// ShareStride is the number of elements, along axis (0 for the
	// output features, 1 for the input features) of the whole [out, in]
	// weight, after which a new share begins; 0 if the split does not cut
	// that axis.
	ShareStride(axis int) int
}
