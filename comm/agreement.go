package comm

// Agreement is the pair of scalar reductions over every rank of a group
// through which ranks share a decision (a loss scaler's skip, an FP8
// scale's amax; see precision.RankAgreer). Each returns the same result on
// every rank.
type Agreement interface {
	// Any reports whether found is true on any rank.
	Any(found bool) (bool, error)
	// Max returns the largest v over ranks (NaN if any is NaN).
	Max(v float32) (float32, error)
}
