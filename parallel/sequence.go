package parallel

// Sequence parallelism (Megatron-LM's, Korthikanti et al. 2022). Between a
// row-parallel Linear and the next column-parallel one a transformer's
// activations (the residual stream, the norms, their inputs and outputs)
// are the same on every rank of the group. A sequence-parallel plan keeps
// only the rank's share of the sequence there, 1/n of the positions (axis
// -2 of (B, T, C) and of (T, C)): the row-parallel Linear reduce-scatters
// its partial sums along the sequence instead of all-reducing them, the
// column-parallel one all-gathers its input, and what ran on every
// position runs on a share. A ring all-reduce is a reduce-scatter and an
// all-gather, so the bytes on the wire stay the same; the activations in
// between are 1/n. A parameter used on a share (a norm's, a row-parallel
// bias) gets part of its gradient on each rank, summed over the group.

import (
	"fmt"
	"slices"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/tensor"
)

// Sequence runs a module that works position by position (a LayerNorm, an
// RMSNorm) on the rank's share of the sequence; the gradients of its
// parameters are summed over the group.
type Sequence struct {
	// Gather says the output is all-gathered whole (the norm before a
	// replicated head, where the sequence-parallel region ends); its
	// gradient, the same on every rank, is cut back to the share.
	Gather bool
}

// Scatter runs a module on the whole sequence and cuts its output to the
// rank's share (an embedding, where the sequence-parallel region begins);
// the output's gradient is all-gathered back whole, so the module's
// parameters get the whole sequence's gradient on every rank.
type Scatter struct{}

// SequenceModule is a module of a Layout that runs on the rank's share of
// the sequence (Sequence) or hands its output on in shares (Scatter).
type SequenceModule struct {
	Path   string // "blocks.0.ln1"
	Style  Style
	Module nn.Module
}

func (s Sequence) String() string {
	if s.Gather {
		return "sequence, gathered"
	}
	return "sequence"
}
func (Scatter) String() string { return "scattered to the sequence" }

func (Sequence) place(path string, mod nn.Module) error { return placeWhole(path, mod) }
func (Scatter) place(path string, mod nn.Module) error  { return placeWhole(path, mod) }

// placeWhole reports whether mod, at path, is left whole, as a sequence
// style needs.
func placeWhole(path string, mod nn.Module) error {
	if lin, ok := mod.(*nn.Linear); ok && lin.Split != nil {
		return fmt.Errorf("%s is already split", path)
	}
	return nil
}

// Scoper returns the autograd.Scoper that runs the plan's Sequence and
// Scatter modules on shares of the sequence, wrapping inner (nil for
// none); inner itself when the plan has none. A data-parallel strategy's
// Scoper must wrap it in turn, so that a norm's gradients are summed over
// the group before the strategy reduces them.
func (l *Layout) Scoper(inner autograd.Scoper) autograd.Scoper {
	if len(l.Sequence) == 0 {
		return inner
	}
	return &sequenceScoper{l: l, inner: inner}
}

type sequenceScoper struct {
	l     *Layout
	inner autograd.Scoper
}

func (s *sequenceScoper) EnterScope(tp *autograd.Tape, module any, x *autograd.Var) (*autograd.Var, func(*autograd.Var) *autograd.Var) {
	in, exit := x, func(out *autograd.Var) *autograd.Var { return out }
	if s.inner != nil {
		in, exit = s.inner.EnterScope(tp, module, x)
	}
	mod, ok := module.(nn.Module)
	if !ok {
		return in, exit
	}
	sm := s.l.sequence[mod]
	switch style := sm.Style.(type) {
	case Scatter:
		return in, func(out *autograd.Var) *autograd.Var { return s.l.cutSequence(tp, exit(out)) }
	case Sequence:
		setAside := s.l.sumPartialGrads(tp, sm)
		return in, func(out *autograd.Var) *autograd.Var {
			out = exit(out)
			setAside()
			if style.Gather {
				out = s.l.gatherSequence(tp, out)
			}
			return out
		}
	}
	return in, exit
}

// Resume passes a recompute's Scoper through to the inner one's (see
// autograd.ScopeResumer).
func (s *sequenceScoper) Resume() autograd.Scoper {
	if r, ok := s.inner.(autograd.ScopeResumer); ok {
		return &sequenceScoper{l: s.l, inner: r.Resume()}
	}
	return s
}

// sumPartialGrads is called as sm's forward starts: once its backward is
// done, the gradients it gave its parameters (partial sums over the
// share's positions) are summed over the group. The returned function,
// called as the forward ends, sets the gradients held before (earlier
// micro-batches') aside during the module's backward, so that only this
// pass's part is summed, then added to them as one device adds it.
func (l *Layout) sumPartialGrads(tp *autograd.Tape, sm SequenceModule) (setAside func()) {
	params := sm.Module.Params()
	held := make([]*tensor.Tensor, len(params))
	tp.OnBackward(func() error { // after mod's backward
		for i, p := range params {
			g := p.Var.Grad
			if g != nil {
				if err := l.sum(g, "the gradient of "+sm.Path+"."+p.Name); err != nil {
					return err
				}
			}
			if held[i] != nil {
				if g != nil {
					held[i].AddInPlace(g)
					tensor.Discard(g)
				}
				p.Var.Grad, held[i] = held[i], nil
			}
		}
		return nil
	})
	return func() {
		tp.OnBackward(func() error { // before mod's backward
			for i, p := range params {
				held[i], p.Var.Grad = p.Var.Grad, nil
			}
			return nil
		})
	}
}

// The four moves between whole sequences and shares. Each views x
// [..., T, C] as rows [P, T·C], in which rank r's share is the block of
// columns [r·K, (r+1)·K), K = T·C/n.

