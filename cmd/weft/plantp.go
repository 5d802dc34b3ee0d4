package main

import (
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/parallel"
)

// planSplit splits the meta model m as rank 0 of a tensor-parallel group
// of tp ranks would hold it, with sequence parallelism if sequence (tp ≤ 1
// leaves it whole and returns nil), so that the plan measures a rank's
// shares.
func planSplit(m models.Model, model string, tp, devices int, sequence bool) (*parallel.Layout, error) {
	switch {
	case tp < 0:
		return nil, fmt.Errorf("tp %d: must be at least 1", tp)
	case tp <= 1 && sequence:
		return nil, errors.New("sequence parallel: needs tp above 1")
	case tp <= 1:
		return nil, nil
	}
	if devices%tp != 0 {
		return nil, fmt.Errorf("tp %d does not divide devices %d: a mesh row holds tp ranks", tp, devices)
	}
	plan, err := models.TensorPlan(model, sequence)
	if err != nil {
		return nil, err
	}
	// Splitting reads only the group's rank and size; nothing is sent.
	group, err := comm.Open("local", tp, 0)
	if err != nil {
		return nil, err
	}
	l, err := parallel.Parallelize(m, group[0], plan)
	var closed error
	for _, c := range group {
		closed = errors.Join(closed, c.Close())
	}
	return l, errors.Join(err, closed)
}

// printSplit shows each split Linear's layout and a rank's share of its
// weight, the modules that run on shares of the sequence, and the
// tensor-parallel group's collectives per step by Megatron's count: per
// transformer layer, two all-reduces of the (B, T, C) activation forward
// and two backward, B a data-parallel rank's rows; with sequence
// parallelism each becomes a reduce-scatter and an all-gather.
func printSplit(out io.Writer, l *parallel.Layout, m models.Model, rows int) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "tensor parallel over %d ranks\tlayout\tweight\tshare\tweight B per rank\n", l.Group.Size())
	for _, s := range l.Linears {
		w := s.Linear.Weight.Value
		fmt.Fprintf(tw, "%s\t%s\t%v\t%v\t%d\n", s.Path, s.Style, s.Full, w.Shape(), w.Bytes())
	}
	for _, s := range l.Sequence {
		fmt.Fprintf(tw, "%s\t%s\t\t\t\n", s.Path, s.Style)
	}
	tw.Flush()
	g, ok := m.(*models.GPT)
	if !ok {
		return
	}
	layers, t, c, n := len(g.Blocks), models.ReferenceGPT.Context, g.Tok.Weight.Value.Dim(1), l.Group.Size()
	act := rows * t * c
	if len(l.Sequence) == 0 {
		fmt.Fprintf(out, "tensor parallel: per step, each rank all-reduces 4 × %d layers × (%d rows × %d tokens × %d width) = %d activation elements (2 forward, 2 backward per layer) in its group; everything else stays replicated\n",
			layers, rows, t, c, 4*layers*act)
		return
	}
	seqs := (4*layers+2)*rows + 1
	fmt.Fprintf(out, "sequence parallel: per step, each rank reduce-scatters 4 × %d layers × (%d rows × %d tokens × %d width) = %d activation elements (sends them all, keeps 1/%d) and all-gathers its 1/%d share of ((4 × %d layers + 2) × %d rows + 1) = %d sequences of %d × %d: %d elements (2 forward and 2 backward per layer, the tok and pos gradients, ln_f's output); on a ring the same bytes as the %d all-reduced without it. The norms' and row biases' gradients add an all-reduce of %d elements.\n",
		layers, rows, t, c, 4*layers*act, n, n, layers, rows, seqs, t, c, seqs*t*c/n, 4*layers*act, 6*layers*c+2*c)
}