// cutSequence is Scatter's: the rank's share forward, the gradient
// all-gathered whole.
func (l *Layout) cutSequence(tp *autograd.Tape, x *autograd.Var) *autograd.Var {
	return l.onRows(tp, x, true, func(rows *tensor.Tensor) (*tensor.Tensor, func(*tensor.Tensor) *tensor.Tensor) {
		return l.block(rows), func(dy *tensor.Tensor) *tensor.Tensor { return l.join(dy, "the gradient of a sequence's shares") }
	})
}

// gatherSequence is a gathered Sequence's: the whole sequence forward, the
// gradient (the same on every rank) cut to the share.
func (l *Layout) gatherSequence(tp *autograd.Tape, x *autograd.Var) *autograd.Var {
	return l.onRows(tp, x, false, func(rows *tensor.Tensor) (*tensor.Tensor, func(*tensor.Tensor) *tensor.Tensor) {
		return l.join(rows, "a sequence's shares"), l.block
	})
}

// gatherIn is a sequence-parallel column Linear's input: the whole
// sequence forward, the gradient (each rank's GEMM gives part of it)
// reduce-scattered to the share.
func (l *Layout) gatherIn(tp *autograd.Tape, x *autograd.Var) *autograd.Var {
	return l.onRows(tp, x, false, func(rows *tensor.Tensor) (*tensor.Tensor, func(*tensor.Tensor) *tensor.Tensor) {
		return l.join(rows, "the input of a column-parallel Linear"), func(dy *tensor.Tensor) *tensor.Tensor {
			return l.sumBlocks(dy, "the input gradient of a column-parallel Linear")
		}
	})
}

// scatterOut is a sequence-parallel row Linear's output: the partial sums
// reduce-scattered to the share forward, the gradient all-gathered whole.
func (l *Layout) scatterOut(tp *autograd.Tape, y *autograd.Var) *autograd.Var {
	return l.onRows(tp, y, true, func(rows *tensor.Tensor) (*tensor.Tensor, func(*tensor.Tensor) *tensor.Tensor) {
		return l.sumBlocks(rows, "the partial outputs of a row-parallel Linear"), func(dy *tensor.Tensor) *tensor.Tensor {
			return l.join(dy, "the output gradient of a row-parallel Linear")
		}
	})
}

// onRows records move on x viewed as rows [P, T·C]: move returns its
// result for the rows (P·T'·C elements, [P, K] or [P, n, K]) and the
// backward that maps the result's gradient, as rows, to the rows'. The
// result is viewed back as [..., T', C]. whole says x holds the whole
// sequence, which must split evenly.
func (l *Layout) onRows(tp *autograd.Tape, x *autograd.Var, whole bool, move func(rows *tensor.Tensor) (*tensor.Tensor, func(dy *tensor.Tensor) *tensor.Tensor)) *autograd.Var {
	shape := x.Value.Shape()
	d := len(shape)
	if d < 2 {
		panic(failure{fmt.Errorf("sequence parallel: %v has no sequence axis", shape)})
	}
	t, c := shape[d-2], shape[d-1]
	if n := l.Group.Size(); whole && t%n != 0 {
		panic(failure{fmt.Errorf("sequence parallel: a sequence of %d positions does not split over %d ranks", t, n)})
	}
	rows := tp.Reshape(x, -1, t*c)
	p := rows.Value.Dim(0)
	y, back := move(rows.Value)
	moved := tp.RecordUnsaved(y, func(dy *tensor.Tensor) []*tensor.Tensor {
		flat := dy.Reshape(p, -1)
		g := back(flat)
		tensor.FreeView(flat)
		return []*tensor.Tensor{g.Reshape(p, t*c)} // a view the tape frees with g
	}, rows)
	out := slices.Clone(shape)
	out[d-2] = y.Len() / (p * c)
	return tp.Reshape(moved, out...)
}

// block is this rank's block [P, K] of rows [P, n·K].
func (l *Layout) block(rows *tensor.Tensor) *tensor.Tensor {
	k := rows.Dim(1) / l.Group.Size()
	return tensor.Narrow(rows, l.Group.Rank()*k, k)
}

// join all-gathers every rank's block [P, K] into [P, n, K], rows
// [P, n·K].
func (l *Layout) join(block *tensor.Tensor, what string) *tensor.Tensor {
	n, p, k := l.Group.Size(), block.Dim(0), block.Dim(1)
	if block.IsMeta() {
		return tensor.Meta(block.DType(), p, n, k)
	}
	stacked := tensor.New(block.DType(), n, p, k)
	defer tensor.Free(stacked)
	if err := comm.AllGatherTensor(l.context(), l.Group, block, stacked); err != nil {
		panic(failure{fmt.Errorf("sequence parallel: all-gathering %s: %w", what, err)})
	}
	return tensor.Permute(stacked, 1, 0, 2)
}

// sumBlocks reduce-scatters rows [P, n·K]: this rank gets [P, K], the
// sum over ranks of their block r.
func (l *Layout) sumBlocks(rows *tensor.Tensor, what string) *tensor.Tensor {
	n, p := l.Group.Size(), rows.Dim(0)
	k := rows.Dim(1) / n
	if rows.IsMeta() {
		return tensor.Meta(rows.DType(), p, k)
	}
	grouped := rows.Reshape(p, n, k)
	byRank := tensor.Permute(grouped, 1, 0, 2) // [n, P, K]: block r contiguous
	tensor.FreeView(grouped)
	defer tensor.Free(byRank)
	sum := tensor.New(rows.DType(), p, k)
	if err := comm.ReduceScatterTensor(l.context(), l.Group, byRank, sum, comm.Sum); err != nil {
		panic(failure{fmt.Errorf("sequence parallel: reduce-scattering %s: %w", what, err)})
	}
	return sum
}
